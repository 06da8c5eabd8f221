"""The study as a graph of stage nodes: per shard build-rows -> filter-rows -> generate[i] ->
grade[i] -> score-rows[i]; decontaminate after its sources' grades; audits on their own; measure
after all; report last. ``run_study`` runs it (threads here; Prefect tasks in flows/study.py).

Every node calls the same stage function with the same inputs as the chain, so results, rows
and cache keys are the chain's byte for byte; only when each node starts differs.

Example:
    >>> from assay.spec import parse_spec
    >>> spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
    ...                   "fields: {prompt: q, completion: c, reward: r}}]}")
    >>> sorted(study_graph(spec, None, progress=None).nodes)
    ['build-rows[a]', 'filter-rows[a]', 'measure', 'report']
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from assay import libguard, stop
from assay import progress as live
from assay.report import WARM_IMPORTS as REPORT_IMPORTS
from assay.spec import StudySpec
from assay.stages.build_rows import run_build_rows
from assay.stages.cache import StageResult, cached_only, load_rows, print_progress
from assay.stages.chain import StudyRun, direct_call, direct_map, run_chain
from assay.stages.decontaminate import run_decontaminate
from assay.stages.filter_rows import run_filter_rows
from assay.stages.generate import prompts_per_shard, run_generate_shard
from assay.stages.grade import run_grade_shard, shard_bounds
from assay.stages.graph import Graph, Node, ThreadExecutor, run_graph
from assay.stages.measure import WARM_IMPORTS as MEASURE_IMPORTS
from assay.stages.measure import run_measure
from assay.stages.modes import LOGLIK_STAGES
from assay.stages.report import run_report
from assay.stages.score_reward_model import run_reward_audit
from assay.stages.score_rows import preload, run_score_rows
from assay.stages.stream import Pregrader
from assay.store import Store

#: Default cap on nodes in flight (``execution.max_parallel``): generate nodes mostly wait on
#: their server, grading and scoring hold the ``cores`` and ``gpu`` slots.
DEFAULT_MAX_PARALLEL = 8

#: Slots: one grading shard at a time uses every core (its own worker processes); one reward or
#: local generation model at a time holds the ``gpu`` (on CPU-only machines: the cores' memory).
#: A model server needs no slot here: its ``max_connections`` is its own pool.
LOCAL_CAPACITY = {"cores": 1, "gpu": 1}


def _from(fn: Callable[..., Any]) -> Callable[[Callable[[str], Any]], Any]:
    """A node's arguments from its inputs' results (``get(node_id)``); the lambdas bind their
    loop variables as defaults, which is why they are typed through here."""
    return fn


def _always(*args: Any, **kwargs: Any) -> Callable[[Any], tuple[tuple[Any, ...], dict[str, Any]]]:
    return lambda get: (args, kwargs)


def _on_cpu(device: Any) -> bool:
    """Whether a model with this ``device`` setting runs on the CPU. ``auto`` is decided without
    importing torch (a fully cached rerun never loads it): no NVIDIA device node, no GPU."""
    d = str(device or "auto")
    if d == "auto":
        return not os.path.exists("/dev/nvidiactl")
    return not d.startswith("cuda")


def _model_resources(devices: Sequence[Any]) -> tuple[str, ...]:
    """A model holds the ``gpu`` slot (one model at a time); on the CPU it also holds ``cores``:
    its threads and the grading workers would otherwise fight over the same cores (measured:
    scoring next to grading on 2 cores was slower than one after the other)."""
    return ("gpu", "cores") if any(_on_cpu(d) for d in devices) else ("gpu",)


def _generation_resources(src: Any) -> tuple[str, ...]:
    """A local model (transformers) generating holds the model slots; a server does not."""
    model = getattr(src.generate, "model", None)
    if getattr(model, "kind", None) != "hf":
        return ()
    return _model_resources([getattr(model, "device", "auto")])


def _loglik(src: Any) -> tuple[Callable[..., StageResult] | None, tuple[str, ...]]:
    """A choices or perplexity source's scoring stage and the slots its model holds."""
    fn = LOGLIK_STAGES.get(src.mode)
    if fn is None:
        return None, ()
    model = src.scoring_model
    if getattr(model, "kind", None) != "hf":
        return fn, ()
    return fn, _model_resources([getattr(model, "device", "auto")])


