"""Regression gates of one night: per source, each metric's estimate and its paired comparison
with the baseline night; a gated metric whose verdict is ``worse`` is a regression.

A regression is never a raw drop: it is ``assay.compare``'s verdict (exact sign-flip test,
Holm-corrected over the gated metrics), reported with the delta's interval. Metrics that are
not gated (pass@1 when not listed, every other shared marker) are compared as a second Holm
family and reported, never gated, so reporting more metrics costs the gates no power.

Example:
    >>> rows = [{"task_id": f"t{i}", "reward": float(j < 2), "markers": {"len": float(i)}}
    ...         for i in range(10) for j in range(4)]
    >>> e = metric_estimate(rows, "pass@1")
    >>> e.value, e.n
    (0.5, 10)
    >>> round(metric_estimate(rows, "marker:len").value, 2)
    4.5
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from scipy import special

from assay.errors import MeasureError, SpecError
from assay.nightly.partial import (
    NOT_COMPARED,
    PARTIAL_WHY,
    PartialRecord,
    nothing_judged_record,
    partial_text,
)
from assay.nightly.spec import NightlySpec
from assay.results import Estimate, Interval, finite_or_none

if TYPE_CHECKING:
    from assay.measure.comparison import Comparison
    from assay.rows import Rows, RowsLike

MARKER_INTERVAL = "t over tasks (per-task means, df T-1)"
NO_BASELINE = "no baseline"


def metric_estimate(rows: RowsLike, metric: str, level: float = 0.95) -> Estimate:
    """One night's value of ``metric`` with its interval over tasks: pass@1 by
    ``assay.pass_at``; a marker as the mean of per-task means with a t interval over tasks."""
    from assay.measure import pass_at
    from assay.measure.grouping import read_frame, task_stats

    if metric == "pass@1":
        return pass_at(rows, k=1, level=level).pass_at_1
    name = metric.removeprefix("marker:")
    frame = read_frame(rows, argument="rows")
    if name not in frame.markers:
        raise MeasureError(f"no marker {name!r} in these rows; markers: {sorted(frame.markers)}")
    vals = frame.markers[name]
    mask = ~np.isnan(vals)
    st = task_stats(frame.codes, np.where(mask, vals, 0.0), mask, frame.n_tasks, frame.weight)
    means = st.means()[st.present]
    T = len(means)
    mean = float(means.mean())
    iv = None
    if T > 1:
        half = float(special.stdtrit(T - 1, 0.5 + level / 2) * means.std(ddof=1) / math.sqrt(T))
        iv = Interval(mean - half, mean + half, level, MARKER_INTERVAL)
    return Estimate(name, mean, iv, T, "tasks", int(st.rows[st.present].sum()))


def _markers(rows: RowsLike) -> list[str]:
    """The marker names rows carry."""
    from assay.measure.grouping import read_frame

    return sorted(read_frame(rows, argument="rows").markers)


class _EstDoc(TypedDict):
    """A metric's estimate as nightly.json holds it (non-finite values are None)."""

    value: float | None
    low: float | None
    high: float | None
    n: int


def _est_doc(e: Estimate) -> _EstDoc:
    iv = e.interval
    return {"value": finite_or_none(e.value), "low": finite_or_none(iv.low) if iv else None,
            "high": finite_or_none(iv.high) if iv else None, "n": e.n}


# ------------------------------------------------------------------------------- nights


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def finished_nights(base: str | os.PathLike[str], before: str) -> list[tuple[Path, str | None]]:
    """Earlier finished nights of this study (name < ``before``) with their study definition,
    oldest first."""
    base = Path(base)
    if not base.is_dir():
        return []
    out = []
    for d in sorted(p for p in base.iterdir() if p.is_dir() and p.name < before):
        info = read_json(d / "run.json")
        if isinstance(info, dict) and (d / "report.md").is_file():
            out.append((d, info.get("spec_definition")))
    return out


def candidate_nights(base: str | os.PathLike[str], before: str, spec_definition: str,
                     continues: Sequence[str] = ()) -> list[Path]:
    """Earlier finished nights of this study (name < ``before``) whose study definition is this
    one or one it ``continues``, oldest first: the nights a baseline may come from (a partial
    night, with failed samples, is not one). The model under test is not part of the
    definition: a new checkpoint keeps the history."""
    ok = {spec_definition, *continues}
    # a partial night (failed samples) is not a pass: never a baseline
    return [d for d, sd in finished_nights(base, before)
            if sd in ok and not (read_json(d / "nightly.json") or {}).get("partial")]


