"""Every metric an lm-eval generate_until task reports (``exact_match,flexible-extract`` ...),
under lm-eval's name, as assay's mean over documents with its interval, beside lm-eval's stderr.

Why beside lm-eval's stderr: a user moving from lm-eval compares assay's figure with the one
lm-eval printed; lm-eval's ``stderr_for_metric(mean)`` (the sample standard deviation over
documents / sqrt(n)) is that figure, computed by lm-eval's own function. The interval is assay's
(clustered Wilson over tasks, here documents), the same as pass@1's.

Example:
    >>> rows = [{"task_id": str(i), "reward": 1.0 * (i < 2),
    ...          "markers": {"exact_match,strict-match": 1.0 * (i < 2),
    ...                      "exact_match,flexible-extract": 1.0 * (i < 3)}} for i in range(4)]
    >>> r = lm_eval_means(rows)
    >>> [(e.name, e.value) for e in r.metrics]
    [('exact_match,strict-match', 0.5), ('exact_match,flexible-extract', 0.75)]
    >>> round(r.stderr[1], 4)
    0.25
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from assay.errors import MeasureError
from assay.intervals import TASK_METHOD, task_interval
from assay.results import Estimate, Result

if TYPE_CHECKING:
    from assay.rows import RowsLike

#: One member task as lm-eval reports it: ``{"acc,none": mean, "acc_stderr,none": stderr or
#: "N/A", ..., "sample_len": documents}``
TaskMetrics: TypeAlias = dict[str, float | int | str]

#: simple_evaluate's default ``bootstrap_iters``: with it ``stderr_for_metric(mean)`` is
#: lm-eval's closed-form ``mean_stderr`` (mean is not bootstrapped)
BOOTSTRAP_ITERS = 100000


@dataclass(frozen=True)
class LmEvalMeans(Result):
    """Each ``metric,filter`` marker's mean over documents (lm-eval's order), its interval,
    and lm-eval's stderr for it (None below 2 documents, where lm-eval prints N/A)."""

    metrics: tuple[Estimate, ...]
    stderr: tuple[float | None, ...]
    n_tasks: int
    n_rows: int
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " | ".join(map(str, self.metrics))

    def _headline(self) -> Estimate:
        return self.metrics[0]  # the task's first metric, the rows' reward

    def report(self) -> str:
        lines = [str(e) for e in self.metrics]
        methods = dict.fromkeys(e.interval.method for e in self.metrics if e.interval)
        lines.append(f"{self.n_rows} rows over {self.n_tasks} documents; intervals: "
                     f"{'; '.join(methods) or TASK_METHOD}; stderr: lm-eval's")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def metric_markers(markers: Sequence[Mapping[str, object] | None]) -> list[str]:
    """lm-eval's ``metric,filter`` marker names among the rows' markers, first seen first
    (reward models' ``rm:`` markers and others have no comma)."""
    names: dict[str, None] = {}
    for mk in markers:
        for k in dict(mk or []):
            if "," in k and not k.startswith("rm:"):
                names.setdefault(k)
    return list(names)


