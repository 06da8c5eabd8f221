"""The study graph started at once, before Prefect is up; the flow run then records each node
by waiting for the head start's result of it (a node is never run twice).

``assay run`` starts a :class:`HeadStart` as soon as the spec is checked; the embedded Prefect
server and Prefect's imports come up beside it. The flow's tasks call :func:`joined`: a node
the head start finished returns its result at once, one still running is waited on, and one it
never started (the head start stopped) is computed by the task itself.

Example:
    >>> from assay.spec import parse_spec
    >>> spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
    ...                   "fields: {prompt: q, completion: c, reward: r}}]}")
    >>> HeadStart.wanted(spec)
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from enum import Enum

from assay.spec import StudySpec
from assay.stages.cache import StageResult, print_progress
from assay.stages.chain import StudyPlan, StudyRun
from assay.stages.graph import Graph, Node, ThreadExecutor
from assay.stages.plan import max_parallel_for, run_study
from assay.stages.slots import model_device, on_cpu
from assay.store import Store


class _NotRun(Enum):
    NOT_RUN = "not run"  # an enum member, so ``is NOT_RUN`` narrows a node's outcome's type


#: A node's outcome when the head start never ran it: the flow's task computes it itself.
NOT_RUN = _NotRun.NOT_RUN
#: What the head start says of a node: its stage's pointer, or :data:`NOT_RUN`.
Outcome = StageResult | _NotRun


class HeadStartStopped(RuntimeError):
    """The head start was stopped (Ctrl-C, a stop, the flow ended) before this node started."""


class _RecordingExecutor(ThreadExecutor):
    """Threads, as for any local run, with each node's outcome published by node id."""

    def __init__(self, max_workers: int, head: HeadStart) -> None:
        super().__init__(max_workers)
        self.head = head

    def submit(self, node: Node, args: tuple[object, ...], kwargs: dict[str, object],
               waits: list[object], done: Callable[[], None]) -> Future[StageResult]:
        if self.head.stopped.is_set():  # no new work once stopped: dependents are skipped
            f: Future[StageResult] = Future()
            f.set_exception(HeadStartStopped(f"{node.where}: not started (run stopped)"))
            done()
            return f
        out = self.head.outcome(node.id)
        fut: Future[StageResult] = super().submit(node, args, kwargs, waits, done)

        def publish(f: Future[StageResult]) -> None:
            if out.done():
                return
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
            else:
                out.set_result(f.result())
        fut.add_done_callback(publish)
        return fut


