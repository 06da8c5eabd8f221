"""A multiple_choice lm-eval task's own per-document metric items (acc, acc_norm, f1 and mcc's
(gold, pred) pairs, truthfulqa_mc2's mass on the true answers), from assay's log-likelihoods.

Why lm-eval's ``process_results`` and not assay's argmax: the number under a task's name must be
lm-eval's, and only the task's own code knows it (truthfulqa_mc2 returns a probability mass as
``acc``; cola's ``mcc`` is a corpus statistic over every document's (gold, pred) pair). Each
scored row gets its items and each metric's lm-eval aggregation (a registry name) in
``judge_meta["lm_eval"]``; the measure stage aggregates them with lm-eval's own functions.

Example:
    >>> item_of("mcc", "matthews_corrcoef", (1, 0), "doc 0")
    [1, 0]
    >>> item_of("acc", "mean", 0.25, "doc 0")
    0.25
"""

from __future__ import annotations

import json
import math
import numbers
import threading
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from assay.errors import SpecError
from assay.jsontypes import JSONValue
from assay.rows import Rows, to_json

if TYPE_CHECKING:
    from lm_eval.api.task import Task  # no type information of its own (no py.typed)

    from assay.paths import Paths
    from assay.sources.base import SourceSpec
    from assay.sources.lm_eval import LmEvalSource

#: the lm-eval aggregations (registry names) whose items are one number per document
MEAN_AGGREGATIONS = ("mean", "nanmean")
#: the corpus-level ones whose items are a document's (gold, pred) pair
PAIR_AGGREGATIONS = ("f1", "matthews_corrcoef")
#: what the key of a metric is in lm-eval's results: a multiple_choice task has no filters
FILTER = "none"

_LOCK = threading.Lock()
#: (task, index folder, the source's identity) -> the loaded task: one load per process
_TASKS: dict[tuple[str, str | None, str], Task] = {}


def aggregation_names(task: Task) -> dict[str, str]:
    """``{metric: aggregation name}`` for every metric the loaded task reports: lm-eval's
    registry name, or an importable ``module:qualname`` (:mod:`assay.measure.lm_eval_corpus`);
    a function of the task's own file is a :class:`SpecError`."""
    from assay.measure.lm_eval_corpus import aggregation_ref

    names = {}
    for metric, fn in task.aggregation().items():
        got = aggregation_ref(fn)
        if got is None:
            raise SpecError(f"its metric {metric!r} is aggregated by "
                            f"{getattr(fn, '__name__', fn)!r}, which assay cannot name")
        names[metric] = got
    return names


def item_of(metric: str, agg: str, v: Any, where: str) -> JSONValue:
    """One document's item for ``metric`` as JSON holds it: a number for a mean, ``[gold,
    pred]`` for f1/mcc (lm-eval's shapes; anything else is a :class:`SpecError`), whatever JSON
    holds for another aggregation (median's number, afrixnli f1's pair)."""
    if agg in PAIR_AGGREGATIONS:
        ok = isinstance(v, tuple | list) and len(v) == 2 and all(
            isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in v)
        if not ok:
            raise SpecError(f"{where}: its process_results returns {metric!r} as {v!r:.60}, "
                            f"not the (gold, pred) pair lm-eval's {agg} reads")
        return [int(v[0]), int(v[1])]
    if agg not in MEAN_AGGREGATIONS:  # another aggregation reads whatever lm-eval gave it
        from assay.measure.lm_eval_corpus import json_item

        try:
            return json_item(v)
        except ValueError as e:
            raise SpecError(f"{where}: its process_results returns {metric!r} as {e}") from None
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or \
            (not math.isfinite(float(v)) and not (agg == "nanmean" and math.isnan(float(v)))):
        raise SpecError(f"{where}: its process_results returns {metric!r} as {v!r:.60}, not a "
                        "finite number")
    return float(v)