def lm_eval_means(rows: RowsLike, *, level: float = 0.95) -> LmEvalMeans:
    """The mean, interval, n and lm-eval stderr of every ``metric,filter`` marker (module
    docstring); a row without the marker (a completion the verifier could not grade) is left
    out of that metric, with a warning."""
    from lm_eval.api.metrics import mean, stderr_for_metric

    from assay.measure.lm_eval_corpus import corpus_items, corpus_spread, resolve
    from assay.rows import as_table

    table = as_table(rows, require=())
    if table.num_rows == 0:
        raise MeasureError("lm_eval_metrics: no rows")
    markers = table.column("markers").to_pylist()
    names = metric_markers(markers)
    order, corpus, uncorpus = corpus_items(table)
    if not names and not corpus:
        raise MeasureError("lm_eval_metrics: no row has an lm-eval metric marker "
                           "(metric,filter); grade with the lm_eval verifier")
    tids = table.column("task_id").to_pylist()
    stderr_fn = stderr_for_metric(mean, BOOTSTRAP_ITERS)
    ests, errs, warnings = [], [], []
    all_tasks: set[object] = set()
    for name in names:
        per: dict[object, list[float]] = {}
        for t, mk in zip(tids, markers):
            v = dict(mk or []).get(name)
            if v is not None:
                per.setdefault(t, []).append(float(v))
        all_tasks |= set(per)
        # one completion per document (k: 1), so a task's mean is lm-eval's per-document value
        vals = np.array([float(np.mean(per[t])) for t in sorted(per, key=str)])
        n_rows = sum(len(v) for v in per.values())
        if n_rows < table.num_rows:
            warnings.append(f"{name}: {table.num_rows - n_rows} rows without it (not graded) "
                            "left out")
        in_unit = bool(len(vals)) and bool(np.all((vals >= 0) & (vals <= 1)))
        iv = task_interval(vals, floor=1.0, level=level) if in_unit else None
        se = float(stderr_fn(list(vals))) if stderr_fn is not None and len(vals) > 1 else None
        note = f"lm-eval stderr {se:.4f}" if se is not None and math.isfinite(se) else None
        ests.append(Estimate(name, float(vals.mean()) if len(vals) else float("nan"), iv,
                             len(vals), unit="documents", n_rows=n_rows, note=note))
        errs.append(se)
    for key, (ref, items) in corpus.items():
        # a corpus metric (bleu): lm-eval's own function over every document's item, never a
        # mean under its name (lm_eval_corpus)
        if uncorpus:
            warnings.append(f"{key}: {uncorpus} rows without it (not graded) left out")
        se, iv, note = corpus_spread(key, ref, items, level)
        ests.append(Estimate(key, float(resolve(ref)(items)), iv, len(items), unit="documents",
                             n_rows=len(items), note=note))
        errs.append(se)
    if order:  # lm-eval's order of its metrics, averaged and corpus ones mixed
        rank = {k: i for i, k in enumerate(order)}
        pairs = sorted(zip(ests, errs), key=lambda p: rank.get(p[0].name, len(rank)))
        ests, errs = [p[0] for p in pairs], [p[1] for p in pairs]
    n_docs = max([len(all_tasks)] + [len(v[1]) for v in corpus.values()])
    if n_docs < 10:
        warnings.append(f"only {n_docs} documents: intervals are wide")
    return LmEvalMeans(tuple(ests), tuple(errs), n_docs, table.num_rows, tuple(warnings))


