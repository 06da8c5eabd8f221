"""The ``lm_eval`` verifier kind: a generate_until lm-eval task's own filter pipelines and
metrics (lm-eval's filter classes, its ``process_results``) applied to each completion.

Why lm-eval's code and not assay's ExactMatch: the number reported under the task's name must be
lm-eval's (gsm8k's exact_match ignores regexes, its case, what its regex filters extract), so
each row is put through the very objects ``simple_evaluate`` would use. Every
``metric,filter`` pair lm-eval averages becomes a marker (``exact_match,strict-match``); the
reward is the first one's value, so pass@1 is that metric's mean, as lm-eval aggregates it. A
metric aggregated otherwise (bleu, chrf, ter: corpus-level) keeps the document's item in
``judge_meta["lm_eval"]`` for lm-eval's function; with no averaged metric there is no reward.
A ``kind: lm_eval`` source with ``generate:`` sets this verifier itself.

Example:
    >>> LmEvalMetric.WARM_IMPORTS
    ('datasets', 'lm_eval.tasks', 'lm_eval.api.task', 'lm_eval.filters')
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

from assay.errors import SpecError, VerifierError
from assay.judging import Verdict, Verifier
from assay.verify.registry import VERIFIERS

if TYPE_CHECKING:
    from assay.paths import SpecPaths
    from assay.sources.lm_eval import LmEvalSource
    from assay.verify.spec import VerifierSpec


class _Docs(Protocol):
    """A task's documents (a list or a ``datasets.Dataset``): counted and indexed."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> object: ...


class _TaskConfig(Protocol):
    task: str
    generation_kwargs: object


class _FilterEnsemble(Protocol):
    name: str

    def apply(self, instances: list[object]) -> object: ...


class LmEvalTask(Protocol):
    """The surface of lm-eval's ``ConfigurableTask`` that this verifier uses (lm-eval ships no
    types, so this states what is read)."""

    config: _TaskConfig
    _filters: Sequence[_FilterEnsemble]

    @property
    def eval_docs(self) -> _Docs: ...
    def doc_to_target(self, doc: object) -> object: ...
    def process_results(self, doc: object, results: list[object]) -> Mapping[str, object]: ...
    def set_config(self, key: str, value: object, update: bool = False) -> None: ...


@VERIFIERS.register("lm_eval")
class LmEvalMetric(Verifier):
    """Grade one completion of one lm-eval document (the row's ``task_id`` is lm-eval's
    ``doc_id``) by the task's filters and metrics; ``include_path`` resolves from the spec's
    folder, ``gen_kwargs`` as the source's."""

    WARM_IMPORTS: ClassVar[tuple[str, ...]] = ("datasets", "lm_eval.tasks", "lm_eval.api.task",
                                               "lm_eval.filters")
    needs_reference = True
    parallel = False  # the loaded task (its data, its filters) lives in this process

    def __init__(self, task: str, include_path: str | None = None,
                 gen_kwargs: Mapping[str, object] | None = None, *, base_dir: str | None = None
                 ) -> None:
        if not isinstance(task, str) or not task:
            raise VerifierError(f"lm_eval verifier: task must be a task name, got {task!r:.60}")
        self.task_name = task
        self.include_path = include_path
        self.gen_kwargs = dict(gen_kwargs or {})
        self.base_dir = base_dir
        self.name = f"lm_eval {task}"
        self._lock = threading.Lock()
        self._task: LmEvalTask | None = None
        self._aggs: dict[str, str] | None = None

    def __repr__(self) -> str:
        return f"LmEvalMetric(task={self.task_name!r})"

    @classmethod
    def from_spec(cls, vspec: VerifierSpec, base_dir: str | None = None) -> LmEvalMetric:
        p = dict(vspec.params)
        unknown = sorted(set(p) - {"task", "include_path", "gen_kwargs"})
        if unknown or "task" not in p:
            raise SpecError(f"verifier lm_eval: params are task, include_path, gen_kwargs "
                            f"(got {sorted(p)})")
        return cls(p["task"], p.get("include_path"), p.get("gen_kwargs"), base_dir=base_dir)

    @classmethod
    def spec_fingerprint(cls, vspec: VerifierSpec, base_dir: str | None = None
                         ) -> dict[str, object]:
        """The task's definition files and lm-eval's version (the source's row identity):
        editing the task's YAML re-grades."""
        src = cls.from_spec(vspec, base_dir)._source()
        ident = src.identity(_paths(base_dir))
        return {"files": ident.get("files"), "lm_eval": ident.get("lm_eval")}

    def _source(self) -> LmEvalSource:
        from assay.sources.lm_eval import LmEvalSource

        return LmEvalSource.model_validate({
            "name": "lm_eval_verifier", "kind": "lm_eval", "task": self.task_name,
            "include_path": self.include_path, "gen_kwargs": self.gen_kwargs,
            "generate": {"model": {"kind": "function", "callable": "builtins:str"},
                         "api": "completions"}})

    def loaded(self) -> LmEvalTask:
        """lm-eval's task object, loaded (with its documents) once per verifier."""
        with self._lock:
            if self._task is None:
                self._task = _load(self._source(), self.base_dir)
            return self._task

    def aggregations(self) -> dict[str, str]:
        """``{metric: the name of lm-eval's aggregation}`` for the loaded task
        (:mod:`assay.measure.lm_eval_corpus`)."""
        task = self.loaded()
        with self._lock:
            if self._aggs is None:
                from assay.sources.lm_eval_mc import aggregation_names

                try:
                    self._aggs = aggregation_names(task)
                except SpecError as e:
                    raise VerifierError(f"lm_eval {self.task_name}: {e}") from None
            return self._aggs

    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> Verdict:
        task = self.loaded()
        doc_id = _doc_id(row)
        docs = task.eval_docs
        if not 0 <= doc_id < len(docs):
            raise VerifierError(f"lm_eval {self.task_name}: no document {doc_id} "
                                f"(the task has {len(docs)})")
        doc = docs[doc_id]
        if str(task.doc_to_target(doc)) != str(reference):
            raise VerifierError(f"lm_eval {self.task_name} document {doc_id}: its target is not "
                                "the row's reference (the data changed since the rows were "
                                "built)")
        # here, not at the top: the measure package imports scipy (a verifier module is
        # imported with the spec's kinds, before anything is measured)
        from assay.measure.lm_eval_corpus import json_item

        filtered = filter_completion(task, doc, doc_id, candidate)
        aggs = self.aggregations()
        markers: dict[str, float] = {}
        items: dict[str, object] = {}
        got = metrics_of(task, doc, filtered)
        for k, v in got.items():
            # lm-eval averages a metric it has no aggregation for
            agg = aggs.get(k.partition(",")[0], "mean")
            if agg != "mean":  # bleu's (ref, pred): kept for lm-eval's corpus function
                try:
                    items[k] = json_item(v)
                except ValueError as e:
                    raise VerifierError(f"lm_eval {self.task_name} document {doc_id}: metric "
                                        f"{k} is {e}; rows cannot keep it") from None
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or \
                    not math.isfinite(float(v)):
                raise VerifierError(f"lm_eval {self.task_name} document {doc_id}: metric {k} is "
                                    f"{v!r:.40}, not a finite number")
            markers[k] = float(v)
        if not got:
            raise VerifierError(f"lm_eval {self.task_name}: the task reports no metric")
        meta: dict[str, object] = {"filtered": {k: v if isinstance(v, str) else repr(v)
                                             for k, v in filtered.items()}}
        if items:  # pairs, not a mapping: canonical JSON sorts keys, lm-eval's order is kept
            meta["lm_eval"] = {"keys": list(got), "items": items,
                               "aggregation": [[k, aggs[k.partition(",")[0]]] for k in items]}
        if not markers:
            return Verdict(None, reason=f"{', '.join(items)}: corpus-level (lm-eval gives no "
                           "per-document score); report.json's lm_eval_metrics has them",
                           meta=meta)
        first, value = next(iter(markers.items()))
        if not 0.0 <= value <= 1.0:
            return Verdict(None, status="error", reason=f"{first} is {value}, outside [0, 1]",
                           meta=meta, markers=markers)
        return Verdict(value, reason=f"{first} = {value:g}", meta=meta, markers=markers)


