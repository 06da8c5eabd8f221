"""The study as a chain (the order before the graph): build-rows -> filter-rows -> [generate] ->
grade -> decontaminate -> score-rows -> score-reward-model -> measure -> report, one at a time.

``run_chain`` is kept as the reference the graph (``assay.stages.plan``) is compared against
byte for byte, and for ``run_study(mode="chain")``; :class:`StudyRun` is what both return.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from assay.spec import StudySpec
from assay.stages.build_rows import run_build_rows
from assay.stages.cache import StageResult, load_rows, print_progress
from assay.stages.decontaminate import run_decontaminate
from assay.stages.filter_rows import run_filter_rows
from assay.stages.generate import prompts_per_shard, run_generate_shard
from assay.stages.grade import run_grade_shard, shard_bounds
from assay.stages.measure import run_measure
from assay.stages.modes import LOGLIK_STAGES
from assay.stages.report import run_report
from assay.stages.score_reward_model import run_reward_audit
from assay.stages.score_rows import run_score_rows
from assay.store import Store


def direct_call(fn: Callable[..., StageResult], *args: Any, **kwargs: Any) -> StageResult:
    """Run a stage function in this process (what ``run_study`` does without Prefect)."""
    return fn(*args, **kwargs)


def direct_map(fn: Callable[..., StageResult],
               calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[StageResult]:
    return [fn(*a, **k) for a, k in calls]


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


def run_chain(spec: StudySpec, store: Store, *, call: Callable[..., StageResult] = direct_call,
              call_many: Callable[..., list[StageResult]] = direct_map,
              progress: Callable[[StageResult], None] | None = print_progress,
              workers: int | None = None) -> StudyRun:
    """Run the chain, skipping what the spec does not ask for (stages one after another).
    ``call``/``call_many`` decide where each stage runs (directly, or as Prefect tasks: see
    ``flows/study.py``)."""
    workers = workers or spec.execution.workers
    done: list[StageResult] = []
    graded: dict[str, tuple[StageResult, ...]] = {}
    for src in spec.sources:
        built = call(run_build_rows, store, spec, src.name, progress=progress)
        filtered = call(run_filter_rows, store, spec, src.name, built, progress=progress)
        done += [built, filtered]
        scorer = LOGLIK_STAGES.get(src.mode)
        if scorer is not None:  # questions or documents, scored by log-likelihood
            pb = shard_bounds(load_rows(store, filtered), spec.execution.shard_rows)
            graded[src.name] = tuple(call_many(scorer, [(
                (store, spec, src.name, filtered, b, i, len(pb)), {"progress": progress})
                for i, b in enumerate(pb)]))
            done += graded[src.name]
            continue
        if src.verifier is None:
            graded[src.name] = (filtered,)
            continue
        gen = src.generate
        if gen is not None:  # prompt rows -> k completions each, one generate shard per grade shard
            pb = shard_bounds(load_rows(store, filtered),
                              prompts_per_shard(spec.execution.shard_rows, gen.k))
            made = call_many(run_generate_shard,
                             [((store, spec, src.name, filtered, b, i, len(pb)),
                               {"progress": progress}) for i, b in enumerate(pb)])
            done += made
            calls = [((store, spec, src.name, g, (0, g.summary["rows"]), i, len(made)),
                      {"workers": workers, "progress": progress}) for i, g in enumerate(made)]
            graded[src.name] = tuple(call_many(run_grade_shard, calls))
            done += graded[src.name]
            continue
        bounds = shard_bounds(load_rows(store, filtered), spec.execution.shard_rows)
        calls = [((store, spec, src.name, filtered, b, i, len(bounds)),
                  {"workers": workers, "progress": progress}) for i, b in enumerate(bounds)]
        graded[src.name] = tuple(call_many(run_grade_shard, calls))
        done += graded[src.name]
    decon = (call(run_decontaminate, store, spec, graded, progress=progress)
             if spec.decontaminate else None)
    score = spec.reward.score if spec.reward is not None else None
    for name in (score.sources if score is not None else ()):
        # the scored shards replace the graded ones: measure, report and the rows Parquet read
        # the rm:<model> markers like any other
        parts = graded[name]
        graded[name] = tuple(call(run_score_rows, store, spec, name, part, i, len(parts),
                                  progress=progress) for i, part in enumerate(parts))
        done += graded[name]
    audits = [call(run_reward_audit, store, spec, m.name, progress=progress)
              for m in (spec.reward.models if spec.reward and spec.reward.data else ())]
    measured = call(run_measure, store, spec, graded, progress=progress) if spec.sources else None
    report = call(run_report, store, spec, graded, measured, decon, tuple(audits),
                  progress=progress)
    done += [r for r in (decon, *audits, measured, report) if r is not None]
    return StudyRun(spec.checksum(), tuple(done), graded, report)
