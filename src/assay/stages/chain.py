"""The one-at-a-time order: the study graph (``assay.stages.wiring``) run with one slot, each
node in the calling thread through a ``call`` hook; :class:`StudyRun` is what every run returns.

``run_chain`` is the reference the concurrent graph is compared against byte for byte, and
what ``run_study(mode="chain")`` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from assay.spec import StudySpec
from assay.stages.cache import StageResult, print_progress
from assay.stages.declare import Progress, the_stage
from assay.stages.graph import Node, run_graph
from assay.stages.wiring import study_graph
from assay.store import Store

#: ``call(fn, *args, **kwargs)``: runs one stage function (directly, or however a caller
#: wants it run: with a device slot, as a task).
Call = Callable[..., StageResult]


def direct_call(fn: Callable[..., StageResult], *args: Any, **kwargs: Any) -> StageResult:
    """Run a stage function in this process (what ``run_study`` does without Prefect)."""
    return fn(*args, **kwargs)


class InlineExecutor:
    """Runs each node at once in the calling thread, through ``call``."""

    def __init__(self, call: Call = direct_call) -> None:
        self.call = call

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> tuple[bool, Any]:
        out: tuple[bool, Any]
        try:
            out = (True, self.call(node.fn, *args, **kwargs))
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


def run_chain(spec: StudySpec, store: Store, *, call: Call = direct_call,
              progress: Progress | None = print_progress,
              workers: int | None = None) -> StudyRun:
    """Run the study one node at a time (``call`` decides how each stage function runs)."""
    graph = study_graph(spec, store, progress=progress,
                        workers=workers or spec.execution.workers)
    run = run_graph(graph, InlineExecutor(call), max_parallel=1)
    graded = {s.name: run.group(f"final:{s.name}") for s in spec.sources}
    return StudyRun(spec.checksum(), tuple(run.ordered()), graded,
                    run.results[the_stage("report")])
