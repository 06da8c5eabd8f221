"""The measure stage: the measurements the spec asks for, over each source's graded rows.

pass@k, paired comparisons, eval variance, holdout sizing, RL selection, and what each scoring
reward model's ``rm:<model>`` marker says (best-of-n, ranking, length), as JSON documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assay.rows import Rows, as_table
from assay.spec import StudySpec
from assay.stages.cache import (
    StageResult,
    cached_stage,
    concat_rows,
    define_stage,
    graded_checksums,
)
from assay.store import Store

STAGE = define_stage("measure", 1)


#: What computing the measurements imports (scipy.special and pandas through assay.measure),
#: for a thread with time to spare to import before the stage runs (see
#: assay.stages.plan.Preloader). Not scipy.optimize: measuring never needs it (0.5 s of CPU).
WARM_IMPORTS = ("assay.measure",)


def run_measure(store: Store, spec: StudySpec, graded: Mapping[str, Sequence[StageResult]], *,
                progress: Any = None) -> StageResult:
    """The measurements the spec asks for, over the graded rows of each source."""
    m = spec.measure
    names = [s.name for s in spec.sources]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        # imported here: a cached measure (a fully cached rerun) never loads scipy
        from assay.measure import (
            compare,
            compare_by,
            eval_variance,
            holdout_size,
            pass_at,
            pass_at_by,
            select,
        )
        from assay.report import result_doc

        rows = {n: concat_rows(store, graded[n]) for n in names}
        docs: list[dict[str, Any]] = []
        outputs: dict[str, Any] = {}
        if m.pass_at is not None:
            for n in m.pass_at.sources or names:
                docs.append(result_doc("pass_at", f"pass_at[{n}]", pass_at(rows[n], k=m.pass_at.k),
                                       source=n))
                if m.pass_at.by is not None:
                    docs.append(_by_doc(pass_at_by(rows[n], m.pass_at.by, k=m.pass_at.k), n))
        if m.choice_accuracy is not None:
            from assay.measure.choices import choice_accuracy

            ca = m.choice_accuracy
            for n in ca.sources or [s.name for s in spec.sources if s.mode == "choices"]:
                docs.append(result_doc("choice_accuracy", f"choice_accuracy[{n}]" + (
                    f" by {ca.by}" if ca.by else ""), choice_accuracy(rows[n], by=ca.by), source=n))
        if m.perplexity is not None:
            from assay.measure.perplexity import perplexity

            for n in m.perplexity.sources or [s.name for s in spec.sources
                                               if s.mode == "perplexity"]:
                docs.append(result_doc("perplexity", f"perplexity[{n}]", perplexity(rows[n]),
                                       source=n))
        for c in m.compare:
            comparison = compare(rows[c.before], rows[c.after], proxy=c.proxy,
                                 metrics=c.metrics, alpha=c.alpha)
            docs.append(result_doc("compare", f"compare[{c.before} -> {c.after}]", comparison,
                                   before=c.before, after=c.after))
            if c.by is not None:
                res_by = compare_by(rows[c.before], rows[c.after], c.by, metrics=c.metrics,
                                    alpha=c.alpha)
                docs.append(result_doc("compare_by", f"compare[{c.before} -> {c.after}] by {c.by}",
                                       res_by, before=c.before, after=c.after, by=c.by))
        if m.eval_variance is not None:
            for n in m.eval_variance.sources or names:
                docs.append(result_doc("eval_variance", f"eval_variance[{n}]",
                                       eval_variance(rows[n]), source=n))
        if m.holdout_size is not None:
            h = m.holdout_size
            sizing = holdout_size(h.effect, before=rows[h.before] if h.before else None,
                                  after=rows[h.after] if h.after else None, power=h.power,
                                  alpha=h.alpha)
            docs.append(result_doc("holdout_size", "holdout_size", sizing))
        if m.select is not None:
            selection = select(rows[m.select.source], mode="rl", band=m.select.band)
            kept = getattr(selection, "rows", None)
            if kept is not None:
                outputs["selected"] = Rows(as_table(kept, require=()))
            docs.append(result_doc("select", f"select[{m.select.source}]", selection,
                                   source=m.select.source))
        docs += reward_row_docs(spec, rows)
        outputs["measurements"] = docs
        return outputs, {"rows": sum(len(r) for r in rows.values())}

    params = m.model_dump(mode="json")
    if spec.reward is not None and spec.reward.score is not None:
        params = {**params, "reward_rows": [spec.reward.score.sources,
                                            [e.name for e in spec.reward.scoring_models()]]}
    return cached_stage(store, STAGE, inputs=graded_checksums(graded, names),
                        params=params, compute=compute,
                        label=",".join(names), progress=progress)


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
