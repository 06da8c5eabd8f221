"""Running the study graph (``assay.stages.wiring`` derives it from the stage declarations):
the runner's policy for a study (how many nodes at once, the slots, loading the row-scoring
models during generation, grading ahead) and ``run_study``, on threads here or on Prefect
tasks (flows/study.py); ``serve_cached`` answers a fully cached rerun without running anything.

Which node runs when never changes a byte of the results: every node calls the same stage
function with the same inputs as the one-slot order (``assay.stages.chain``).

Example:
    >>> from assay.spec import parse_spec
    >>> spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
    ...                   "fields: {prompt: q, completion: c, reward: r}}]}")
    >>> max_parallel_for(spec), Preloader.wanted(spec)
    (8, False)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from assay import libguard, stop
from assay import progress as live
from assay.judging import Verifier
from assay.sources.base import Mode
from assay.spec import StudySpec
from assay.stages.cache import cached_only, print_progress
from assay.stages.chain import Call, InlineExecutor, StudyPlan, StudyRun, direct_call, run_chain
from assay.stages.declare import STAGES, Progress, RunContext, the_stage, with_role
from assay.stages.graph import Executor, Graph, Node, ThreadExecutor, run_graph
from assay.stages.modes import row_of
from assay.stages.score_rows import preload
from assay.stages.seams import Get, NodeCall
from assay.stages.slots import model_device, scoring_slots
from assay.stages.stream import Pregrader
from assay.stages.wiring import study_graph
from assay.store import Store

if TYPE_CHECKING:
    from assay.reward.kinds import RewardModelEntry

#: Default cap on nodes in flight (``execution.max_parallel``): generate nodes mostly wait on
#: their server, grading and scoring hold the ``cores`` and ``gpu`` slots.
DEFAULT_MAX_PARALLEL = 8

#: Slots: one grading shard at a time uses every core (its own worker processes); one reward or
#: local generation model at a time holds the ``gpu`` (on CPU-only machines: the cores' memory).
#: A model server needs no slot here: its ``max_connections`` is its own pool.
LOCAL_CAPACITY = {"cores": 1, "gpu": 1}

__all__ = ["DEFAULT_MAX_PARALLEL", "LOCAL_CAPACITY", "Preloader", "follower",
           "max_parallel_for", "run_study", "serve_cached", "study_graph"]


def _grading_workers(workers: int | None, loader: Preloader | None) -> int | None:
    """Grading processes for a shard that starts now: one fewer while the row-scoring model
    loads on its thread. The load is CPU work on the critical path (every score-rows node waits
    for it), and with every core grading it got a fraction of one. Grades do not depend on
    the worker count."""
    if loader is None or loader.idle():
        return workers
    from assay.grading import cores

    n = workers if workers is not None else cores()
    return max(1, n - 1)


def _while_loading(loader: Preloader) -> Callable[[Node], None]:
    """The graph's ``on_add`` while ``loader`` may load the row-scoring models: score-rows
    nodes wait for the load (holding no slot: not the cores grading needs), and shard nodes
    that grade on the cores leave one to the load while it runs."""
    def on_add(node: Node) -> None:
        if STAGES[node.stage].loads_models:
            node.ready = loader.idle
        elif node.scope == "shard" and "cores" in node.resources:
            inner = node.args

            def args(get: Get) -> NodeCall:
                a, kw = inner(get)
                ctx: RunContext = a[0]
                return (replace(ctx, workers=_grading_workers(ctx.workers, loader)), *a[1:]), kw
            node.args = args
    return on_add


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
        # would otherwise hold the GIL the generation clients' threads need (the server's
        # slots then stood partly empty during the load).
        self.worker = ScoringWorker()
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.wake: Callable[[], None] | None = None  # called when the load ends
        self._ended = threading.Event()

    def warm(self) -> None:
        """Start the worker and its imports (torch's: seconds of one core) as the run starts,
        while this process builds the rows and starts the clients on the other core; the
        model itself loads only once generation has work (:meth:`__call__`). A run that ends
        up generating nothing wasted those seconds of an otherwise idle core."""
        models = self.spec.reward.scoring_models() if self.spec.reward is not None else []
        kinds = sorted({type(m).__module__ for m in models if model_device(m) is not None})
        self.worker.warm(["torch", *kinds])

    def remote_models(self) -> list[RewardModelEntry]:
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
        # the imports the stages declare (scipy's, matplotlib's) are done here, off the
        # critical path, not at the very end. A failing import is left for its stage to raise.
        libguard.warm(_warm_imports())

    @staticmethod
    def wanted(spec: StudySpec) -> bool:
        """Whether this study gains from a preload (see the class docstring)."""
        if spec.reward is None or spec.reward.score is None:
            return False
        scored = set(spec.reward.score.sources)
        served = [s for s in spec.sources if s.name in scored and s.generate is not None
                  and model_device(s.generate.model) is None]
        models = spec.reward.scoring_models()
        return bool(served) and bool(models) and "cores" in scoring_slots(models)

    def __call__(self, state: live.UnitState) -> None:
        if self.thread is not None or not state.total \
                or state.stage not in with_role("completions"):
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


def _warm_imports() -> list[str]:
    """What the study stages declare to import early (``Stage.warm_imports``), in the order the
    graph runs them."""
    from assay.stages.wiring import in_order

    study = in_order(s for s in STAGES.values() if s.scope == "study")
    return [m for s in study for m in s.warm_imports]


def _grades_ahead(source_mode: Mode) -> bool:
    """Whether a mode's shards make completions that a later stage of theirs may grade ahead
    (``Stage.results_role``, ``Stage.grades_ahead``)."""
    roles = [STAGES[n] for n in row_of(source_mode).stages]
    return any(a.results_role == "completions" and any(b.grades_ahead for b in roles[i + 1:])
               for i, a in enumerate(roles))


def max_parallel_for(spec: StudySpec, override: int | None = None) -> int:
    """The cap on nodes in flight: ``override`` (``--max-parallel``), else the spec's, else
    :data:`DEFAULT_MAX_PARALLEL`."""
    return override or spec.execution.max_parallel or DEFAULT_MAX_PARALLEL


def _why_stopped(e: BaseException) -> str:
    """The stop's reason as :mod:`assay.stop` records it."""
    if type(e).__name__ in ("Terminated", "TerminationSignal"):
        return "terminated (SIGTERM)"
    return str(e) or "interrupted"


def run_study(spec: StudySpec, store: Store, *, call: Call = direct_call,
              progress: Progress | None = print_progress,
              workers: int | None = None, mode: str = "graph", executor: Executor | None = None,
              max_parallel: int | None = None,
              capacity: Mapping[str, int] | None = None, preload: bool = True,
              stream: bool | None = None, graph: Graph | None = None) -> StudyRun:
    """Run the study: as a graph (default; on ``executor``, threads unless given) or, with
    ``mode="chain"``, the same graph one node at a time, each through ``call`` (the reference
    the concurrent run is compared against). Results come back in the chain's order.
    ``preload``: load row-scoring models during generation (:class:`Preloader`); ``stream``
    (default: as ``preload``): grade each generated prompt as it finishes
    (:class:`~assay.stages.stream.Pregrader`). Both only for executors that run nodes in this
    process (not a cluster's workers). ``graph``: the study's graph when the caller built it
    (a head start's, or a :func:`follower` of it), else it is built here."""
    if mode == "chain":
        return run_chain(spec, store, call=call, progress=progress, workers=workers)
    if mode != "graph":
        raise ValueError(f"run_study: mode must be 'graph' or 'chain', not {mode!r}")
    # a new run: a stop left by an earlier, finished run is over; one that begins beside a
    # running one (the head start's graph and the flow's) shares its stop
    with stop.run():
        return _run_graph(spec, store, executor=executor, progress=progress, workers=workers,
                          max_parallel=max_parallel, capacity=capacity, preload=preload,
                          stream=stream, graph=graph)


def _run_graph(spec: StudySpec, store: Store, *, executor: Executor | None,
               progress: Progress | None,
               workers: int | None, max_parallel: int | None,
               capacity: Mapping[str, int] | None, preload: bool,
               stream: bool | None, graph: Graph | None) -> StudyRun:
    workers = workers or spec.execution.workers
    cap = max_parallel_for(spec, max_parallel)
    loader = Preloader(spec) if preload and Preloader.wanted(spec) else None
    # every heavy import the nodes make here, done before they run side by side (why: see
    # assay.libguard); the preloaded scoring models load in their own process
    libguard.prepare(spec, loader.remote_models() if loader is not None else ())
    plan = (StudyPlan(spec, store, graph) if graph is not None
            else StudyPlan.build(spec, store, progress=progress, workers=workers))
    graph = plan.graph
    if loader is not None:
        graph.on_add = _while_loading(loader)  # shard nodes are added as their rows exist
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
    facts: dict[str, Any] = {}
    if ahead is not None and ahead.graded:
        # rows graded while their shard still generated, and how many their grade nodes took
        # (fewer: a batch no node waited for, e.g. its shard's generation failed)
        facts["graded_ahead"] = {"rows": ahead.graded, "used": ahead.used}
    return plan.result(run, facts)


def follower(leader: Graph, spec: StudySpec, store: Store) -> Graph:
    """The study graph of a run that records ``leader``'s run (:meth:`StudyPlan.follow`)."""
    return StudyPlan(spec, store, leader).follow(spec, store).graph


def _pregrader(spec: StudySpec, store: Store, graph: Graph, workers: int | None
               ) -> Pregrader | None:
    """Grading ahead for the sources that generate and grade (None when none does). It grades
    only in generation's tail (every generate node started) while no node holds the ``cores``:
    earlier, each shard's grade node overlaps later shards' generation anyway, and grading
    ahead there only took CPU from the clients keeping the server busy (on a small machine
    the server's slots stood less full and the run was slower)."""
    if not any(_grades_ahead(s.mode) and s.verifier is not None for s in spec.sources):
        return None

    def verifier(name: str) -> Verifier | None:
        src = spec.source(name)
        return src.verifier.build(spec.base_dir) if src.verifier is not None else None

    def busy() -> bool:
        if graph.held.get("cores", 0) > 0:
            return True
        # rows still to build, or the model still to ask: not yet generation's tail
        return any((n.scope == "source" or n.asks_model) and n.id not in graph.started
                   for n in list(graph.nodes.values()))

    ahead = Pregrader(verifier, workers, busy=busy)
    graph.released = ahead.poke
    return ahead.start(graph.state)


#: nodes a fully cached rerun on an object store looks up at once
CACHED_READERS = 8


def serve_cached(spec: StudySpec, store: Store, *,
                 progress: Progress | None = print_progress
                 ) -> StudyRun | None:
    """The study run when every node's key is already in the store, else None (nothing is
    computed, nothing in the store changes, nothing is printed). What ``assay run`` tries
    before it starts Prefect: a fully cached rerun needs no orchestration."""
    plan = StudyPlan.build(spec, store, progress=None)
    # On an object store each node's lookup is a few round trips (its ref, its pointer, its
    # outputs), so independent nodes read side by side; a local store answers in microseconds,
    # inline. Only for specs whose kinds import nothing heavy: this path never warms imports
    # (assay.libguard), and nodes on threads must not meet a half-done one.
    side_by_side = store.remote and not libguard.spec_imports(spec)
    # in_context: cached_only is a context variable, which a plain pool thread would not see
    ex: Executor = (ThreadExecutor(CACHED_READERS, in_context=True) if side_by_side
                    else InlineExecutor())
    with cached_only():
        run = run_graph(plan.graph, ex, max_parallel=CACHED_READERS if side_by_side else 1,
                        raise_first=False)
    if run.failed or run.skipped or the_stage("report") not in run.results:
        return None
    served = plan.result(run)
    if progress is not None:
        for r in served.results:
            progress(r)
    return served