def definition_diff(before: object, after: object, path: str = "", limit: int = 8
                    ) -> list[str]:
    """The dotted paths where two study definitions differ (at most ``limit``).

    Example:
        >>> definition_diff({"sources": [{"steps": [], "k": 2}]},
        ...                 {"sources": [{"steps": [1], "k": 2}]})
        ['sources[0].steps']
    """
    out: list[str] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for k in sorted(set(before) | set(after), key=str):
            out += definition_diff(before.get(k), after.get(k), f"{path}.{k}" if path else str(k),
                                   limit)
    elif (isinstance(before, list) and isinstance(after, list) and len(before) == len(after)
          and any(isinstance(x, dict) for x in before)):
        for i, (x, y) in enumerate(zip(before, after)):
            out += definition_diff(x, y, f"{path}[{i}]", limit)
    elif before != after:
        out.append(path or "(top level)")
    return out[:limit]


def under_test_of(night: Path, source: str) -> dict[str, object] | None:
    """What a finished night evaluated for ``source`` (its run.json ``under_test``), if recorded."""
    info = read_json(night / "run.json")
    rec = (info or {}).get("under_test", {}) if isinstance(info, dict) else {}
    return rec.get(source) if isinstance(rec, dict) else None


def night_value(night: Path, source: str, metric: str) -> float | None:
    """A night's value of one metric: from its nightly.json, else computed from its rows."""
    doc = read_json(night / "nightly.json")
    for s in (doc or {}).get("sources", []) if isinstance(doc, dict) else []:
        if s.get("source") == source:
            for m in s.get("metrics", []):
                if m.get("metric") == metric:
                    return m.get("value")
    p = night / "rows" / f"{source}.parquet"
    if not p.is_file():
        return None
    from assay.rows import Rows

    try:
        return finite_or_none(metric_estimate(Rows.read_parquet(p), metric).value)
    except MeasureError:
        return None


def choose_baseline(rule: str, candidates: Sequence[Path], source: str, metric: str,
                    higher_is_better: bool = True) -> Path | None:
    """The baseline night for one source: the latest candidate (``previous``), the latest one
    without a regression (``last_good``), the one with the best value of ``metric`` (``best``;
    the latest on ties), or the named night."""
    have = [c for c in candidates if (c / "rows" / f"{source}.parquet").is_file()]
    if not have:
        return None
    if rule == "previous":
        return have[-1]
    if rule == "last_good":  # a night that regressed is not a baseline: the regression is
        # reported every night until a night passes again
        good = [c for c in have if not (read_json(c / "nightly.json") or {}).get("regressions")]
        return good[-1] if good else None
    if rule == "best":
        scored = [(v, i, c) for i, c in enumerate(have)
                  if (v := night_value(c, source, metric)) is not None]
        if not scored:
            return None
        sign = 1.0 if higher_is_better else -1.0
        return max(scored, key=lambda t: (sign * t[0], t[1]))[2]
    named = [c for c in have if c.name == rule]
    if not named:
        raise SpecError(
            f"nightly.baseline: night {rule} has no finished run of source {source!r} with this "
            f"spec definition; nights available: {[c.name for c in have] or 'none'}")
    return named[0]


# ------------------------------------------------------------------------------- the gate


def _compare_entries(before: Rows, after: Rows, metrics: list[str], gates: NightlySpec
                     ) -> tuple[dict[str, dict[str, object]], Comparison]:
    import assay

    res = assay.compare(before, after, metrics=metrics, alpha=gates.alpha,
                        lower_is_better=[m.removeprefix("marker:")
                                         for m in gates.lower_names(metrics)])
    out = {}
    for m in res.metrics:
        iv = m.delta.interval
        out[m.metric] = {"baseline_value": finite_or_none(m.before),
                         "delta": finite_or_none(m.delta.value),
                         "delta_low": finite_or_none(iv.low) if iv else None,
                         "delta_high": finite_or_none(iv.high) if iv else None,
                         "n_paired": m.n_paired, "p_adjusted": finite_or_none(m.p_adjusted),
                         # a metric without a direction (token counts): a change, never a
                         # better or a worse
                         "verdict": ("changed" if gates.direction(m.metric) is None
                                     and m.verdict in ("better", "worse") else m.verdict)}
    return out, res


