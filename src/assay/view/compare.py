"""What changed between two runs: per source, the tasks whose pass rate moved (most first), with
both runs' completions, and the nightly gate's verdict and history when the run is a night.

Read tolerantly: nightly.json and history fields this module does not know are ignored.

Example:
    >>> a = [{"id": "t1", "rows": [{"reward": 1.0}, {"reward": 1.0}]}]
    >>> b = [{"id": "t1", "rows": [{"reward": 0.0}, {"reward": 1.0}]}]
    >>> [(m["id"], m["before"], m["after"], m["delta"]) for m in moved_tasks(a, b)]
    [('t1', 1.0, 0.5, -0.5)]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from assay.headlines import headline_estimate

if TYPE_CHECKING:
    from assay.view.data import TaskDoc

class MovedTask(TypedDict):
    """A task whose pass rate moved between two runs (:func:`moved_tasks`)."""

    id: str
    before: float
    after: float
    delta: float
    flip: str


#: Moved tasks whose completions are written into the page (the rest are listed without them).
MAX_SHOWN = 300


def pass_rate(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Share of a task's binary rows (reward 0 or 1) that passed; None without one."""
    binary = [r["reward"] for r in rows if r.get("reward") in (0.0, 1.0)]
    return sum(binary) / len(binary) if binary else None


def moved_tasks(before: Sequence[TaskDoc], after: Sequence[TaskDoc]) -> list[MovedTask]:
    """Tasks of both runs whose pass rate differs, largest move first (ties: task id).
    ``flip`` is ``"pass->fail"`` when the task passed on some sample before and on none now,
    ``"fail->pass"`` the other way round, else ``""``."""
    old = {t["id"]: pass_rate(t["rows"]) for t in before}
    out: list[MovedTask] = []
    for t in after:
        b, a = old.get(t["id"]), pass_rate(t["rows"])
        if b is None or a is None or a == b:
            continue
        flip = "pass->fail" if b > 0 and a == 0 else "fail->pass" if b == 0 and a > 0 else ""
        out.append({"id": t["id"], "before": b, "after": a, "delta": a - b, "flip": flip})
    out.sort(key=lambda m: (-abs(m["delta"]), m["id"]))
    return out


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def headline(report: Mapping[str, Any] | None) -> dict[str, dict[str, object]]:
    """pass@1 per source as report.json states it (value, low, high, n), never recomputed."""
    out: dict[str, dict[str, object]] = {}
    for m in (report or {}).get("measurements", []):
        e = headline_estimate(m)
        if e is not None:
            out[str(m.get("source", m.get("label")))] = {
                k: e.get(k) for k in ("name", "value", "low", "high", "n")}
    return out


def night_doc(run_dir: Path) -> dict[str, object] | None:
    """The nightly section of a night's page: the gate's verdict, tonight's metrics with their
    baseline, and the history of every gated metric over the study's nights; None when
    ``run_dir`` holds no nightly.json."""
    doc = _read_json(run_dir / "nightly.json")
    if not isinstance(doc, dict):
        return None
    regs = [r for r in doc.get("regressions") or [] if isinstance(r, dict)]
    sources = [s for s in doc.get("sources") or [] if isinstance(s, dict)]
    from assay.nightly.partial import partial_text

    # a partial night (failed samples) is not a pass, whatever the gate compared
    partial = [partial_text(s) for s in sources if isinstance(s.get("partial"), dict)]
    if regs:
        verdict = "regression"
    elif partial:
        verdict = "partial"
    elif not any(s.get("baseline") for s in sources):
        verdict = "no baseline"
    else:
        verdict = "pass"
    keep = ("metric", "gated", "value", "low", "high", "n", "baseline_value", "delta",
            "delta_low", "delta_high", "p_adjusted", "verdict", "regression", "higher_is_better")
    tonight = [{"source": s.get("source"), "baseline": s.get("baseline"),
                "metrics": [{k: m.get(k) for k in keep} for m in s.get("metrics") or []
                            if isinstance(m, dict)]} for s in sources]
    history: dict[str, list[dict[str, object]]] = {}
    gated = set(doc.get("gated") or [])
    for night_dir in sorted(p for p in run_dir.parent.iterdir() if p.is_dir()):
        if night_dir.name > run_dir.name:
            continue
        nd = _read_json(night_dir / "nightly.json")
        if not isinstance(nd, dict):
            continue
        for s in nd.get("sources") or []:
            for m in (s.get("metrics") or []) if isinstance(s, dict) else []:
                if not isinstance(m, dict) or not (m.get("gated") or m.get("metric") in gated):
                    continue
                history.setdefault(f"{s.get('source')} / {m.get('metric')}", []).append({
                    "night": nd.get("night", night_dir.name), "value": m.get("value"),
                    "low": m.get("low"), "high": m.get("high"), "n": m.get("n"),
                    "baseline": s.get("baseline"), "verdict": m.get("verdict"),
                    "regression": bool(m.get("regression"))})
    return {"study": doc.get("study"), "night": doc.get("night", run_dir.name), "verdict": verdict,
            "regressions": regs, "partial": partial, "gated": sorted(gated),
            "baseline_rule": doc.get("baseline_rule"),
            "tonight": tonight, "history": history}


def baseline_dir(run_dir: Path) -> Path | None:
    """The baseline night a night was gated against (the first source's), if it is there."""
    doc = _read_json(run_dir / "nightly.json")
    if not isinstance(doc, dict):
        return None
    for s in doc.get("sources") or []:
        b = s.get("baseline") if isinstance(s, dict) else None
        if isinstance(b, str) and (run_dir.parent / b / "report.json").is_file():
            return run_dir.parent / b
    return None


def latest_night(study_dir: Path) -> Path | None:
    """A nightly root for one study: its newest night that finished (has report.json)."""
    nights = sorted(p for p in study_dir.iterdir() if p.is_dir() and (p / "report.json").is_file()
                    and (p / "nightly.json").is_file())
    return nights[-1] if nights else None