def _reward_resources(models: Sequence[Any]) -> tuple[str, ...]:
    """Reward models' slots; a ``function`` scorer is plain Python: the ``gpu`` slot only."""
    devices = [(getattr(m, "params", None) or {}).get("device", "auto") for m in models
               if getattr(m, "kind", None) != "function"]
    return _model_resources(devices) if devices else ("gpu",)


# Which ready node takes a free place under max_parallel (results keep the chain's order):
# building and filtering any source's rows first, then grade and score-rows shards whose rows
# exist, then generate shards. Generate shards beyond the server's connections only park on its
# budget while holding a place: ranked in the chain's order they would keep every grade, and
# later sources' rows, waiting for the last of them to start (benchmarks/pipeline.py shows the
# cost). Grading holds the cores (one shard at a time), so generation keeps every other place.
_ROWS_FIRST = (0, -2)
_GRADED_NEXT = (0, -1)


def study_graph(spec: StudySpec, store: Store | None, *, progress: Any = print_progress,
                workers: int | None = None, loader: Preloader | None = None) -> Graph:
    """The study's nodes (shards are added when a source's filtered rows exist). With a
    ``loader``, score-rows shards wait (holding no slot) while it loads their model."""
    g = Graph()
    score = spec.reward.score if spec.reward is not None else None
    scored = list(score.sources) if score is not None else []
    pk = {"progress": progress}
    for si, src in enumerate(spec.sources):
        name = src.name
        b_id, f_id = f"build-rows[{name}]", f"filter-rows[{name}]"
        g.add(Node(b_id, "build-rows", _always(store, spec, name, **pk), run_build_rows,
                   order=(0, si, 0), label=name, priority=_ROWS_FIRST + (si, 0)))
        graded = g.group(f"graded:{name}", sealed_by=f_id)
        final = g.group(f"final:{name}", sealed_by=f_id)
        g.add(Node(f_id, "filter-rows",
                   _from(lambda get, b_id=b_id, name=name: ((store, spec, name, get(b_id)), pk)),
                   run_filter_rows, deps=(b_id,), order=(0, si, 1), label=name,
                   priority=_ROWS_FIRST + (si, 1),
                   expand=_shards(spec, store, si, src, scored, workers, progress, loader),
                   groups=() if src.verifier is not None or _loglik(src)[0] else (
                       (graded[6:],) + (() if name in scored else (final[6:],)))))
    decon_id = None
    if spec.decontaminate:
        names = spec.decontaminate.sources or [s.name for s in spec.sources]
        decon_id = "decontaminate"
        g.add(Node(decon_id, "decontaminate",
                   _from(lambda get, names=names: ((store, spec, {n: get(f"group:graded:{n}")
                                                                  for n in names}), pk)),
                   run_decontaminate, deps=tuple(f"group:graded:{n}" for n in names),
                   resources=("cores",), order=(2,), label=",".join(names)))
    audited = list(spec.reward.models) if spec.reward and spec.reward.data else []
    audits = [m.name for m in audited]
    for ai, m in enumerate(audits):
        g.add(Node(f"score-reward-model[{m}]", "score-reward-model",
                   _always(store, spec, m, **pk), run_reward_audit,
                   resources=_reward_resources([e for e in audited if e.name == m]),
                   order=(3, ai), label=m))
    finals = tuple(f"group:final:{s.name}" for s in spec.sources)

    def graded_of(get: Callable[[str], Any]) -> dict[str, tuple[StageResult, ...]]:
        return {s.name: get(f"group:final:{s.name}") for s in spec.sources}

    if spec.sources:
        g.add(Node("measure", "measure", lambda get: ((store, spec, graded_of(get)), pk),
                   run_measure, deps=finals, order=(4,),
                   label=",".join(s.name for s in spec.sources)))
    ups = (("measure",) if spec.sources else ()) + ((decon_id,) if decon_id else ()) + tuple(
        f"score-reward-model[{m}]" for m in audits)
    g.add(Node("report", "report",
               lambda get: ((store, spec, graded_of(get),
                             get("measure") if spec.sources else None,
                             get(decon_id) if decon_id else None,
                             tuple(get(f"score-reward-model[{m}]") for m in audits)), pk),
               run_report, deps=finals + ups, order=(5,), label=spec.name))
    return g