def evaluate_night(out: str | os.PathLike[str], *, study: str, night: str, sources: Sequence[str],
                   gates: NightlySpec, spec_definition: str,
                   under_test: Mapping[str, Mapping[str, object]] | None = None,
                   definition: object = None) -> dict[str, Any]:
    """The nightly document of run directory ``out`` (``<root>/<study>/<night>``): per source
    and metric the estimate, the baseline night, the delta with its interval and the verdict;
    ``regressions`` lists the gated metrics whose verdict is ``worse``. ``under_test``: per
    source what tonight evaluated (:mod:`assay.nightly.under_test`), set beside the baseline's.
    ``new_history`` says when earlier nights exist but none has this study definition (and,
    given ``definition``, tonight's :meth:`StudySpec.definition_content`, where it changed).

    A source with failed samples tonight (``gen_error`` rows) is partial: its metrics are not
    compared (verdict :data:`NOT_COMPARED`), or with ``gates.allow_partial`` compared on the
    tasks answered in full; its ``partial`` record says which tasks were left out and why."""
    from assay.nightly.under_test import model_changes
    from assay.report import result_doc
    from assay.rows import Rows

    out = Path(out)
    cands = candidate_nights(out.parent, night, spec_definition, gates.continues)
    earlier = finished_nights(out.parent, night)
    gated = gates.metric_names()
    doc: dict[str, Any] = {"study": study, "night": night, "baseline_rule": gates.baseline,
                           "alpha": gates.alpha, "gated": gated, "spec_definition": spec_definition,
                           "new_history": None, "sources": [], "regressions": [], "comparisons": [],
                           "partial": []}
    if earlier and not cands:
        last, last_def = earlier[-1]
        prev = (read_json(last / "run.json") or {}).get("study_definition")
        doc["new_history"] = {"previous_night": last.name, "previous_definition": last_def,
                              "changed": (definition_diff(prev, definition)
                                          if prev is not None and definition is not None else None)}
    # the study's own verdict (finish_run, the one `assay run` exits 4 on): a source none of
    # whose rows was judged is partial too, not a crash of the gate on a pass@1 without rewards
    unjudged = (read_json(out / "run.json") or {}).get("nothing_judged") or {}
    for src in sources:
        path = out / "rows" / f"{src}.parquet"
        if not path.is_file():
            continue
        rows = Rows.read_parquet(path)
        partial = (nothing_judged_record(unjudged[src],
                                         [str(t) for t in rows.to_arrow().column("task_id")
                                          .to_pylist()])
                   if src in unjudged else _partial(rows, gates.allow_partial))
        if partial is not None and partial["compared"]:
            rows = _without_tasks(rows, set(partial["left_out"]))
        # no judged row: no frame to read markers from; each gated metric is shown without a value
        markers = _markers(rows) if src not in unjudged else []
        present = {"pass@1", *(f"marker:{m}" for m in markers)}
        missing = [g for g in gated if g not in present]
        if missing and src not in unjudged:
            raise SpecError(f"nightly.must_not_regress: source {src!r} has no metric "
                            f"{[m.removeprefix('marker:') for m in missing]}; it has pass@1 and "
                            f"markers {markers or 'none'} (check the spelling)")
        metrics: dict[str, dict[str, Any]] = {}
        for m in [*gated, *sorted(present - set(gated), key=lambda x: (x != "pass@1", x))]:
            try:
                est: _EstDoc = _est_doc(metric_estimate(rows, m))
            except MeasureError:
                if m in gated and src in unjudged:  # no reward to estimate it from: no value
                    est = {"value": None, "low": None, "high": None, "n": 0}
                elif m in gated:
                    raise
                else:
                    continue  # e.g. pass@1 of a source with partial scores only: nothing to say
            way = gates.direction(m)  # a rise in truncation, errors, refusals is worse
            metrics[m] = {"metric": m, "gated": m in gated, "direction": way,
                          "higher_is_better": None if way is None else way == "higher",
                          **est, "baseline_value": None, "delta": None,
                          "delta_low": None, "delta_high": None, "n_paired": 0,
                          "p_adjusted": None, "verdict": NO_BASELINE, "regression": False}
        first = gated[0] if gated else "pass@1"
        base = choose_baseline(gates.baseline, cands, src, first,
                               gates.direction(first) != "lower")
        tonight = dict((under_test or {}).get(src) or {}) or None
        before_model = under_test_of(base, src) if base is not None else None
        entry: dict[str, Any] = {
            "source": src, "baseline": base.name if base else None, "metrics": [],
            "under_test": tonight, "baseline_under_test": before_model,
            "model_changes": model_changes(before_model, tonight)}
        if partial is not None:
            entry["partial"] = partial
            doc["partial"].append(src)
        if partial is not None and not partial["compared"]:
            for rec in metrics.values():
                rec["verdict"] = NOT_COMPARED
        elif base is not None:
            before = Rows.read_parquet(base / "rows" / f"{src}.parquet")
            bmark = set(_markers(before))
            shared = {m for m in metrics if m == "pass@1" or m.removeprefix("marker:") in bmark}
            for family, label in (([m for m in gated if m in shared], "gated"),
                                  ([m for m in metrics if m in shared and m not in gated],
                                   "reported")):
                if not family:
                    continue
                cmp, res = _compare_entries(before, rows, family, gates)
                for m, c in cmp.items():
                    metrics[m].update(c)
                    metrics[m]["regression"] = metrics[m]["gated"] and c["verdict"] == "worse"
                doc["comparisons"].append(result_doc(
                    "nightly_compare", f"{src} ({label} metrics): {base.name} -> {night}", res,
                    source=src, family=label, baseline=base.name))
        entry["metrics"] = list(metrics.values())
        doc["sources"].append(entry)
        for m in entry["metrics"]:
            if m["regression"]:
                doc["regressions"].append({
                    "study": study, "source": src, "metric": m["metric"], "night": night,
                    "baseline": entry["baseline"], "delta": m["delta"], "low": m["delta_low"],
                    "high": m["delta_high"], "p_adjusted": m["p_adjusted"],
                    "n_paired": m["n_paired"], "alpha": gates.alpha,
                    "model_changes": entry["model_changes"]})
    return doc