@dataclass(frozen=True)
class LmEvalGroup(Result):
    """One lm-eval group's aggregate, each metric of its ``aggregate_metric_list`` as lm-eval's
    ``Group.aggregate`` computes it (with lm-eval's own functions), with lm-eval's stderr (None:
    its "N/A") and, for a size-weighted mean, assay's interval over the pooled documents; and
    each member's value. ``metrics`` is empty where lm-eval gives no aggregate (``note`` says
    why: a tag, no aggregate_metric_list)."""

    group: str
    metrics: tuple[Estimate, ...]
    stderr: tuple[float | None, ...]
    members: tuple[Estimate, ...]
    n_rows: int
    note: str | None = None
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        return (" | ".join(map(str, self.metrics)) if self.metrics
                else f"{self.group}: members only ({len(self.members)} member values)")

    def _headline(self) -> Estimate:
        return (self.metrics or self.members)[0]

    def report(self) -> str:
        lines = [str(e) for e in self.metrics]
        if self.note:
            lines.append(self.note)
        lines.append("members:")
        lines += [f"  {e}" for e in self.members]
        lines.append(f"{self.n_rows} rows; intervals: {TASK_METHOD} over documents (a "
                     "size-weighted mean's over the pooled documents); stderr: lm-eval's")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def member_metrics(rows: RowsLike, mode: str | None, metrics: Sequence[str] | None = None, *,
                   level: float = 0.95) -> tuple[TaskMetrics, dict[str, np.ndarray | Estimate]]:
    """One member task's graded rows as lm-eval reports the task: ``{"acc,none": mean,
    "acc_stderr,none": stderr or "N/A", ..., "sample_len": documents}`` (lm-eval's
    ``stderr_for_metric(mean)``, "N/A" below 2 documents, as lm-eval), and each metric's
    per-document values. A metric lm-eval aggregates other than by mean (f1, mcc, bleu) is
    lm-eval's function over the documents' items, its stderr lm-eval's bootstrap replayed
    (:func:`assay.measure.lm_eval_corpus.corpus_spread`; "N/A" where lm-eval has none), and in
    place of per-document values its :class:`Estimate` (assay's interval over documents).
    ``mode``: the source's mode; where its rows' reward is a choice's accuracy (the mode
    table's ``choice_accuracy`` reads them) and no row has an lm-eval marker, acc is the
    reward and acc_norm, acc_bytes markers; otherwise every ``metric,filter`` marker.
    ``metrics``: only these (the task's ``metric_list``; None: all).

    Example:
        >>> rows = [{"task_id": str(i), "reward": 1.0 * (i < 1), "markers": {"acc_norm": 1.0}}
        ...         for i in range(4)]
        >>> m, docs = member_metrics(rows, "choices")
        >>> m["acc,none"], m["acc_norm,none"], m["sample_len"], round(m["acc_stderr,none"], 4)
        (0.25, 1.0, 4, 0.25)
    """
    from lm_eval.api.metrics import mean, stderr_for_metric

    from assay.measure.lm_eval_corpus import corpus_spread, non_mean_items, resolve
    from assay.rows import as_table

    table = as_table(rows, require=())
    tids = table.column("task_id").to_pylist()
    markers = [dict(mk or []) for mk in table.column("markers").to_pylist()]
    # a multiple_choice task's own per-document items (lm_eval_mc) are its lm-eval metrics
    # (truthfulqa_mc2's acc is its mc2 mass); rows without them have the reward as acc
    if mode is not None and _reward_is_accuracy(mode) and not metric_markers(markers):
        rewards = table.column("reward").to_pylist()
        got = {"acc,none": rewards}
        for m in ("acc_norm", "acc_bytes"):
            if any(m in mk for mk in markers):
                got[f"{m},none"] = [mk.get(m) for mk in markers]
    else:
        got = {k: [mk.get(k) for mk in markers] for k in metric_markers(markers)}
    if metrics is not None:
        got = {k: v for k, v in got.items() if k.partition(",")[0] in metrics}
    stderr_fn = stderr_for_metric(mean, BOOTSTRAP_ITERS)
    out: TaskMetrics = {}
    docs: dict[str, np.ndarray | Estimate] = {}
    n_docs: set[object] = set()
    for key, vals in got.items():
        per: dict[object, list[float]] = {}
        for t, v in zip(tids, vals):
            if v is not None:
                per.setdefault(t, []).append(float(v))
        if not per:
            continue
        arr = np.array([float(np.mean(per[t])) for t in sorted(per, key=str)])
        metric, _, filt = key.partition(",")
        out[key] = float(mean(list(arr)))
        out[f"{metric}_stderr,{filt}"] = (float(stderr_fn(list(arr)))
                                          if stderr_fn is not None and len(arr) > 1 else "N/A")
        docs[key] = arr
        n_docs |= set(per)
    n_items = 0
    corpus = non_mean_items(table) if "judge_meta" in table.column_names else {}
    for key, (ref, items) in corpus.items():
        metric, _, filt = key.partition(",")
        if key in out or (metrics is not None and metric not in metrics):
            continue
        # lm-eval reports such a metric as its function over the task's documents and its
        # stderr as its bootstrap (evaluator_utils); that value is what Group.aggregate means
        value = float(resolve(ref)(items))
        se, iv, note = corpus_spread(key, ref, items, level)
        out[key] = value
        out[f"{metric}_stderr,{filt}"] = "N/A" if se is None else float(se)
        docs[key] = Estimate(key, value, iv, len(items), unit="documents", n_rows=len(items),
                             note=note)
        n_items = max(n_items, len(items))
    # lm-eval's sample_len: the most documents any metric was computed on
    out["sample_len"] = max(len(n_docs), n_items)
    return out, docs


def _reward_is_accuracy(mode: str) -> bool:
    """Whether a source mode's rows have a choice's accuracy as reward: the mode table's
    ``choice_accuracy`` measure reads them (imported here, at call time: stages/ imports
    measure/ only inside its functions, so there is no import cycle)."""
    from assay.modes import row_of

    return "choice_accuracy" in row_of(mode).measures