def _paths(base_dir: str | None) -> SpecPaths:
    from assay.paths import SpecPaths

    return SpecPaths(base_dir)


def _load(source: LmEvalSource, base_dir: str | None) -> LmEvalTask:
    """The task as the source loads it (same index, same gen_kwargs), its requests unbuilt:
    filters and metrics need only the config and the documents."""
    from assay import libguard
    from assay.sources.lm_eval_index import task_code, task_manager

    where = f"verifier lm_eval (lm-eval task {source.task!r})"
    paths = _paths(base_dir)
    with libguard.datasets():
        with task_code(where, "index the tasks"):
            tm = task_manager(source._folder(paths))
        with task_code(where, "load the task"):
            tasks = (tm.load([source.task]).get("tasks") or {})
    if len(tasks) != 1:
        raise VerifierError(f"{where}: not one task ({sorted(tasks)[:6]})")
    task = next(iter(tasks.values()))
    if source.gen_kwargs:
        task.set_config(key="generation_kwargs", value=dict(source.gen_kwargs), update=True)
    return task


def _doc_id(row: Mapping[str, object]) -> int:
    tid = row.get("task_id")
    try:
        return int(str(tid))
    except ValueError:
        raise VerifierError(f"lm_eval: the row's task_id {tid!r:.40} is not lm-eval's document "
                            "id (rows of a kind: lm_eval source keep it)") from None


def filter_completion(task: LmEvalTask, doc: object, doc_id: int, candidate: str
                      ) -> dict[str, object]:
    """``{filter name: the filtered response}`` through each of the task's filter ensembles,
    run on an lm-eval ``Instance`` exactly as its ``apply_filters`` runs them (lm-eval's own
    filter classes, from its registry)."""
    from lm_eval.api.instance import Instance

    out: dict[str, object] = {}
    for ens in task._filters:  # one FilterEnsemble per filter_list entry ("none" by default)
        inst = Instance(request_type="generate_until", doc=doc,
                        arguments=("", task.config.generation_kwargs), idx=0,
                        metadata=(task.config.task, doc_id, 1))
        inst.resps = [candidate]
        ens.apply([inst])
        out[ens.name] = inst.filtered_resps[ens.name]
    return out


def metrics_of(task: LmEvalTask, doc: object, filtered: Mapping[str, object]
               ) -> dict[str, object]:
    """``{"metric,filter": value}`` in lm-eval's order (filters, then the metrics each
    one's ``process_results`` returns), as ``simple_evaluate`` keys them."""
    out: dict[str, object] = {}
    for name, resp in filtered.items():
        for metric, value in task.process_results(doc, [resp]).items():
            out[f"{metric},{name}"] = value
    return out