def _grading_workers(workers: int | None, loader: Preloader | None) -> int | None:
    """Grading processes for a shard that starts now: one fewer while the row-scoring model
    loads on its thread. The load is CPU work on the critical path (every score-rows node waits
    for it), and with every core grading it got a third of one (measured: a 4.5 s load took
    10 s next to 2 grading workers on 2 cores). Grades do not depend on the worker count."""
    if loader is None or loader.idle():
        return workers
    from assay.grading import cores

    n = workers if workers is not None else cores()
    return max(1, n - 1)


def _shards(spec: StudySpec, store: Store | None, si: int, src: Any, scored: Sequence[str],
            workers: int | None, progress: Any,
            loader: Preloader | None = None) -> Callable[[StageResult], list[Node]]:
    """The shard nodes of one source, made once its filtered rows exist (as the chain cuts them)."""
    name = src.name
    pk = {"progress": progress}

    scoring = (_reward_resources(spec.reward.scoring_models())
               if scored and spec.reward is not None else ())

    def expand(filtered: StageResult) -> list[Node]:
        nodes: list[Node] = []
        scorer, slots = _loglik(src)
        if src.verifier is None and scorer is None:  # the filtered rows are the graded ones
            if name in scored:
                nodes.append(Node(f"score-rows[{name}]", "score-rows",
                                  _always(store, spec, name, filtered, 0, 1, **pk), run_score_rows,
                                  resources=scoring, order=(1, scored.index(name), 0),
                                  label=name, groups=(f"final:{name}",),
                                  priority=_GRADED_NEXT + (si, 0, 1)))
            return nodes
        gen = src.generate
        assert store is not None  # shards are cut from stored rows (no store: listing only)
        rows = load_rows(store, filtered)
        per = spec.execution.shard_rows
        if gen is not None:
            per = prompts_per_shard(per, gen.k)
        bounds = shard_bounds(rows, per)
        n = len(bounds)
        score_si = scored.index(name) if name in scored else None
        for i, b in enumerate(bounds):
            label = f"{name} shard {i + 1}/{n}"
            grade_id = f"grade[{label}]"
            if scorer is not None:  # questions or documents scored by log-likelihood: no grading
                grade_id = f"{'score-choices' if src.choices is not None else 'score-documents'}"
                grade_id += f"[{label}]"
                nodes.append(Node(grade_id, grade_id.split("[")[0],
                                  _always(store, spec, name, filtered, b, i, n, **pk), scorer,
                                  resources=slots, order=(0, si, 2, i), label=label,
                                  groups=(f"graded:{name}",) + (
                                      () if score_si is not None else (f"final:{name}",))))
            elif gen is not None:
                gen_id = f"generate[{label}]"
                nodes.append(Node(gen_id, "generate",
                                  _always(store, spec, name, filtered, b, i, n, **pk),
                                  run_generate_shard, resources=_generation_resources(src),
                                  order=(0, si, 2, i), label=label))
                nodes.append(Node(
                    grade_id, "grade",
                    _from(lambda get, gen_id=gen_id, i=i: (
                        (store, spec, name, get(gen_id), (0, get(gen_id).summary["rows"]), i, n),
                        {"workers": _grading_workers(workers, loader), **pk})),
                    run_grade_shard, deps=(gen_id,), resources=("cores",), order=(0, si, 3, i),
                    label=label, groups=(f"graded:{name}",) + (
                        () if score_si is not None else (f"final:{name}",)),
                    priority=_GRADED_NEXT + (si, i, 0)))
            else:
                nodes.append(Node(grade_id, "grade",
                                  _always(store, spec, name, filtered, b, i, n,
                                          workers=workers, **pk),
                                  run_grade_shard, resources=("cores",), order=(0, si, 3, i),
                                  label=label, groups=(f"graded:{name}",) + (
                                      () if score_si is not None else (f"final:{name}",)),
                                  priority=_GRADED_NEXT + (si, i, 0)))
            if score_si is not None:
                nodes.append(Node(f"score-rows[{label}]", "score-rows",
                                  _from(lambda get, grade_id=grade_id, i=i: (
                                      (store, spec, name, get(grade_id), i, n), pk)),
                                  run_score_rows, deps=(grade_id,), resources=scoring,
                                  order=(1, score_si, i), label=label if n > 1 else name,
                                  groups=(f"final:{name}",),
                                  # not holding the cores (grading's) while the model loads
                                  ready=loader.idle if loader is not None else None,
                                  # started before the next shard's grade when both wait for
                                  # the cores: a short node, and all of them left to the end
                                  # were a serial tail before measure (16 x 0.08 s measured)
                                  priority=_GRADED_NEXT + (si, i, 1)))
        return nodes

    return expand