def lm_eval_group(group: str, aggregate: Sequence[Mapping[str, object]] | None,
                  task_metrics: Mapping[str, Mapping[str, Any]],
                  per_doc: Mapping[str, Mapping[str, np.ndarray | Estimate]], *,
                  n_rows: int = 0, note: str | None = None, level: float = 0.95) -> LmEvalGroup:
    """The group's aggregate over its leaf tasks (``task_metrics``: ``{task: member_metrics'
    first value}`` in lm-eval's leaf order; ``per_doc``: their second) for each entry of
    ``aggregate`` (the group's ``aggregate_metric_list``; None: members only), computed as
    lm-eval's ``Group.aggregate``: ``aggregate_subtask_metrics`` (size-weighted when
    ``weight_by_size``, else the plain mean of the members), and ``pooled_sample_stderr`` or
    ``unweighted_mean_stderr`` when every member has a stderr.

    Example:
        >>> tm = {"a": {"acc,none": 1.0, "acc_stderr,none": 0.0, "sample_len": 2},
        ...       "b": {"acc,none": 0.0, "acc_stderr,none": 0.0, "sample_len": 6}}
        >>> docs = {"a": {"acc,none": np.ones(2)}, "b": {"acc,none": np.zeros(6)}}
        >>> g = lm_eval_group("g", [{"metric": "acc"}], tm, docs)
        >>> g.metrics[0].name, g.metrics[0].value, g.metrics[0].n
        ('acc,none', 0.25, 8)
        >>> lm_eval_group("g", [{"metric": "acc", "weight_by_size": False}], tm, docs).value
        0.5
    """
    from lm_eval.api.metrics import (
        aggregate_subtask_metrics,
        pooled_sample_stderr,
        unweighted_mean_stderr,
    )
    from lm_eval.config.group import AggMetricConfig

    ests: list[Estimate] = []
    errs: list[float | None] = []
    warnings: list[str] = []
    for raw in aggregate or ():
        # "aggregation" left out: lm-eval takes "mean" or a !function and Group.aggregate
        # ignores either (the spec refused any other: lm_eval_group._aggregate_refusal)
        cfg = AggMetricConfig(**{k: v for k, v in dict(raw).items()
                                 if k in ("metric", "filter_list", "weight_by_size")})
        filters = cfg.filter_list
        if filters is None:  # lm-eval's discovery: every filter a member reports the metric by
            filters = sorted({k[len(cfg.metric) + 1:] for m in task_metrics.values() for k in m
                              if k.startswith(f"{cfg.metric},") and "_stderr" not in k})
        for filt in filters:
            key, skey = f"{cfg.metric},{filt}", f"{cfg.metric}_stderr,{filt}"
            have = [t for t, m in task_metrics.items() if key in m]
            if not have:
                warnings.append(f"{key}: no member reports it; not aggregated")
                continue
            if len(have) < len(task_metrics):
                warnings.append(f"{key}: missing in {len(task_metrics) - len(have)} of "
                                f"{len(task_metrics)} members (left out, as lm-eval does)")
            values = [task_metrics[t][key] for t in have]
            sizes = [task_metrics[t].get("sample_len", 0) for t in have]
            stderrs = [task_metrics[t].get(skey) for t in have]
            value = float(aggregate_subtask_metrics(values, sizes, cfg.weight_by_size))
            se: float | None = None
            if all(s is not None and s != "N/A" for s in stderrs):
                se = float(pooled_sample_stderr(stderrs, sizes) if cfg.weight_by_size
                           else unweighted_mean_stderr(stderrs))
            corpus = any(isinstance(per_doc[t][key], Estimate) for t in have)
            iv = None
            if not corpus:
                pooled = np.concatenate([per_doc[t][key] for t in have])
                in_unit = bool(np.all((pooled >= 0) & (pooled <= 1)))
                # the size-weighted mean is the pooled documents' mean: its interval is
                # theirs; a plain mean of members weighs documents unequally, which that
                # interval does not
                iv = (task_interval(pooled, floor=1.0, level=level)
                      if cfg.weight_by_size and in_unit else None)
            how = ("size-weighted" if cfg.weight_by_size
                   else f"unweighted mean of {len(have)} tasks, no interval")
            if corpus:  # lm-eval's rule as is: a mean of members' f1, not f1 over the pool
                how = (f"{'size-weighted' if cfg.weight_by_size else 'unweighted'} mean of "
                       f"{len(have)} members' {cfg.metric} (lm-eval's rule; not {cfg.metric} "
                       "over the pooled documents), no interval")
            err = f"lm-eval stderr {se:.4f}" if se is not None and math.isfinite(se) else \
                "lm-eval stderr N/A"
            ests.append(Estimate(key, value, iv, int(sum(sizes)), unit="documents",
                                 n_rows=None, note=f"{how}; {err}"))
            errs.append(se)
    members = []
    for t, m in task_metrics.items():
        for key in [k for k in m if "," in k and "_stderr," not in k]:
            vals = per_doc[t][key]
            if isinstance(vals, Estimate):  # a corpus metric: the member's own estimate
                members.append(replace(vals, name=f"{t}: {key}"))
                continue
            in_unit = bool(np.all((vals >= 0) & (vals <= 1)))
            se_m = m.get(f"{key.partition(',')[0]}_stderr,{key.partition(',')[2]}")
            members.append(Estimate(
                f"{t}: {key}", float(m[key]),
                task_interval(vals, floor=1.0, level=level) if in_unit else None, len(vals),
                unit="documents", note=None if not isinstance(se_m, float)
                else f"lm-eval stderr {se_m:.4f}"))
    return LmEvalGroup(group, tuple(ests), tuple(errs), tuple(members), n_rows, note,
                       tuple(warnings))