def document_items(task: Task, doc: object, lls: list[float], greedy: list[bool],
                   aggs: dict[str, str], where: str) -> dict[str, JSONValue]:
    """``{"metric,none": item}`` in lm-eval's order: the task's ``process_results`` given the
    results as lm-eval hands them over (one ``(loglik, is_greedy)`` per choice)."""
    from assay.sources.lm_eval_index import task_code

    with task_code(where, "compute the document's metrics (process_results)"):
        got = task.process_results(doc, [(float(x), bool(g)) for x, g in zip(lls, greedy)])
    if set(got) != set(aggs):
        raise SpecError(f"{where}: its process_results returns {sorted(got)}, not the metrics "
                        f"the task aggregates ({sorted(aggs)})")
    return {f"{k},{FILTER}": item_of(k, aggs[k], v, where) for k, v in got.items()}


def loaded_task(source: LmEvalSource, paths: Paths) -> Task:
    """lm-eval's task of an lm_eval source (its documents loaded, its requests unbuilt), loaded
    once per process and again when the task's files change."""
    from assay import libguard
    from assay.sources.lm_eval_index import task_code, task_manager

    folder = source._folder(paths)
    key = (source.task, None if folder is None else str(folder),
           json.dumps(source.identity(paths).get("files"), sort_keys=True))
    with _LOCK:
        if key in _TASKS:
            return _TASKS[key]
        where = source._where()
        with libguard.datasets():
            with task_code(where, "index the tasks"):
                tm = task_manager(folder)
            with task_code(where, "load the task"):
                tasks = tm.load([source.task]).get("tasks") or {}
        if len(tasks) != 1:
            raise SpecError(f"{where}: not one task ({sorted(tasks)[:6]})")
        _TASKS[key] = next(iter(tasks.values()))
        return _TASKS[key]


def add_lm_eval_items(rows: Rows, source: SourceSpec, paths: Paths) -> Rows:
    """Scored choice rows of an lm_eval source with each document's lm-eval items and their
    aggregations in ``judge_meta["lm_eval"]``, its scalar items as markers, and ``reward`` the
    task's own ``acc`` where it reports one (truthfulqa_mc2's is its mc2 mass, not the
    argmax: a choice_accuracy over these rows is lm-eval's acc)."""
    # called for a source whose kind declares lm_eval_task: the lm_eval kind
    source = cast("LmEvalSource", source)
    task = loaded_task(source, paths)
    if task.get_config("output_type") != "multiple_choice":
        return rows  # a loglikelihood task's rows are graded by lm_eval_loglik
    where = source._where()
    aggs = aggregation_names(task)
    table = rows.to_arrow()
    docs = task.eval_docs
    metas, markers, rewards = [], [], []
    old_markers = table.column("markers").to_pylist()
    for tid, meta, mk, reward, priv in zip(table.column("task_id").to_pylist(),
                                           table.column("judge_meta").to_pylist(), old_markers,
                                           table.column("reward").to_pylist(),
                                           table.column("privileged").to_pylist()):
        at = f"{where} document {tid}"
        g = json.loads(meta)
        doc_id = int(tid)
        if not 0 <= doc_id < len(docs) or \
                [str(c) for c in task.doc_to_choice(docs[doc_id])] != json.loads(priv)["choices"]:
            raise SpecError(f"{at}: not the document the rows were built from (the task has "
                            f"{len(docs)} documents; the data changed since?)")
        items = document_items(task, docs[doc_id], g["loglik"], g["is_greedy"], aggs, at)
        # pairs, not a mapping: canonical JSON sorts keys, and lm-eval's order is the report's
        g["lm_eval"] = {"items": items, "aggregation": [[f"{k},{FILTER}", a]
                                                        for k, a in aggs.items()]}
        metas.append(to_json(g, at))
        scalars = [(k, v) for k, v in items.items() if isinstance(v, float) and math.isfinite(v)]
        markers.append([(k, v) for k, v in (mk or []) if k not in items] + scalars)
        own = items.get(f"acc,{FILTER}")
        rewards.append(own if isinstance(own, float) else reward)
    for c, arr in (("judge_meta", pa.array(metas, pa.string())),
                   ("markers", pa.array(markers, table.schema.field("markers").type)),
                   ("reward", pa.array(rewards, pa.float64()))):
        table = table.set_column(table.schema.get_field_index(c), c, arr)
    return Rows(table)