class Preloader:
    """Loads the study's row-scoring models (in a :class:`~assay.reward.worker.ScoringWorker`
    process, started from a background thread) as soon as a generate shard asks its server for
    completions (a live progress unit of stage ``generate`` with work to do): those completions
    are new, so their scores will be computed and the model is needed.
    The model loads while the cores would idle waiting on the server, instead of at the first
    score-rows shard (on CPU, MiniLM's load is most of its scoring time). Only for CPU models
    next to server generation: a GPU model keeps to the ``gpu`` slot, and a local generation
    model already holds the cores. Nothing loads when every completion is cached.
    """

    def __init__(self, spec: StudySpec) -> None:
        from assay.reward.worker import ScoringWorker

        self.spec = spec
        # The models load and score in a process of their own: their import and forward passes
        # would otherwise hold the GIL the generation clients' threads need (measured: the
        # server's slots 5-6.5 of 8 full during an in-process load, 7.5-7.7 after).
        self.worker = ScoringWorker()
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.wake: Callable[[], None] | None = None  # called when the load ends
        self._ended = threading.Event()

    def warm(self) -> None:
        """Start the worker and its imports (torch's: ~2.5 s of one core) as the run starts,
        while this process builds the rows and starts the clients on the other core; the
        model itself loads only once generation has work (:meth:`__call__`). A run that ends
        up generating nothing wasted those seconds of an otherwise idle core."""
        models = self.spec.reward.scoring_models() if self.spec.reward is not None else []
        kinds = sorted({type(m).__module__ for m in models if m.kind != "function"})
        self.worker.warm(["torch", *kinds])

    def remote_models(self) -> list[Any]:
        """The scoring models that load only in the worker process (none is also audited here)."""
        if self.spec.reward is None or self.spec.reward.data is not None:
            return []
        return self.spec.reward.scoring_models()

    def idle(self) -> bool:
        """No load in flight (none started, or it ended: loaded or failed)."""
        return self.thread is None or self._ended.is_set()

    def _load(self) -> None:
        try:
            preload(self.spec, self.worker)
        finally:
            self._ended.set()  # before the wake: the runner looks again and sees it idle
            if self.wake is not None:
                self.wake()
        # New completions mean new measurements and a new report, the run's last two nodes:
        # their imports (scipy's, matplotlib's: ~1 s of CPU) are done here, off the critical
        # path, not at the very end. A failing import is left for its stage to raise.
        libguard.warm(MEASURE_IMPORTS + REPORT_IMPORTS)

    @staticmethod
    def wanted(spec: StudySpec) -> bool:
        """Whether this study gains from a preload (see the class docstring)."""
        if spec.reward is None or spec.reward.score is None:
            return False
        scored = set(spec.reward.score.sources)
        served = [s for s in spec.sources if s.name in scored and s.generate is not None
                  and s.generate.model.kind != "hf"]
        models = spec.reward.scoring_models()
        return bool(served) and bool(models) and "cores" in _reward_resources(models)

    def __call__(self, state: live.UnitState) -> None:
        if state.stage != "generate" or not state.total or self.thread is not None:
            return
        with self._lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._load, name="assay-preload",
                                               daemon=True)
                self.thread.start()

    def join(self) -> None:
        """Wait for a load in flight and its warm imports (bounded: a load ends, loaded or
        failed; an import ends)."""
        if self.thread is not None:
            self.thread.join()

    def close(self) -> None:
        """Stop the scoring worker and forget its models (the run is over)."""
        from assay.stages.score_rows import forget_worker

        forget_worker(self.worker)
        self.worker.close()