def _partial(rows: Rows, allow: bool) -> PartialRecord | None:
    """The partial record of one source's rows (None when no sample failed): failed samples,
    the tasks they hit (``left_out``), whether the gate compares the rest, and why."""
    t = rows.to_arrow()
    if "judge_status" not in t.column_names:
        return None
    status, tasks = t.column("judge_status").to_pylist(), t.column("task_id").to_pylist()
    hit = sorted({str(k) for k, st in zip(tasks, status) if st == "gen_error"})
    if not hit:
        return None
    return {"samples": sum(st == "gen_error" for st in status), "tasks": len(hit),
            "tasks_total": len(set(tasks)), "left_out": hit, "compared": allow,
            "why": PARTIAL_WHY}


def _without_tasks(rows: Rows, tasks: set[str]) -> Rows:
    """``rows`` without the rows of ``tasks``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from assay.rows import Rows

    t = rows.to_arrow()
    keep = pc.invert(pc.is_in(pc.cast(t.column("task_id"), pa.string()),
                              value_set=pa.array(sorted(tasks), pa.string())))
    return Rows(t.filter(keep))


def _f(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def _p(p: float | None) -> str:
    return "-" if p is None else "< 0.0001" if p < 1e-4 else format(p, ".4f")


#: What a regression verdict is (see assay.measure.comparison): said beside every regression.
TEST_WORDS = "two-sided exact sign-flip test"


def regression_line(r: Mapping[str, Any]) -> str:
    """``study/source/metric: delta -0.250 [-0.340, -0.160] vs 2026-11-02: worse by ...``: one
    regression, with the test that decided it. The interval is a descriptive paired t interval
    that the verdict does not read, so it may contain 0: the line then says so."""
    n = r.get("n_paired")
    test = f"{TEST_WORDS}{f' over {n} paired tasks' if n else ''}"
    alpha = f" < alpha {r['alpha']:g}" if r.get("alpha") is not None else ""
    line = (f"{r['study']}/{r['source']}/{r['metric']}: delta {_f(r['delta'], '+.3f')} "
            f"[{_f(r['low'])}, {_f(r['high'])}] vs {r['baseline']}: worse by the {test} "
            f"(Holm-adjusted p {_p(r['p_adjusted'])}{alpha})")
    if r.get("low") is not None and r.get("high") is not None and r["low"] <= 0 <= r["high"]:
        line += ("; the 95% interval is a descriptive paired t interval that the test does not "
                 "read, so it may contain 0")
    return line


def new_history_text(doc: Mapping[str, Any]) -> str:
    """The notice of a night whose study definition no earlier night has, with the fix."""
    new = doc["new_history"]
    return (f"New history: the study definition changed since night {new['previous_night']} "
            f"({new['previous_definition']} -> {doc['spec_definition']}"
            + (f"; changed: {', '.join(new['changed'])}" if new.get("changed") else "")
            + "), so no earlier night is a baseline. If the change does not affect the "
            "measurement, carry the history over with "
            f"`nightly: {{continues: [{new['previous_definition']}]}}` "
            f"(or `--set nightly.continues=[{new['previous_definition']}]`).")


#: How nightly.md labels a metric's direction beside its name.
DIRECTION_LABEL = {"higher": "", "lower": " (lower is better)", None: " (no direction)"}


def night_markdown(doc: Mapping[str, Any], history_png: str | None = None) -> str:
    """nightly.md: the regressions first, then every metric per source, then the comparisons."""
    from assay.nightly.under_test import model_label

    lines = [f"# Nightly `{doc['study']}`: {doc['night']}\n"]
    regs = doc["regressions"]
    new = doc.get("new_history")
    partial = [s for s in doc["sources"] if s.get("partial")]
    if partial:
        lines.append("**PARTIAL NIGHT** (failed samples: this night is not a pass):\n")
        lines += [f"- {partial_text(s)}" for s in partial]
        lines.append("")
    if new:
        lines.append(new_history_text(doc) + "\n")
    if regs:
        lines.append("**REGRESSION** (gated metric, paired compare verdict `worse`):\n")
        lines += [f"- {regression_line(r)}" for r in regs]
        lines.append("")
    elif partial and not any(s["baseline"] for s in doc["sources"] if not s.get("partial")
                             or s["partial"]["compared"]):
        pass  # nothing was compared: the partial notice above says why
    elif not any(s["baseline"] for s in doc["sources"]):
        if not new:
            lines.append("No previous night of this study definition: nothing to compare.\n")
    else:
        lines.append(f"No regression detected on the gated metrics {doc['gated']} "
                     f"(baseline: {doc['baseline_rule']}).\n")
    gen = doc.get("generation")
    if gen is not None:
        lines.append(f"Generation: {gen}\n")
    for s in doc["sources"]:
        lines.append(f"## {s['source']} (baseline {s['baseline'] or '-'})\n")
        ut, before = s.get("under_test"), s.get("baseline_under_test")
        if ut:
            lines.append("| | model | revision | identity | served root / weights | base_url "
                         "| sampling | judge |")
            lines.append("|---|---|---|---|---|---|---|---|")
            for who, rec in (("tonight", ut), (f"baseline {s['baseline']}", before)):
                if rec:
                    lines.append(
                        f"| {who} | {rec.get('model') or '-'} | {rec.get('revision') or '-'} "
                        f"| {rec.get('identity') or '-'} "
                        f"| {rec.get('served_root') or (rec.get('files_sha256') or '-')[:16]} "
                        f"| {rec.get('base_url') or '-'} | {rec.get('sampling') or '-'} "
                        f"| {rec.get('judge') or '-'} |")
            lines.append("")
            if s.get("model_changes"):
                lines.append(f"Under test changed since {s['baseline']} ({model_label(before)} -> "
                             f"{model_label(ut)}): " + "; ".join(s["model_changes"]) + "\n")
            if ut.get("scope"):
                lines.append(f"Completions asked afresh for this night (`{ut['scope']}`): the "
                             "model's identity is not proven, so no earlier night's answers are "
                             "reused.\n")
        lines.append("| metric | gated | tonight [95% CI] | n | delta [95% CI] | verdict |")
        lines.append("|---|---|---|---:|---|---|")
        for m in s["metrics"]:
            lines.append(
                f"| {m['metric']}{DIRECTION_LABEL[m.get('direction', 'higher')]} "
                f"| {'yes' if m['gated'] else 'no'} | {_f(m['value'])} "
                f"[{_f(m['low'])}, {_f(m['high'])}] "
                f"| {m['n']} | {_f(m['delta'], '+.3f')} "
                f"[{_f(m['delta_low'])}, {_f(m['delta_high'])}] "
                f"| {'**' + m['verdict'] + '**' if m['regression'] else m['verdict']} |")
        lines.append("")
    for c in doc["comparisons"]:
        lines.append(f"### {c['label']}\n")
        lines.append("```text\n" + c["report"].rstrip() + "\n```\n")
    if history_png:
        lines.append("## History\n")
        lines.append(f"![history]({history_png})\n")
    return "\n".join(lines).rstrip() + "\n"
