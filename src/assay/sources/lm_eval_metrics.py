"""Which of an lm-eval task's metrics assay computes, per output type, and the refusal of every
task whose reported number assay would not reproduce (its own ``process_results``, a metric or
aggregation assay does not compute, a filter) — checked on the indexed config before any data
loads, then on lm-eval's loaded ``Task`` object (Python task classes, the aggregations it chose).

Why refuse rather than report acc anyway: a number under a task's name must be the number
lm-eval gives for it (truthfulqa_mc2's own ``process_results`` gives 0.533 where plain acc gives
0.267). A ``multiple_choice`` task's metrics are lm-eval's own (its ``process_results`` per
document, f1 and mcc over the corpus: :mod:`assay.sources.lm_eval_mc`) aggregated by one of
lm-eval's mean, nanmean, f1, matthews_corrcoef; a ``generate_until`` task's per-document metrics
are lm-eval's own (its filters and ``process_results``, run by :mod:`assay.verify.lm_eval_metric`);
what is refused there is a number that is not their mean (repeats, corpus-level aggregations).

Example:
    >>> config_refusal({"task": "t", "output_type": "multiple_choice",
    ...                 "metric_list": [{"metric": "acc"}, {"metric": "brier_score"}]})
    "its metric_list asks for 'brier_score', which assay does not compute (for a ...)"
    >>> config_refusal({"task": "t", "output_type": "multiple_choice",
    ...                 "metric_list": [{"metric": "mcc"}]}) is None
    True
    >>> config_refusal({"task": "t", "output_type": "multiple_choice"}) is None
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: per output type: the metrics assay computes, each with the lm-eval aggregations (registry
#: names) that give assay's number (acc cannot be NaN, so nanmean is mean)
COMPUTED: dict[str, dict[str, tuple[str, ...]]] = {
    "multiple_choice": {"acc": ("mean", "nanmean"), "acc_norm": ("mean", "nanmean"),
                        "acc_bytes": ("mean", "nanmean"), "exact_match": ("mean", "nanmean"),
                        # corpus-level: lm-eval's aggregation over every document's (gold, pred)
                        "f1": ("f1",), "mcc": ("matthews_corrcoef",)},
    # each document's process_results is checked to give lm-eval's (lm_eval_loglik)
    "loglikelihood": {"perplexity": ("perplexity",), "acc": ("mean", "nanmean")},
    "loglikelihood_rolling": {"word_perplexity": ("weighted_perplexity",),
                              "byte_perplexity": ("weighted_perplexity",),
                              "bits_per_byte": ("bits_per_byte",)},
}
#: lm-eval's TaskConfig default
DEFAULT_OUTPUT_TYPE = "generate_until"
#: a generate_until task's metrics are whatever lm-eval's own filters and ``process_results``
#: give per document (assay runs them, :mod:`assay.verify.lm_eval_metric`); assay's number is
#: their mean over documents, so only these aggregations (registry names) are lm-eval's number
GENERATE_AGGREGATIONS = ("mean",)
#: a multiple_choice task with its own ``process_results`` (truthfulqa_mc2) reports whatever
#: metrics it returns: assay runs it per document (:mod:`assay.sources.lm_eval_mc`) and
#: aggregates with lm-eval's own function, one of these (registry names)
OWN_MC_AGGREGATIONS = ("mean", "nanmean", "f1", "matthews_corrcoef")


def output_type(cfg: Mapping[str, Any]) -> str:
    """The task's output type as lm-eval reads its config (unset: ``generate_until``)."""
    return str(cfg.get("output_type") or DEFAULT_OUTPUT_TYPE)


def _name(v: Any) -> str:
    """A metric/aggregation as the config names it (an unresolved ``!function`` is a path)."""
    if callable(v):
        return getattr(v, "__name__", repr(v))
    return str(v)


def _computed(out: str) -> str:
    return ", ".join(COMPUTED[out])


def config_refusal(cfg: Mapping[str, Any]) -> str | None:
    """Why assay cannot give lm-eval's numbers for a task config (lm-eval's index entry, its
    ``!function`` tags unresolved), or None. The multiple-choice, rolling and generate_until
    output types are judged here; the caller refuses the others by output type."""
    out = output_type(cfg)
    if out == "generate_until":
        return _generate_refusal(cfg)
    if out not in COMPUTED:
        return None
    # a task's own process_results is allowed: a multiple_choice one's is run per document
    # (lm_eval_mc), a rolling one's result is checked to be lm-eval's (log-likelihood, count)
    # pairs (rolling_counts)
    own = cfg.get("process_results") is not None and out == "multiple_choice"
    if cfg.get("filter_list"):
        return "it has a filter_list, which assay does not apply to log-likelihoods"
    computed = COMPUTED[out]
    for m in cfg.get("metric_list") or ():
        if not isinstance(m, Mapping) or "metric" not in m:
            return f"its metric_list entry {m!r:.60} names no metric"
        name = _name(m["metric"])
        if name not in computed and not own:
            return (f"its metric_list asks for {name!r}, which assay does not compute (for a "
                    f"{out} task it computes {_computed(out)})")
        if m.get("hf_evaluate"):
            return f"its metric {name!r} is Hugging Face evaluate's, which assay does not run"
        agg = m.get("aggregation")
        if own:  # its own metric: whatever it is called, lm-eval's aggregation decides
            if agg is not None and _name(agg) not in OWN_MC_AGGREGATIONS:
                return (f"its metric {name!r} is aggregated by {_name(agg)!r}; assay computes "
                        f"lm-eval's {' / '.join(OWN_MC_AGGREGATIONS)}")
            continue
        if agg is not None and _name(agg) not in computed[name]:
            return (f"its metric {name!r} is aggregated by {_name(agg)!r}; assay's {name} is "
                    f"lm-eval's {' / '.join(computed[name])}")
    return None