def max_parallel_for(spec: StudySpec, override: int | None = None) -> int:
    """The cap on nodes in flight: ``override`` (``--max-parallel``), else the spec's, else
    :data:`DEFAULT_MAX_PARALLEL`."""
    return override or getattr(spec.execution, "max_parallel", None) or DEFAULT_MAX_PARALLEL


def _why_stopped(e: BaseException) -> str:
    """The stop's reason as :mod:`assay.stop` records it."""
    if type(e).__name__ in ("Terminated", "TerminationSignal"):
        return "terminated (SIGTERM)"
    return str(e) or "interrupted"


def run_study(spec: StudySpec, store: Store, *, call: Callable[..., StageResult] = direct_call,
              call_many: Callable[..., list[StageResult]] = direct_map,
              progress: Callable[[StageResult], None] | None = print_progress,
              workers: int | None = None, mode: str = "graph", executor: Any = None,
              max_parallel: int | None = None,
              capacity: Mapping[str, int] | None = None, preload: bool = True,
              stream: bool | None = None) -> StudyRun:
    """Run the study: as a graph (default; on ``executor``, threads unless given) or, with
    ``mode="chain"``, the stages one after another through ``call``/``call_many`` (the old
    order, kept to show both give the same bytes). Results come back in the chain's order.
    ``preload``: load row-scoring models during generation (:class:`Preloader`); ``stream``
    (default: as ``preload``): grade each generated prompt as it finishes
    (:class:`~assay.stages.stream.Pregrader`). Both only for executors that run nodes in this
    process (not a cluster's workers)."""
    if mode == "chain":
        return run_chain(spec, store, call=call, call_many=call_many, progress=progress,
                         workers=workers)
    if mode != "graph":
        raise ValueError(f"run_study: mode must be 'graph' or 'chain', not {mode!r}")
    # a new run: a stop left by an earlier, finished run is over; one that begins beside a
    # running one (the head start's graph and the flow's) shares its stop
    with stop.run():
        return _run_graph(spec, store, executor=executor, progress=progress, workers=workers,
                          max_parallel=max_parallel, capacity=capacity, preload=preload,
                          stream=stream)


