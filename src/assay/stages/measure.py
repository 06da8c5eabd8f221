"""The measure stage: the measurements the spec asks for, over each source's graded rows.

pass@k, paired comparisons, eval variance, holdout sizing, RL selection, and what each scoring
reward model's ``rm:<model>`` marker says (best-of-n, ranking, length), as JSON documents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from assay.registry import Registry
from assay.rows import Rows, RowsLike, as_table
from assay.spec import (
    ChoiceAccuracySpec,
    CompareSpec,
    HoldoutSpec,
    PassAtSpec,
    PerplexityMeasureSpec,
    SelectSpec,
    StudySpec,
    VarianceSpec,
)
from assay.stages.cache import (
    StageResult,
    cached_stage,
    concat_rows,
    graded_checksums,
)
from assay.stages.declare import RunContext, Stage, declare
from assay.stages.modes import default_sources, row_of
from assay.stages.seams import Computed

if TYPE_CHECKING:
    from assay.measure.categories import PassAtBy

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
    rows: Mapping[str, Rows]
    outputs: dict[str, object]

    def default_sources(self, measure: str) -> list[str]:
        """The sources an entry of ``measure`` without ``sources:`` reads (the mode table's
        :func:`~assay.stages.modes.default_sources`)."""
        return default_sources(self.spec, measure)


#: An entry of the spec's ``measure:`` (one item of a list entry such as ``compare``).
MeasureEntry: TypeAlias = (PassAtSpec | ChoiceAccuracySpec | PerplexityMeasureSpec | CompareSpec
                           | VarianceSpec | HoldoutSpec | SelectSpec)

#: A measure: ``fn(entry, ctx) -> [documents]`` for the spec's ``measure.<name>`` entry (a
#: list entry such as ``compare`` is called once per item), one per field of ``MeasureSpec``.
#: The entry stays ``Any``: each measure takes its own entry class and the registry dispatches
#: by name, which a Callable over the union (contravariant) cannot say of ``_pass_at``.
Measure = Callable[[Any, MeasureContext], list[dict[str, Any]]]
MEASURES: Registry[Measure] = Registry("measure")


def run_measure(ctx: RunContext, graded: Mapping[str, Sequence[StageResult]]) -> StageResult:
    """The measurements the spec asks for (each a registered measure), over the graded rows of
    each source."""
    store, spec = ctx.store, ctx.spec
    m = spec.measure
    names = [s.name for s in spec.sources]

    def compute() -> Computed:
        cols = measured_columns(spec)
        rows = {n: concat_rows(store, graded[n], cols) for n in names}
        ctx = MeasureContext(spec, names, rows, {})
        # a source none of whose rows could be judged has nothing to measure: its measurements
        # say why instead of failing the study (its report, rows and view are still written)
        skip = nothing_judged(spec, rows)
        docs: list[dict[str, Any]] = []
        for name, entry in m:  # the spec's fields in order: report.json's order
            for e in entry if isinstance(entry, list) else [] if entry is None else [entry]:
                kept, left_out = without_sources(name, e, skip, ctx)
                docs += [not_measured_doc(name, src, skip[src]) for src in left_out]
                if kept is not None:
                    docs += MEASURES.get(name).obj(kept, ctx)
        docs += reward_row_docs(spec, {n: r for n, r in rows.items() if n not in skip})
        docs += lm_eval_docs(spec, {n: r for n, r in rows.items() if n not in skip})
        docs += lm_eval_group_docs(spec, {n: r for n, r in rows.items() if n not in skip})
        return {**ctx.outputs, "measurements": docs}, {"rows": sum(len(r) for r in rows.values())}

    params = m.model_dump(mode="json")
    if spec.reward is not None and spec.reward.score is not None:
        params = {**params, "reward_rows": [spec.reward.score.sources,
                                            [e.name for e in spec.reward.scoring_models()]]}
    if lm_eval_generate_sources(spec):  # keyed only where measured: other studies' keys stay
        params = {**params, "lm_eval_metrics": lm_eval_generate_sources(spec)}
    if lm_eval_choice_sources(spec):
        params = {**params, "lm_eval_mc_metrics": lm_eval_choice_sources(spec)}
    if spec.lm_eval_groups:
        params = {**params, "lm_eval_groups": spec.lm_eval_groups}
    return cached_stage(store, STAGE, inputs=graded_checksums(graded, names),
                        params=params, compute=compute,
                        label=",".join(names), progress=ctx.progress)


#: The measures that read only a row's task, reward, markers and status (no ``by``: a field
#: it names may be any column), and those columns (:func:`nothing_judged`'s among them).
_COLUMN_MEASURES = frozenset({"pass_at", "compare", "eval_variance", "holdout_size"})
_MEASURE_COLUMNS = ("task_id", "reward", "markers", "judge_status", "reason", "rollout_index")


def measured_columns(spec: StudySpec) -> tuple[str, ...] | None:
    """The columns the study's measures read, or None (every column) when one may read others:
    ``select`` keeps whole rows, ``by`` names any field, reward models and lm-eval sources read
    their own. Held for the whole stage (every shard's rows), so a text column not read is not
    kept: at 400k rows the prompts and completions alone are hundreds of MB.

    Example:
        >>> from assay.spec import parse_spec
        >>> text = ("name: s\\nsources: [{name: m, kind: file, path: m.jsonl, "
        ...         "fields: {prompt: q, completion: c, reward: r}}]\\n"
        ...         "measure: {pass_at: {k: 2}}\\n")
        >>> measured_columns(parse_spec(text))
        ('task_id', 'reward', 'markers', 'judge_status', 'reason', 'rollout_index')
        >>> measured_columns(parse_spec(text.replace("{k: 2}", "{k: 2, by: level}"))) is None
        True
    """
    m = spec.measure
    for name, entry in m:
        entries = entry if isinstance(entry, list) else [] if entry is None else [entry]
        if entries and (name not in _COLUMN_MEASURES
                        or any(getattr(e, "by", None) is not None for e in entries)):
            return None
    if (spec.reward is not None and spec.reward.score is not None) or spec.lm_eval_groups \
            or lm_eval_generate_sources(spec) or lm_eval_choice_sources(spec):
        return None
    return _MEASURE_COLUMNS


def nothing_judged(spec: StudySpec, rows: Mapping[str, RowsLike],
                   sizes: Mapping[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """The sources graded by a verifier of which no row got a reward (a judge that never
    answers in its format, a grader returning NaN), each with :func:`unjudged_summary`.
    ``sizes``: each source's row count when ``rows`` holds only some of its rows (at least
    every unjudged one: what run.json's facts keep, not every row)."""
    from assay.measure.lm_eval_corpus import corpus_only
    from assay.unjudged import unjudged_summary

    out = {}
    for s in spec.sources:
        r = rows.get(s.name)
        n = len(r) if r is not None and sizes is None else (sizes or {}).get(s.name, 0)
        if s.verifier is None or r is None or not n:
            continue
        summary = unjudged_summary(r)
        # a task reporting only corpus metrics (bleu) has no per-row reward: judged all the same
        if summary["rows"] == n and not corpus_only(r):
            out[s.name] = summary
    return out


def without_sources(name: str, e: MeasureEntry, skip: Mapping[str, object],
                    ctx: MeasureContext) -> tuple[MeasureEntry | None, list[str]]:
    """The entry ``e`` of measure ``name`` without the sources in ``skip``, and those it left
    out: ``(None, left out)`` when nothing is left to measure. An entry that reads one source
    by field (``compare``'s before/after, ``select``'s source, ``holdout_size``) is left out
    whole; an entry with ``sources`` keeps the others."""
    if not skip:
        return e, []
    if hasattr(e, "sources"):
        wanted = list(e.sources or ctx.default_sources(name))
        gone = [n for n in wanted if n in skip]
        if not gone:
            return e, []
        kept = [n for n in wanted if n not in skip]
        return (e.model_copy(update={"sources": kept}) if kept else None), gone
    named = [getattr(e, f, None) for f in ("source", "before", "after")]
    gone = list(dict.fromkeys(n for n in named if isinstance(n, str) and n in skip))
    return (None, gone) if gone else (e, [])


def not_measured_doc(measure: str, source: str, unjudged: Mapping[str, Any]) -> dict[str, Any]:
    """The stored document standing for a measurement that had no judged row to read.

    Example:
        >>> d = not_measured_doc("pass_at", "m", {"rows": 8, "reasons": [["invalid_result", 8]]})
        >>> d["text"]
        'not measured: no row of m was judged (8 rows; invalid_result (8))'
    """
    why = "; ".join(f"{r} ({n})" for r, n in unjudged["reasons"])
    text = f"not measured: no row of {source} was judged ({unjudged['rows']} rows; {why})"
    return {"kind": "not_measured", "measure": measure, "label": f"{measure}[{source}]",
            "text": text, "report": text + "\nfix the verifier (or the judge's prompt and "
            "format) and rerun: the graded rows and their reasons are in rows/" + source
            + ".parquet and the view", "data": None, "estimates": [], "source": source}


def _has_sources(spec: StudySpec) -> bool:
    return bool(spec.sources)


declare(Stage(STAGE, 1, "study", run_measure, reads=("rows",), when=_has_sources,
              results_role="measurements", warm_imports=WARM_IMPORTS))


# The measures. Each imports its computation when called: a cached measure stage (a fully
# cached rerun) never loads scipy.


@MEASURES.register("pass_at")
def _pass_at(e: PassAtSpec, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import pass_at, pass_at_by
    from assay.report import result_doc

    docs = []
    for n in e.sources or ctx.default_sources("pass_at"):
        docs.append(result_doc("pass_at", f"pass_at[{n}]", pass_at(ctx.rows[n], k=e.k), source=n))
        if e.by is not None:
            docs.append(_by_doc(pass_at_by(ctx.rows[n], e.by, k=e.k), n))
    return docs


@MEASURES.register("choice_accuracy")
def _choice_accuracy(e: ChoiceAccuracySpec, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure.choices import choice_accuracy
    from assay.measure.lm_eval_loglik import is_loglik_rows
    from assay.report import result_doc

    # by default not a loglikelihood task's rows (one continuation: no choice to be accurate
    # on; lm_eval_metrics reports them)
    names = e.sources or [m for m in ctx.default_sources("choice_accuracy")
                          if not is_loglik_rows(ctx.rows[m])]
    return [result_doc("choice_accuracy", f"choice_accuracy[{n}]" + (f" by {e.by}" if e.by else ""),
                       choice_accuracy(ctx.rows[n], by=e.by), source=n)
            if _lm_eval_acc(ctx.rows[n]) else _not_lm_evals_doc(n, ctx.rows[n]) for n in names]


def _lm_eval_metric_names(rows: RowsLike) -> list[str] | None:
    """The metrics lm-eval reports for a multiple_choice lm_eval source's rows (their
    ``judge_meta["lm_eval"]``), or None for other rows."""
    import json

    from assay.rows import as_table

    t = as_table(rows, require=())
    if t.num_rows == 0 or "judge_meta" not in t.column_names:
        return None
    meta = t.column("judge_meta")[0].as_py()
    g = json.loads(meta) if isinstance(meta, str) else meta
    got = (g or {}).get("lm_eval") if isinstance(g, dict) else None
    return None if got is None else [k for k, _ in got["aggregation"]]


def _lm_eval_acc(rows: RowsLike) -> bool:
    """Whether an accuracy over these rows is a number lm-eval reports under the task's name:
    any rows but an lm-eval task's that does not report ``acc`` (cola reports only mcc)."""
    names = _lm_eval_metric_names(rows)
    return names is None or "acc,none" in names


def _not_lm_evals_doc(source: str, rows: RowsLike) -> dict[str, Any]:
    names = ", ".join(_lm_eval_metric_names(rows) or [])
    text = (f"not measured: lm-eval reports {names} for {source}'s task, not acc; see "
            f"lm_eval_metrics[{source}]")
    return {"kind": "not_measured", "measure": "choice_accuracy",
            "label": f"choice_accuracy[{source}]", "text": text, "report": text, "data": None,
            "estimates": [], "source": source}


@MEASURES.register("perplexity")
def _perplexity(e: PerplexityMeasureSpec, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure.perplexity import perplexity
    from assay.report import result_doc

    return [result_doc("perplexity", f"perplexity[{n}]", perplexity(ctx.rows[n]), source=n)
            for n in e.sources or ctx.default_sources("perplexity")]


@MEASURES.register("compare")
def _compare(c: CompareSpec, ctx: MeasureContext) -> list[dict[str, Any]]:
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
def _eval_variance(e: VarianceSpec, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import eval_variance
    from assay.report import result_doc

    return [result_doc("eval_variance", f"eval_variance[{n}]", eval_variance(ctx.rows[n]),
                       source=n) for n in e.sources or ctx.default_sources("eval_variance")]


@MEASURES.register("holdout_size")
def _holdout_size(h: HoldoutSpec, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import holdout_size
    from assay.report import result_doc

    rows = ctx.rows
    sizing = holdout_size(h.effect, before=rows[h.before] if h.before else None,
                          after=rows[h.after] if h.after else None, power=h.power, alpha=h.alpha)
    return [result_doc("holdout_size", "holdout_size", sizing)]


@MEASURES.register("select")
def _select(e: SelectSpec, ctx: MeasureContext) -> list[dict[str, Any]]:
    from assay.measure import select
    from assay.report import result_doc

    selection = select(ctx.rows[e.source], mode="rl", band=e.band)
    ctx.outputs["selected"] = Rows(as_table(selection.rows, require=()))
    return [result_doc("select", f"select[{e.source}]", selection, source=e.source)]


def reward_row_docs(spec: StudySpec, rows: Mapping[str, Rows]) -> list[dict[str, Any]]:
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


def lm_eval_generate_sources(spec: StudySpec) -> list[str]:
    """The ``kind: lm_eval`` sources with ``generate:`` (a generate_until task): each gets
    every metric lm-eval reports, whatever ``measure:`` asks for."""
    return [n for n in default_sources(spec, "lm_eval_metrics")
            if spec.source(n).lm_eval_task]


def lm_eval_choice_sources(spec: StudySpec) -> list[str]:
    """The ``kind: lm_eval`` sources with ``choices:`` (a multiple_choice task): each gets
    every metric lm-eval reports (mcc, f1, a task's own), whatever ``measure:`` asks for."""
    return [n for n in default_sources(spec, "lm_eval_mc_metrics")
            if spec.source(n).lm_eval_task]


def lm_eval_docs(spec: StudySpec, rows: Mapping[str, Rows]) -> list[dict[str, Any]]:
    """Per lm_eval generate source: each ``metric,filter`` lm-eval reports, under its name,
    with assay's interval over documents and lm-eval's stderr
    (:func:`assay.measure.lm_eval_means.lm_eval_means`); pass@1 alone is the first metric.
    Per lm_eval loglikelihood source: its perplexity and acc as lm-eval aggregates them
    (:func:`assay.measure.lm_eval_loglik.lm_eval_loglik_means`). Per other lm_eval choices
    source (multiple_choice): each metric the task's own items give, aggregated by lm-eval's
    functions (:func:`assay.measure.lm_eval_means.lm_eval_mc_means`)."""
    from assay.measure.lm_eval_loglik import is_loglik_rows, lm_eval_loglik_means
    from assay.measure.lm_eval_means import lm_eval_mc_means, lm_eval_means
    from assay.report import result_doc

    docs = [result_doc("lm_eval_metrics", f"lm_eval_metrics[{n}]", lm_eval_means(rows[n]),
                       source=n) for n in lm_eval_generate_sources(spec) if n in rows]
    # a loglikelihood task (lambada) is a choices source whose rows say so: perplexity is
    # corpus-level, so it gets its own aggregation
    for n in lm_eval_choice_sources(spec):
        if n not in rows:
            continue
        res = lm_eval_loglik_means(rows[n]) if is_loglik_rows(rows[n]) else \
            lm_eval_mc_means(rows[n])
        docs.append(result_doc("lm_eval_metrics", f"lm_eval_metrics[{n}]", res, source=n))
    return docs


def lm_eval_group_docs(spec: StudySpec, rows: Mapping[str, Rows]) -> list[dict[str, Any]]:
    """Per lm_eval source that named a group or tag, one entry per group in its tree (the group
    and each subgroup): lm-eval's aggregate over its leaf members' rows
    (:func:`assay.measure.lm_eval_means.lm_eval_group`), or members only, saying why."""
    from assay.measure.lm_eval_means import lm_eval_group, member_metrics
    from assay.report import result_doc
    from assay.sources.lm_eval_group import GroupNode

    docs = []
    for g in spec.lm_eval_groups:
        members: dict[str, str] = g["members"]
        measured = {t: member_metrics(rows[n], g["mode"], g["metrics"].get(t))
                    for t, n in members.items() if n in rows}
        absent = [members[t] for t in members if t not in measured]
        for node in GroupNode.from_dict(g["tree"]).nodes():
            leaves = [t for t in node.leaves() if t in measured]
            agg, note = node.aggregate, None
            if node.kind == "tag":
                agg, note = None, "an lm-eval tag: lm-eval reports no aggregate for a tag"
            elif agg is None:
                note = "lm-eval gives no aggregate for this group (no aggregate_metric_list)"
            elif not row_of(g["mode"]).group_mean:
                agg, note = None, ("a perplexity group: lm-eval's aggregate is a mean of "
                                   "perplexities, which assay does not report")
            elif any(t not in measured for t in node.leaves()):
                agg, note = None, ("not aggregated: no row of " + ", ".join(absent)
                                   + " was judged")
            if note is not None:
                note += "; members only"
            n_rows = sum(len(rows[members[t]]) for t in leaves)
            res = lm_eval_group(node.name, agg, {t: measured[t][0] for t in leaves},
                                {t: measured[t][1] for t in leaves}, n_rows=n_rows, note=note)
            docs.append(result_doc("lm_eval_group", f"lm_eval_group[{g['source']}: {node.name}]",
                                   res, source=g["source"], group=node.name))
    return docs


def _by_doc(res: PassAtBy, source: str) -> dict[str, Any]:
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