def lm_eval_mc_means(rows: RowsLike, *, level: float = 0.95) -> LmEvalMeans:
    """Every metric a multiple_choice lm-eval task reports (``acc,none``, ``mcc,none``...)
    from the per-document items its own ``process_results`` gave (``judge_meta["lm_eval"]``,
    :mod:`assay.sources.lm_eval_mc`), aggregated by lm-eval's own function over the documents
    in lm-eval's order, beside lm-eval's stderr: closed form for a mean; for a corpus metric
    lm-eval's bootstrap over its first :data:`LM_EVAL_DRAWS` draws (noted).

    Example:
        >>> meta = lambda g, p: {"lm_eval": {
        ...     "items": {"mcc,none": [g, p], "acc,none": 1.0 * (g == p)},
        ...     "aggregation": [["mcc,none", "matthews_corrcoef"], ["acc,none", "mean"]]}}
        >>> rows = [{"task_id": str(i), "reward": 0.0, "judge_meta": meta(i % 2, int(i < 3))}
        ...         for i in range(6)]
        >>> [(e.name, round(e.value, 4)) for e in lm_eval_mc_means(rows).metrics]
        [('mcc,none', -0.3333), ('acc,none', 0.3333)]
    """
    import json

    from lm_eval.api import metrics as lm

    from assay.measure.lm_eval_corpus import corpus_spread, from_json, resolve
    from assay.rows import as_table

    table = as_table(rows, require=())
    if table.num_rows == 0:
        raise MeasureError("lm_eval_metrics: no rows")
    per_doc: dict[int, dict[str, Any]] = {}
    for tid, meta in zip(table.column("task_id").to_pylist(),
                         table.column("judge_meta").to_pylist()):
        g = json.loads(meta) if isinstance(meta, str) else dict(meta or {})
        if "lm_eval" not in g:
            raise MeasureError(f"lm_eval_metrics: document {tid} has no lm-eval items (rows "
                               "scored before assay ran the task's process_results: rerun)")
        per_doc[int(tid)] = g["lm_eval"]
    docs = [per_doc[d] for d in sorted(per_doc)]  # lm-eval's order: its bootstrap depends on it
    aggs = docs[0]["aggregation"]
    ests, errs = [], []
    for name, agg_name in aggs:
        fn = resolve(agg_name)
        items = [from_json(d["items"][name]) for d in docs]
        value = float(fn(items))
        n = len(items)
        if agg_name == "mean":
            vals = np.asarray(items, dtype=np.float64)
            in_unit = bool(np.all((vals >= 0) & (vals <= 1)))
            iv = task_interval(vals, floor=1.0, level=level) if in_unit else None
            se = float(lm.mean_stderr(items)) if n > 1 else None
            note = f"lm-eval stderr {se:.4f}" if se is not None else None
        else:
            se, iv, note = corpus_spread(name, agg_name, items, level)
        ests.append(Estimate(name, value, iv, n, unit="documents", n_rows=n, note=note))
        errs.append(se)
    warnings = (f"only {len(docs)} documents: intervals are wide",) if len(docs) < 10 else ()
    return LmEvalMeans(tuple(ests), tuple(errs), len(docs), table.num_rows, warnings)