class HeadStart:
    """Runs ``run_study(spec, store)`` on threads in the background from :meth:`start` on."""

    def __init__(self, spec: StudySpec, store: Store, *, max_parallel: int | None = None,
                 capacity: Mapping[str, int] | None = None, key: tuple[str, ...] = ()) -> None:
        self.spec, self.store = spec, store
        #: what the flow that records this run checks it against (assay.flows.study.head_key)
        self.key = key
        #: the run's start (run.json's ``started``): now, not when the flow run began
        self.started = time.time()
        self.max_parallel, self.capacity = max_parallel, capacity
        self.run: StudyRun | None = None
        self.error: BaseException | None = None
        self.stopped = threading.Event()
        self._outcomes: dict[str, Future[Outcome]] = {}
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None
        #: the run's one plan (its graph): the flow that records this run follows it
        #: (:meth:`follower`)
        self.plan = StudyPlan.build(spec, store, progress=print_progress)
        self.graph = self.plan.graph

    @staticmethod
    def wanted(spec: StudySpec) -> bool:
        """Local runs whose models all run on the CPU or behind a server: a CUDA model takes a
        Prefect concurrency slot (``gpu``), which needs the server, so those start with it."""
        if spec.execution.runner != "local":
            return False
        models: list[object] = []
        for src in spec.sources:
            models += [src.generate.model] if src.generate is not None else []
            models += [src.scoring_model] if src.scoring_model is not None else []
        if spec.reward is not None:
            models += spec.reward.models
        return all(on_cpu(d) for d in map(model_device, models) if d is not None)

    def outcome(self, node_id: str) -> Future[Outcome]:
        """The future result of node ``node_id`` (made on first ask, by either side)."""
        with self._lock:
            f = self._outcomes.get(node_id)
            if f is None:
                f = self._outcomes[node_id] = Future()
                if self._ended.is_set():  # asked after the head start ended: it never ran
                    f.set_result(NOT_RUN)
            return f

    def start(self) -> HeadStart:
        self._thread = threading.Thread(target=self._run, name="assay-head-start", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        ex = _RecordingExecutor(max_parallel_for(self.spec, self.max_parallel), self)
        try:
            # as the flow does: a store gc waits for this run; its nodes run here, so its
            # writes to an object store are published behind them
            with self.store.in_use(write_behind=True):
                self.run = run_study(self.spec, self.store, executor=ex,
                                     max_parallel=self.max_parallel, capacity=self.capacity,
                                     graph=self.graph)
        except BaseException as e:  # noqa: BLE001  (the flow's task for the node re-raises it)
            self.error = e
        finally:
            self.graph.stop_growing()  # a follower waiting on an expansion makes its own
            with self._lock:
                self._ended.set()
                for f in self._outcomes.values():
                    if not f.done():
                        f.set_result(NOT_RUN)

    def follower(self, spec: StudySpec, store: Store) -> Graph:
        """The graph for the flow that records this run (its spec and store): this run's
        graph, its shards as this run cuts them (:meth:`StudyPlan.follow`)."""
        return self.plan.follow(spec, store).graph

    def result(self, node_id: str) -> Outcome:
        """The head start's result for the node (waits while it runs), or :data:`NOT_RUN`.
        Bounded: every node ends, and the head start's end resolves every node it never ran."""
        return self.outcome(node_id).result()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the head start's own end (after its last node: models closed, facts set)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self) -> None:
        """Start no further node and stop grading shards in flight (Ctrl-C, a stop, a failed
        start): what is running ends at its next check, what was committed stays."""
        self.stopped.set()
        from assay.grading import cancel_running

        cancel_running()


def key_for(spec_path: str, overrides: Sequence[str] | None, store: Store) -> tuple[str, ...]:
    """What ties a head start to the flow that records it: spec path, overrides, store."""
    return (str(spec_path), *(overrides or ()), store.describe())


_CURRENT: list[HeadStart] = []
_JOIN: contextvars.ContextVar[tuple[HeadStart, str] | None] = contextvars.ContextVar(
    "assay_head_start_node", default=None)


@contextlib.contextmanager
def running(head: HeadStart) -> Iterator[HeadStart]:
    """Start ``head`` and make it the process's head start while the block runs (what the
    study flow joins); stopped on the way out when the block failed or was interrupted."""
    _CURRENT.append(head)
    ok = False
    try:
        head.start()
        yield head
        ok = True
    finally:
        _CURRENT.remove(head)
        if not ok:
            head.stop()


def current() -> HeadStart | None:
    """The head start of this process's ``assay run``, or None."""
    return _CURRENT[-1] if _CURRENT else None


@contextlib.contextmanager
def joining(head: HeadStart, node_id: str) -> Iterator[None]:
    """Within the block (and the contexts copied from it, as task runners do), :func:`joined`
    calls wait for node ``node_id`` of ``head``."""
    token = _JOIN.set((head, node_id))
    try:
        yield
    finally:
        _JOIN.reset(token)


def joined(fn: Callable[..., StageResult], *args: object, **kwargs: object) -> StageResult:
    """``fn(*args, **kwargs)``, or the head start's result for the node being recorded (see
    :func:`joining`): a failure there is raised here, as if it had happened here."""
    j = _JOIN.get()
    if j is not None:
        res = j[0].result(j[1])
        if res is not NOT_RUN:
            return res
    return fn(*args, **kwargs)
