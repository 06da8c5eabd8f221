"""The measure stage: the measurements the spec asks for, over each source's graded rows.

pass@k, paired comparisons, eval variance, holdout sizing, RL selection, and what each scoring
reward model's ``rm:<model>`` marker says (best-of-n, ranking, length), as JSON documents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from assay.registry import Registry
from assay.rows import Rows, as_table
from assay.spec import StudySpec
from assay.stages.cache import (
    StageResult,
    cached_stage,
    concat_rows,
    graded_checksums,
)
from assay.stages.declare import RunContext, Stage, declare

STAGE = "measure"  # declared at the end


#: What computing the measurements imports (scipy.special and pandas through assay.measure),
#: for a thread with time to spare to import before the stage runs (see
#: assay.stages.plan.Preloader). Not scipy.optimize: measuring never needs it (0.5 s of CPU).
WARM_IMPORTS = ("assay.measure",)


@dataclass(frozen=True)
class MeasureContext:
    """What a registered measure reads: the study, its sources' names and their graded rows;
    ``outputs`` takes tables a measure stores beside the measurements (``selected``)."""

    spec: StudySpec
    names: list[str]
    rows: Mapping[str, Any]
    outputs: dict[str, Any]

    def sources_in_mode(self, mode: str) -> list[str]:
        return [s.name for s in self.spec.sources if s.mode == mode]


#: A measure: ``fn(entry, ctx) -> [documents]`` for the spec's ``measure.<name>`` entry (a
#: list entry such as ``compare`` is called once per item), one per field of ``MeasureSpec``.
Measure = Callable[[Any, MeasureContext], list[dict[str, Any]]]
MEASURES: Registry[Measure] = Registry("measure")


def run_measure(ctx: RunContext, graded: Mapping[str, Sequence[StageResult]]) -> StageResult:
    """The measurements the spec asks for (each a registered measure), over the graded rows of
    each source."""
    store, spec = ctx.store, ctx.spec
    m = spec.measure
    names = [s.name for s in spec.sources]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        rows = {n: concat_rows(store, graded[n]) for n in names}
        ctx = MeasureContext(spec, names, rows, {})
        docs: list[dict[str, Any]] = []
        for name, entry in m:  # the spec's fields in order: report.json's order
            for e in entry if isinstance(entry, list) else [] if entry is None else [entry]:
                docs += MEASURES.get(name).obj(e, ctx)
        docs += reward_row_docs(spec, rows)
        return {**ctx.outputs, "measurements": docs}, {"rows": sum(len(r) for r in rows.values())}

    params = m.model_dump(mode="json")
    if spec.reward is not None and spec.reward.score is not None:
        params = {**params, "reward_rows": [spec.reward.score.sources,
                                            [e.name for e in spec.reward.scoring_models()]]}
    return cached_stage(store, STAGE, inputs=graded_checksums(graded, names),
                        params=params, compute=compute,
                        label=",".join(names), progress=ctx.progress)


def _has_sources(spec: StudySpec) -> bool:
    return bool(spec.sources)


declare(Stage(STAGE, 1, "study", run_measure, reads=("rows",), when=_has_sources))


# The measures. Each imports its computation when called: a cached measure stage (a fully
# cached rerun) never loads scipy.


@MEASURES.register("pass_at")
def _pass_at(e: Any, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import pass_at, pass_at_by
    from assay.report import result_doc

    docs = []
    for n in e.sources or ctx.names:
        docs.append(result_doc("pass_at", f"pass_at[{n}]", pass_at(ctx.rows[n], k=e.k), source=n))
        if e.by is not None:
            docs.append(_by_doc(pass_at_by(ctx.rows[n], e.by, k=e.k), n))
    return docs


@MEASURES.register("choice_accuracy")
def _choice_accuracy(e: Any, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure.choices import choice_accuracy
    from assay.report import result_doc

    return [result_doc("choice_accuracy", f"choice_accuracy[{n}]" + (f" by {e.by}" if e.by else ""),
                       choice_accuracy(ctx.rows[n], by=e.by), source=n)
            for n in e.sources or ctx.sources_in_mode("choices")]


@MEASURES.register("perplexity")
def _perplexity(e: Any, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure.perplexity import perplexity
    from assay.report import result_doc

    return [result_doc("perplexity", f"perplexity[{n}]", perplexity(ctx.rows[n]), source=n)
            for n in e.sources or ctx.sources_in_mode("perplexity")]


@MEASURES.register("compare")
def _compare(c: Any, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import compare, compare_by
    from assay.report import result_doc

    rows = ctx.rows
    comparison = compare(rows[c.before], rows[c.after], proxy=c.proxy, metrics=c.metrics,
                         alpha=c.alpha)
    docs = [result_doc("compare", f"compare[{c.before} -> {c.after}]", comparison,
                       before=c.before, after=c.after)]
    if c.by is not None:
        res_by = compare_by(rows[c.before], rows[c.after], c.by, metrics=c.metrics, alpha=c.alpha)
        docs.append(result_doc("compare_by", f"compare[{c.before} -> {c.after}] by {c.by}",
                               res_by, before=c.before, after=c.after, by=c.by))
    return docs


@MEASURES.register("eval_variance")
def _eval_variance(e: Any, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import eval_variance
    from assay.report import result_doc

    return [result_doc("eval_variance", f"eval_variance[{n}]", eval_variance(ctx.rows[n]),
                       source=n) for n in e.sources or ctx.names]


@MEASURES.register("holdout_size")
def _holdout_size(h: Any, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import holdout_size
    from assay.report import result_doc

    rows = ctx.rows
    sizing = holdout_size(h.effect, before=rows[h.before] if h.before else None,
                          after=rows[h.after] if h.after else None, power=h.power, alpha=h.alpha)
    return [result_doc("holdout_size", "holdout_size", sizing)]


@MEASURES.register("select")
def _select(e: Any, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import select
    from assay.report import result_doc

    selection = select(ctx.rows[e.source], mode="rl", band=e.band)
    ctx.outputs["selected"] = Rows(as_table(selection.rows, require=()))
    return [result_doc("select", f"select[{e.source}]", selection, source=e.source)]


def reward_row_docs(spec: StudySpec, rows: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per scored source and scoring reward model: best-of-n next to pass@1 and the oracle,
    ranking accuracy and length concordance (:func:`assay.reward.rowstats.reward_rows`)."""
    from assay.report import result_doc
    from assay.reward.rowstats import reward_rows
    from assay.stages.score_rows import marker_name

    if spec.reward is None or spec.reward.score is None:
        return []
    docs = []
    for n in spec.reward.score.sources:
        for e in spec.reward.scoring_models():
            mk = marker_name(e.name)
            docs.append(result_doc("reward_rows", f"reward_rows[{n}, {mk}]",
                                   reward_rows(rows[n], mk), source=n, model=e.name, marker=mk))
    return docs


def _by_doc(res: Any, source: str) -> dict[str, Any]:
    """The stored document of a per-category pass@k, with the per-category pass@1 estimates
    listed for the report's plot."""
    from assay.report import collect_estimates, result_doc

    cats = []
    for c in res.categories:
        if c.result is not None:
            cats.append({**collect_estimates(c.result.pass_at_1)[0], "category": c.category})
    macro = {**collect_estimates(res.macro)[0], "category": "macro average"}
    return result_doc("pass_at_by", f"pass_at[{source}] by {res.by}", res, source=source, by=res.by,
                      categories=cats, macro=macro)
