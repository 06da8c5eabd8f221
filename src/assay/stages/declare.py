"""What a stage declares about itself (name, version, scope, what it reads, its slots, its
function) and the typed values every stage function takes: the run context (with its run's live
state) and a shard.

The study graph (``assay.stages.wiring``), the one-slot order (``assay.stages.chain``) and the
Prefect tasks (``tasks/stages.py``) are derived from :data:`STAGES`; a stage's module declares
it once, at its end, with :func:`declare`.

Example:
    >>> from assay.stages import STAGES
    >>> g = STAGES["grade"]
    >>> (g.name, g.version, g.scope)
    ('grade', 1, 'shard')
    >>> Shard(1, 3, (8, 16)).label("a")
    'a shard 2/3'
    >>> ctx = RunContext(None, None)
    >>> ctx.on("a").state is ctx.state, ctx.pregrader, ctx.cached_only
    (True, None, False)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from assay.modes import shard_bounds  # noqa: F401  (re-exported: its home was here)
from assay.stages.cache import StageResult, define_stage, is_cached_only, shard_label

if TYPE_CHECKING:
    from assay.spec import StudySpec
    from assay.stages.stream import Pregrader
    from assay.store import Store

#: ``source``: once per source (its rows); ``shard``: once per shard of a source's rows;
#: ``study``: once per study (or once per item it names, see :attr:`Stage.each`).
Scope = Literal["source", "shard", "study"]

#: Told of every stage result (started, cached, computed): the CLI's progress lines.
Progress = Callable[[StageResult], None]

#: What a run looks a stage's results up as (see :attr:`Stage.results_role`).
Role = Literal["completions", "measurements", "report"]


class DeviceSlot(Protocol):
    """``slot(device)``: a context manager held while a model works on ``device`` (the Prefect
    task's strict ``gpu`` concurrency slot; none here: this library never imports Prefect)."""

    def __call__(self, device: str, /) -> AbstractContextManager[object]: ...


class RunState:
    """The live state of one run of a study graph, one object shared by every context of the
    run (:meth:`RunContext.on` and ``dataclasses.replace`` keep it): its background grader
    (:class:`~assay.stages.stream.Pregrader`) while one runs.

    Per run, not per spec: two runs of one spec on one store side by side in a process each
    have their own. It holds threads of this process, so a pickled copy (a node sent to a
    cluster worker) arrives empty: that process grades nothing ahead."""

    __slots__ = ("_lock", "_pregrader")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pregrader: Pregrader | None = None

    @property
    def pregrader(self) -> Pregrader | None:
        """The run's background grader, while one runs (None: every row is graded by its
        grade node)."""
        return self._pregrader

    def attach(self, pregrader: Pregrader) -> None:
        """Make ``pregrader`` the run's background grader (:meth:`Pregrader.start`)."""
        with self._lock:
            self._pregrader = pregrader

    def detach(self, pregrader: Pregrader) -> None:
        """Forget ``pregrader`` if it is still the run's (:meth:`Pregrader.close`)."""
        with self._lock:
            if self._pregrader is pregrader:
                self._pregrader = None

    def __reduce__(self) -> tuple[type[RunState], tuple[()]]:
        return (RunState, ())  # threads and locks stay in this process (see the docstring)


@dataclass(frozen=True)
class RunContext:
    """What every node of one study run shares: the store, the spec, where progress goes, the
    grading workers, the device slot and the run's live :class:`RunState`; ``source`` is the
    source a source or shard stage works on (empty for a study stage)."""

    store: Store
    spec: StudySpec
    progress: Progress | None = None
    workers: int | None = None
    device_slot: DeviceSlot | None = None
    source: str = ""
    # not compared: two contexts of one run are equal whatever their run holds right now
    state: RunState = field(default_factory=RunState, compare=False, repr=False)

    def on(self, source: str) -> RunContext:
        """This context for one source's nodes (the same run state)."""
        return replace(self, source=source)

    @property
    def pregrader(self) -> Pregrader | None:
        """The run's background grader, if one runs (:attr:`RunState.pregrader`)."""
        return self.state.pregrader

    @property
    def cached_only(self) -> bool:
        """Whether this node runs inside :func:`~assay.stages.cache.cached_only` (a probe of
        a fully cached run: a stage that would compute raises
        :class:`~assay.stages.cache.NotCached` instead). A context variable, not a field: every
        stage's :func:`~assay.stages.cache.cached_stage` obeys it, with or without a context."""
        return is_cached_only()


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` of a source's rows: rows ``bounds`` (start, stop) of the
    stage's input (a whole shard of rows when the input is the previous shard stage's)."""

    index: int
    count: int
    bounds: tuple[int, int]
    #: the content checksum of those rows when the cut knows it (:func:`cut_rows`)
    checksum: str | None = None

    def label(self, source: str) -> str:
        return shard_label(source, self.index, self.count)

    def node_id(self, stage: str, source: str) -> str:
        """The graph's id of this shard's node of ``stage`` (``grade[a shard 3/8]``)."""
        return f"{stage}[{self.label(source)}]"


def _no_slots(spec: StudySpec, item: str) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class Stage:
    """One stage's declaration.

    ``fn`` by scope: a ``source`` stage is ``fn(ctx, *results of reads)``; a ``shard`` stage
    ``fn(ctx, rows, shard)`` (``rows``: the output of the shard's previous stage, or the
    source's rows cut by ``shard``; its ``reads`` names the stages it may follow, and the
    source's mode decides which it does); a ``study`` stage
    ``fn(ctx, [item,] *inputs)``, an input per name in ``reads``: ``rows`` (every source's
    final rows, by source), ``graded`` (the graded rows of the sources ``sources(spec)``
    names), or another study stage's result (None when the spec skips it; a tuple for a stage
    with ``each``).

    ``slots(spec, item)``: the resource slots a node holds (``cores``, ``gpu``; a model
    server's connections are its own pool); ``item`` is the node's source or item.
    ``device``: the stage puts a model on a device, so its Prefect task passes the ``gpu``
    slot. ``asks_model``: the stage asks the model under test (the runner starts these after
    work on rows that exist). A shard stage that no mode lists runs on the rows of the sources
    ``applies(spec, source)`` accepts, after their mode's stages. ``rows_per_shard(spec,
    source)``: how many input rows a shard holds when this stage cuts a source's rows.
    ``when(spec)``: whether a study stage runs at all.

    The runner's policy (``assay.stages.plan``, ``finish``, ``tasks/stages.py``) reads these,
    never a stage's name: ``results_role`` says what the run looks the stage's results up as
    (:data:`Role`: ``completions`` are logged per task run, start the row-scoring preload and
    give run.json's generation facts; ``measurements`` give the selected-rows export;
    ``report`` is the run's report). ``loads_models``: its models are the ones the runner
    loads ahead, during generation (its nodes wait for that load). ``grades_ahead``: its rows
    may be graded while the previous (completions) stage still streams them.
    ``warm_imports``: heavy imports the runner may do early, off the critical path, once new
    completions mean the stage will compute. ``order``: where a shard stage that follows a
    mode's stages goes among the others that do (lower first; ties, as between any stages
    that are ready together, by name)."""

    name: str
    version: int
    scope: Scope
    fn: Callable[..., StageResult]
    reads: tuple[str, ...] = ()
    slots: Callable[[StudySpec, str], tuple[str, ...]] = _no_slots
    device: bool = False
    asks_model: bool = False
    applies: Callable[[StudySpec, str], bool] | None = None
    rows_per_shard: Callable[[StudySpec, str], int] | None = None
    when: Callable[[StudySpec], bool] | None = None
    each: Callable[[StudySpec], Sequence[str]] | None = None
    sources: Callable[[StudySpec], Sequence[str]] | None = None
    results_role: Role | None = None
    loads_models: bool = False
    grades_ahead: bool = False
    warm_imports: tuple[str, ...] = ()
    order: int = 0


#: Every declared stage by name, in declaration order.
STAGES: dict[str, Stage] = {}


def declare(stage: Stage) -> Stage:
    """Register ``stage`` (its module calls this once) and its cache version."""
    define_stage(stage.name, stage.version)
    STAGES[stage.name] = stage
    return stage


def with_role(role: Role) -> tuple[str, ...]:
    """The names of the declared stages whose results are ``role``'s.

    Example:
        >>> with_role("report"), the_stage("measurements")
        (('report',), 'measure')
    """
    return tuple(n for n, s in STAGES.items() if s.results_role == role)


def the_stage(role: Role) -> str:
    """The one declared stage whose results are ``role``'s (the report, the measurements)."""
    (name,) = with_role(role)
    return name


__all__ = ["STAGES", "DeviceSlot", "Progress", "Role", "RunContext", "RunState", "Scope", "Shard",
           "Stage", "declare", "shard_bounds", "the_stage", "with_role"]
