"""The run builder: :class:`StudyPlan` builds a study run's one graph (``assay.stages.wiring``),
or follows another run's, and turns what ran into the :class:`StudyRun` every run returns; and
the one-at-a-time order, that graph run with one slot, each node in the calling thread.

Every run is built here: ``run_chain`` (the reference the concurrent graph is compared against
byte for byte, and what ``run_study(mode="chain")`` runs), ``run_study``'s graph, the fully
cached rerun and the head start (``assay.stages.plan``, ``assay.stages.headstart``).

Example:
    >>> from assay.spec import parse_spec
    >>> spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
    ...                   "fields: {prompt: q, completion: c, reward: r}}]}")
    >>> sorted(StudyPlan.build(spec, None, progress=None).graph.nodes)
    ['build-rows[a]', 'filter-rows[a]', 'measure', 'report']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from assay.spec import StudySpec
from assay.stages.cache import StageResult, print_progress
from assay.stages.declare import Progress, RunContext, the_stage
from assay.stages.graph import Graph, GraphRun, Node, run_graph
from assay.stages.seams import Get, NodeCall
from assay.stages.wiring import study_graph
from assay.store import Store

#: ``call(fn, *args, **kwargs)``: runs one stage function (directly, or however a caller
#: wants it run: with a device slot, as a task).
Call = Callable[..., StageResult]


def direct_call(fn: Callable[..., StageResult], *args: object, **kwargs: object) -> StageResult:
    """Run a stage function in this process (what ``run_study`` does without Prefect)."""
    return fn(*args, **kwargs)


class InlineExecutor:
    """Runs each node at once in the calling thread, through ``call``."""

    def __init__(self, call: Call = direct_call) -> None:
        self.call = call

    def submit(self, node: Node, args: tuple[object, ...], kwargs: dict[str, object],
               waits: list[StageResult | Exception], done: Callable[[], None]
               ) -> StageResult | Exception:
        out: StageResult | Exception  # the handle: what the node returned, or raised
        try:
            out = self.call(node.fn, *args, **kwargs)
        except Exception as e:
            out = e
        done()
        return out

    def result(self, handle: StageResult | Exception) -> StageResult:
        if isinstance(handle, Exception):  # stage functions return pointers, never exceptions
            raise handle
        return handle

    def close(self, cancel: bool) -> None:
        pass


@dataclass(frozen=True)
class StudyRun:
    """Every stage pointer of one study run, in execution order, plus the named ones.
    ``facts``: what this run did that its results do not show (run.json's, e.g. the rows it
    graded ahead of their grade nodes)."""

    spec_checksum: str
    results: tuple[StageResult, ...]
    graded: dict[str, tuple[StageResult, ...]]
    report: StageResult | None
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def cached_stages(self) -> list[str]:
        return [f"{r.stage}[{r.label}]" for r in self.results if r.cached]

    @property
    def computed_stages(self) -> list[str]:
        return [f"{r.stage}[{r.label}]" for r in self.results if not r.cached]


@dataclass(frozen=True)
class StudyPlan:
    """One study run's graph, built once (:meth:`build`) or following another run's
    (:meth:`follow`), for the spec and store it runs with. Which node runs when is the
    runner's policy (``assay.stages.plan``), never the plan's."""

    spec: StudySpec
    store: Store
    graph: Graph

    @classmethod
    def build(cls, spec: StudySpec, store: Store | None, *,
              progress: Progress | None = print_progress,
              workers: int | None = None) -> StudyPlan:
        """The study's graph (its shards are added when a source's filtered rows exist);
        ``workers``: grading processes, else the spec's ``execution.workers``."""
        graph = study_graph(spec, store, progress=progress,
                            workers=workers or spec.execution.workers)
        return cls(spec, store, graph)  # type: ignore[arg-type]  # a listing needs no store

    def follow(self, spec: StudySpec, store: Store) -> StudyPlan:
        """The plan of a run that records this one's (the flow recording a head start): this
        graph's nodes and, as this run makes them, its shards (one graph per ``assay run``:
        the rows are cut once), each node called with ``spec`` and ``store`` (the ones its
        recorded task shows, and computes with where this run never ran it)."""
        def adapt(node: Node) -> Node:
            inner = node.args

            def args(get: Get) -> NodeCall:
                a, kw = inner(get)
                if a and isinstance(a[0], RunContext):
                    a = (replace(a[0], spec=spec, store=store), *a[1:])
                return a, kw
            return replace(node, args=args)
        return StudyPlan(spec, store, self.graph.follower(adapt))

    def result(self, run: GraphRun, facts: dict[str, Any] | None = None) -> StudyRun:
        """What ``run`` (this plan's graph, run) returns: every result in the chain's order,
        each source's final rows, the report."""
        graded = {s.name: run.group(f"final:{s.name}") for s in self.spec.sources}
        return StudyRun(self.spec.checksum(), tuple(run.ordered()), graded,
                        run.results[the_stage("report")], facts or {})


def run_chain(spec: StudySpec, store: Store, *, call: Call = direct_call,
              progress: Progress | None = print_progress,
              workers: int | None = None) -> StudyRun:
    """Run the study one node at a time (``call`` decides how each stage function runs)."""
    plan = StudyPlan.build(spec, store, progress=progress, workers=workers)
    return plan.result(run_graph(plan.graph, InlineExecutor(call), max_parallel=1))