def _run_graph(spec: StudySpec, store: Store, *, executor: Any,
               progress: Callable[[StageResult], None] | None,
               workers: int | None, max_parallel: int | None,
               capacity: Mapping[str, int] | None, preload: bool,
               stream: bool | None) -> StudyRun:
    workers = workers or spec.execution.workers
    cap = max_parallel_for(spec, max_parallel)
    loader = Preloader(spec) if preload and Preloader.wanted(spec) else None
    # every heavy import the nodes make here, done before they run side by side (why: see
    # assay.libguard); the preloaded scoring models load in their own process
    libguard.prepare(spec, loader.remote_models() if loader is not None else ())
    graph = study_graph(spec, store, progress=progress, workers=workers, loader=loader)
    if loader is not None:
        loader.wake = graph.wake
        loader.warm()
    ahead = _pregrader(spec, store, graph, workers) if (
        preload if stream is None else stream) else None
    ex = executor if executor is not None else ThreadExecutor(cap)
    unlisten = live.listen(loader) if loader is not None else None
    try:
        run = run_graph(graph, ex, max_parallel=cap,
                        capacity=capacity if capacity is not None else LOCAL_CAPACITY)
    except BaseException as e:  # Ctrl-C, SIGTERM (Prefect's TerminationSignal), a stop: the
        # nodes on other threads stop too (the task runner would otherwise wait for them):
        # requests in flight, grading, sandboxes (assay.stop; a watchdog triggered it already)
        if isinstance(e, Exception):  # a node failed: the graph ran all it could first
            from assay.grading import cancel_running

            cancel_running()
        else:
            stop.trigger(_why_stopped(e))
        if loader is not None:
            loader.close()  # bounded: a model mid-load or mid-score is killed
        raise
    finally:
        if unlisten is not None:
            unlisten()
        if ahead is not None:
            ahead.close()
    if loader is not None:
        loader.join()
        loader.close()
    graded = {s.name: run.group(f"final:{s.name}") for s in spec.sources}
    facts: dict[str, Any] = {}
    if ahead is not None and ahead.graded:
        # rows graded while their shard still generated, and how many their grade nodes took
        # (fewer: a batch no node waited for, e.g. its shard's generation failed)
        facts["graded_ahead"] = {"rows": ahead.graded, "used": ahead.used}
    return StudyRun(spec.checksum(), tuple(run.ordered()), graded, run.results["report"],
                    facts)


#: Stages whose nodes, while any waits to start, keep grading ahead off (see _pregrader).
_BEFORE_TAIL = frozenset({"build-rows", "filter-rows", "generate"})


def _pregrader(spec: StudySpec, store: Store, graph: Graph, workers: int | None
               ) -> Pregrader | None:
    """Grading ahead for the sources that generate and grade (None when none does). It grades
    only in generation's tail (every generate node started) while no node holds the ``cores``:
    earlier, each shard's grade node overlaps later shards' generation anyway, and grading
    ahead there only took CPU from the clients keeping the server busy (measured on 2 cores:
    the server's slots 6.3 of 8 full instead of 7.4, the run 7% slower)."""
    if not any(s.generate is not None and s.verifier is not None for s in spec.sources):
        return None

    def verifier(name: str) -> Any:
        src = spec.source(name)
        return src.verifier.build(spec.base_dir) if src.verifier is not None else None

    def busy() -> bool:
        if graph.held.get("cores", 0) > 0:
            return True
        return any(n.stage in _BEFORE_TAIL and n.id not in graph.started
                   for n in list(graph.nodes.values()))

    ahead = Pregrader(verifier, workers, busy=busy)
    graph.released = ahead.poke
    return ahead.start(store, spec)


class InlineExecutor:
    """Runs each node at once in the calling thread (for :func:`serve_cached`: lookups only)."""

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> tuple[bool, Any]:
        try:
            out = (True, node.fn(*args, **kwargs))
        except Exception as e:
            out = (False, e)
        done()
        return out

    def result(self, handle: tuple[bool, Any]) -> Any:
        ok, value = handle
        if not ok:
            raise value
        return value

    def close(self, cancel: bool) -> None:
        pass


def serve_cached(spec: StudySpec, store: Store, *,
                 progress: Callable[[StageResult], None] | None = print_progress
                 ) -> StudyRun | None:
    """The study run when every node's key is already in the store, else None (nothing is
    computed, nothing in the store changes, nothing is printed). What ``assay run`` tries
    before it starts Prefect: a fully cached rerun needs no orchestration."""
    graph = study_graph(spec, store, progress=None, workers=spec.execution.workers)
    with cached_only():
        run = run_graph(graph, InlineExecutor(), max_parallel=1, raise_first=False)
    if run.failed or run.skipped or "report" not in run.results:
        return None
    results = run.ordered()
    if progress is not None:
        for r in results:
            progress(r)
    graded = {s.name: run.group(f"final:{s.name}") for s in spec.sources}
    return StudyRun(spec.checksum(), tuple(results), graded, run.results["report"])
