"""Which of an lm-eval task's metrics assay computes, per output type, and the refusal of every
task whose reported number assay would not reproduce (its own ``process_results``, a metric or
aggregation assay does not compute, a filter) — checked on the indexed config before any data
loads, then on lm-eval's loaded ``Task`` object (Python task classes, the aggregations it chose).

Why refuse rather than report acc anyway: a number under a task's name must be the number
lm-eval gives for it (truthfulqa_mc2's own ``process_results`` gives 0.533 where plain acc gives
0.267). A ``multiple_choice`` task's metrics are lm-eval's own (its ``process_results`` per
document: :mod:`assay.sources.lm_eval_mc`), a ``generate_until`` task's too (its filters and
``process_results``, run by :mod:`assay.verify.lm_eval_metric`); each is aggregated by lm-eval's
own function (mean, bleu, f1, a task's importable ``!function``), so what is refused there is
repeats (votes over samples), Hugging Face evaluate metrics and an aggregation function defined
in the task's own file.

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ast

    from lm_eval.api.task import Task  # no type information of its own (no py.typed)

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
#: a generate_until task's metrics, and a multiple_choice task's, are whatever lm-eval's own
#: filters and ``process_results`` give per document; assay keeps each document's item and
#: aggregates with the very function lm-eval chose (mean, bleu, chrf, ter, f1, mcc, median, an
#: importable ``!function``: :mod:`assay.measure.lm_eval_corpus`); refused is only a function
#: defined in a task's own file, which rows cannot name


def output_type(cfg: Mapping[str, object]) -> str:
    """The task's output type as lm-eval reads its config (unset: ``generate_until``)."""
    return str(cfg.get("output_type") or DEFAULT_OUTPUT_TYPE)


def _name(v: object) -> str:
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
        if out == "multiple_choice":  # each document's item is kept: any aggregation it names
            why = _aggregation_refusal(name, agg)
            if why is not None:
                return why
            continue
        if own:
            continue
        if agg is not None and _name(agg) not in computed[name]:
            return (f"its metric {name!r} is aggregated by {_name(agg)!r}; assay's {name} is "
                    f"lm-eval's {' / '.join(computed[name])}")
    return None


def _aggregation_refusal(metric: str, agg: object) -> str | None:
    """A configured aggregation rows cannot name (:mod:`assay.measure.lm_eval_corpus`): an
    unresolved ``!function`` (a path) defined in the task's own file; one imported there from
    elsewhere (afrixnli's ``weighted_f1_score``) is judged once the task loads."""
    if agg is None or callable(agg) or "/" not in str(agg):
        return None
    import ast
    from pathlib import Path

    from assay.pyast import parse

    path, _, fname = str(agg).rpartition(".")
    if _shipped_module(path):  # lm-eval imports it as lm_eval.tasks.<folder>.<file>
        return None
    try:
        tree = parse(Path(path + ".py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None  # lm-eval reports what it cannot load when the task loads
    if any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign)
           and fname in _defines(n) for n in tree.body):
        return _own_file(metric, fname)
    return None


def _shipped_module(path: str) -> bool:
    """Whether a ``!function`` file is one of lm-eval's shipped tasks' with an importable
    module name (lm-eval's loader names it ``lm_eval.tasks.<folder>.<file>``)."""
    from pathlib import Path

    import lm_eval

    root = Path(lm_eval.__file__).parent / "tasks"
    try:
        rel = Path(path).resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return all(p.isidentifier() for p in rel.parts)


def _defines(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign
             ) -> list[str]:
    import ast

    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [node.name]


def _own_file(metric: str, fname: str) -> str:
    return (f"its metric {metric!r} is aggregated by {fname!r}, a function of the task's own "
            "file, which assay cannot call when it measures (only lm-eval's loader imports "
            "it)")


def _loaded_aggregation_refusal(task: Task) -> str | None:
    """Each aggregation lm-eval chose for the loaded task, named as rows carry it, or why
    not."""
    from assay.measure.lm_eval_corpus import aggregation_ref

    for name, agg in task.aggregation().items():
        if aggregation_ref(agg) is None:
            return _own_file(name, _name(agg))
    return None


def task_refusal(task: Task) -> str | None:
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
    if out == "multiple_choice":  # items kept per document: lm-eval's own function aggregates
        if not callable(c.process_results):
            for name in task.aggregation():
                if name not in computed:
                    return (f"it reports {name!r}, which assay does not compute (for a {out} "
                            f"task it computes {_computed(out)})")
        return _loaded_aggregation_refusal(task)
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
        if m.get("hf_evaluate"):
            return (f"its metric {_name(m['metric'])!r} is Hugging Face evaluate's, which "
                    "assay does not run")
        why = _aggregation_refusal(_name(m["metric"]), m.get("aggregation"))
        if why is not None:
            return why
    return None


def _generate_task_refusal(task: Task) -> str | None:
    """:func:`_generate_refusal` on a loaded generate_until ``Task``, plus the aggregation
    functions lm-eval itself chose for every metric it reports (each must be one rows can
    name: :mod:`assay.measure.lm_eval_corpus`)."""
    c = task.config
    why = _generate_refusal({"repeats": c.repeats, "metric_list": c.metric_list})
    if why is not None:
        return why
    return _loaded_aggregation_refusal(task)


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