def task_refusal(task: Any) -> str | None:
    """Why assay cannot give lm-eval's numbers for a loaded lm-eval ``Task``, or None: what
    :func:`config_refusal` says, plus a Python task class's own ``process_results`` and the
    aggregation functions lm-eval itself chose (its registry's, compared by identity)."""
    from lm_eval.api.registry import get_aggregation
    from lm_eval.api.task import ConfigurableTask

    out = str(task.get_config("output_type") or DEFAULT_OUTPUT_TYPE)
    if out == "generate_until":
        return _generate_task_refusal(task)
    if out not in COMPUTED:
        return None
    c = task.config
    why = config_refusal({"output_type": out, "process_results": c.process_results,
                          "filter_list": c.filter_list, "metric_list": c.metric_list})
    if why is not None:
        return why
    if out == "multiple_choice" and \
            type(task).process_results is not ConfigurableTask.process_results:
        return (f"its Python class {type(task).__name__} computes its metrics with its own "
                "process_results, which assay does not run")
    computed = COMPUTED[out]
    if out == "multiple_choice" and callable(c.process_results):
        computed = {name: OWN_MC_AGGREGATIONS for name in task.aggregation()}
    for name, agg in task.aggregation().items():
        if name not in computed:
            return (f"it reports {name!r}, which assay does not compute (for a {out} task it "
                    f"computes {_computed(out)})")
        if not any(agg is get_aggregation(a) for a in computed[name]):
            return (f"its metric {name!r} is aggregated by {_name(agg)!r}; assay's {name} is "
                    f"lm-eval's {' / '.join(computed[name])}")
    return None


def _generate_refusal(cfg: Mapping[str, Any]) -> str | None:
    """A generate_until config: one completion per document (a per-row grade cannot vote
    across samples) and every metric averaged by lm-eval's mean (corpus-level metrics such as
    bleu are not a mean of per-document numbers)."""
    repeats = cfg.get("repeats")
    if repeats is not None and repeats != 1:
        return (f"it asks for repeats: {repeats} completions per document (filters such as "
                "majority_vote over them); assay grades one completion per document")
    for m in cfg.get("metric_list") or ():
        if not isinstance(m, Mapping) or "metric" not in m:
            return f"its metric_list entry {m!r:.60} names no metric"
        agg = m.get("aggregation")
        if agg is not None and _name(agg) not in GENERATE_AGGREGATIONS:
            return (f"its metric {_name(m['metric'])!r} is aggregated by {_name(agg)!r}; assay "
                    f"reports a generate_until task's metrics as lm-eval's "
                    f"{' / '.join(GENERATE_AGGREGATIONS)} over documents")
    return None


def _generate_task_refusal(task: Any) -> str | None:
    """:func:`_generate_refusal` on a loaded generate_until ``Task``, plus the aggregation
    functions lm-eval itself chose for every metric it reports (compared by identity)."""
    from lm_eval.api.registry import get_aggregation

    c = task.config
    why = _generate_refusal({"repeats": c.repeats, "metric_list": c.metric_list})
    if why is not None:
        return why
    allowed = [get_aggregation(a) for a in GENERATE_AGGREGATIONS]
    for name, agg in task.aggregation().items():
        if not any(agg is a for a in allowed):
            return (f"its metric {name!r} is aggregated by {_name(agg)!r}; assay reports a "
                    "generate_until task's metrics as lm-eval's "
                    f"{' / '.join(GENERATE_AGGREGATIONS)} over documents")
    return None


def rolling_counts(results: Mapping[str, Any], again: Mapping[str, Any], ll: float
                   ) -> str | None:
    """None when a rolling task's ``process_results`` gave lm-eval's shape for one document:
    ``results`` at log-likelihood 0 and ``again`` at ``ll``, every metric one of
    :data:`COMPUTED`'s as ``(the log-likelihood, a count)`` with the same count both times;
    else what differs (then its numbers are not what assay's perplexity computes).

    Example:
        >>> rolling_counts({"word_perplexity": (0.0, 3)}, {"word_perplexity": (-1.5, 3)}, -1.5)
        >>> rolling_counts({"ppl": 1.0}, {"ppl": 2.0}, -1.5)
        "its process_results returns 'ppl', which assay does not compute (for a ...)"
    """
    out = "loglikelihood_rolling"
    if set(results) != set(again):
        return "its process_results returns different metrics for different log-likelihoods"
    for k, v in results.items():
        if k not in COMPUTED[out]:
            return (f"its process_results returns {k!r}, which assay does not compute (for a "
                    f"{out} task it computes {_computed(out)})")
        w = again[k]
        ok = all(isinstance(x, tuple | list) and len(x) == 2 for x in (v, w))
        if not ok or v[0] != 0.0 or w[0] != ll or v[1] != w[1] or \
                not isinstance(v[1], int | float) or not math.isfinite(v[1]) or v[1] <= 0:
            return (f"its process_results returns {k!r} as {v!r:.60} (not lm-eval's "
                    "(log-likelihood, positive count) pair), so assay's perplexity would differ")
    return None
