"""The history of one study's nights: a table, history.json and history.png (interval bands).

Read from each night's ``nightly.json`` only, so the files are identical for identical nights.

Example:
    >>> night = {"study": "s", "night": "2026-11-01", "gated": ["pass@1"], "sources": [
    ...     {"source": "m", "baseline": None, "metrics": [{"metric": "pass@1", "gated": True,
    ...      "higher_is_better": True, "value": 0.5, "low": 0.4, "high": 0.6, "n": 40,
    ...      "delta": None, "delta_low": None, "delta_high": None, "verdict": "no baseline",
    ...      "regression": False}]}]}
    >>> history_table(history_rows([night])).splitlines()[2].split()[:11]
    ['2026-11-01', 'm', 'pass@1*', '0.500', '[0.400,', '0.600]', '40', '-', '-', 'no', 'baseline']
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from assay.errors import HistoryError
from assay.report import new_figure, png_bytes
from assay.store import atomic_write

#: 2: per night the model under test (model, revision, identity, sampling, judge);
#: 3: ``failed_samples`` (a partial night's source: samples the model gave no completion for)
HISTORY_VERSION = 3


def load_nights(study_dir: str | os.PathLike[str], until: str | None = None
                ) -> list[dict[str, Any]]:
    """Every night's nightly.json under ``study_dir`` (``<root>/<study>``), oldest first; only
    nights up to ``until`` when given."""
    d = Path(study_dir)
    if not d.is_dir():
        raise HistoryError(f"{d}: no such directory; give a nightly root for one study "
                           "(<root>/<study name>, e.g. runs/nightly/my-study)")
    out = []
    for n in sorted(p for p in d.iterdir() if p.is_dir()):
        if until is not None and n.name > until:
            continue
        try:
            doc = json.loads((n / "nightly.json").read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and "sources" in doc:
            out.append(doc)
    if not out:
        inner = sorted(p.name for p in d.iterdir() if p.is_dir() and any(p.glob("*/nightly.json")))
        hint = (f"; it holds the studies {inner}: give one of them, e.g. {d / inner[0]}" if inner
                else "; run `assay nightly SPEC --root DIR` first")
        raise HistoryError(f"{d}: no nights (no <night>/nightly.json){hint}")
    return out


_COLS = ("night", "source", "metric", "gated", "value", "low", "high", "n", "baseline",
         "delta", "delta_low", "delta_high", "verdict", "regression", "model", "revision",
         "identity", "sampling", "judge", "failed_samples")


class HistoryRow(TypedDict):
    """One row of history.json: a night's source x metric, with its estimate, the compare
    against the baseline and what that night evaluated (the columns of ``_COLS``)."""

    night: str
    source: str
    metric: str
    gated: bool
    value: float | None
    low: float | None
    high: float | None
    n: int
    baseline: str | None
    delta: float | None
    delta_low: float | None
    delta_high: float | None
    verdict: str
    regression: bool
    failed_samples: int
    model: str | None
    revision: str | None
    identity: str | None
    sampling: str | None
    judge: str | None


def history_rows(nights: Sequence[Mapping[str, Any]]) -> list[HistoryRow]:
    """One row per night x source x metric, in night order."""
    rows: list[HistoryRow] = []
    for doc in nights:
        for s in doc["sources"]:
            for m in s["metrics"]:
                ut = s.get("under_test") or {}
                rows.append({"night": doc["night"], "source": s["source"], "metric": m["metric"],
                             "gated": m["gated"], "value": m["value"], "low": m["low"],
                             "high": m["high"], "n": m["n"], "baseline": s["baseline"],
                             "delta": m["delta"], "delta_low": m["delta_low"],
                             "delta_high": m["delta_high"], "verdict": m["verdict"],
                             "regression": m["regression"],
                             "failed_samples": (s.get("partial") or {}).get("samples", 0),
                             "model": ut.get("model"), "revision": ut.get("revision"),
                             "identity": ut.get("identity"), "sampling": ut.get("sampling"),
                             "judge": ut.get("judge")})
    return rows


def _f(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def history_table(rows: Sequence[HistoryRow]) -> str:
    """The table ``assay history`` prints (``*`` marks a gated metric, a regression's verdict is
    in capitals), with what each night evaluated: the served model with its revision and
    identity hash, the sampling parameters and the judge. Columns are as wide as their widest
    cell, so every column lines up whatever the names."""
    from assay.nightly.under_test import model_label

    head = ["night", "source", "metric", "value [95% CI]", "n", "delta [95% CI]", "baseline",
            "verdict", "model", "sampling", "judge"]
    body = []
    for r in rows:
        delta = ("-" if r["delta"] is None
                 else f"{_f(r['delta'], '+.3f')} [{_f(r['delta_low'])}, {_f(r['delta_high'])}]")
        body.append([r["night"], r["source"], r["metric"] + ("*" if r["gated"] else ""),
                     f"{_f(r['value'])} [{_f(r['low'])}, {_f(r['high'])}]", str(r["n"]), delta,
                     r["baseline"] or "-",
                     (r["verdict"].upper() if r["regression"] else r["verdict"])
                     + (f" (PARTIAL: {r['failed_samples']} failed)"
                        if r.get("failed_samples") else ""),
                     model_label(r) if r.get("model") else "-", r.get("sampling") or "-",
                     r.get("judge") or "-"])
    # the model columns only where some night evaluated a model (not for scored files)
    keep = [i for i in range(len(head))
            if i < 8 or any(c[i] != "-" for c in body)]
    head, body = [head[i] for i in keep], [[c[i] for i in keep] for c in body]
    widths = [max(len(c[i]) for c in [head, *body]) for i in range(len(head))]
    right = {4}  # n

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [fmt(head), "-" * len(fmt(head))]
    lines += [fmt(c) for c in body]
    return "\n".join(lines)


def history_json(rows: Sequence[HistoryRow], study: str) -> bytes:
    doc = {"history_version": HISTORY_VERSION, "study": study,
           "nights": sorted({r["night"] for r in rows}), "columns": list(_COLS),
           "rows": [dict(r) for r in rows]}
    return (json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


def history_png(rows: Sequence[HistoryRow], study: str, last: int | None = None
                ) -> bytes | None:
    """One panel per source x gated metric (pass@1 always): the estimate per night with its
    interval as a band; regressions marked with a red cross. ``last``: only the last nights."""
    nights = sorted({r["night"] for r in rows})
    if last is not None:
        nights = nights[-last:]
    keep = set(nights)
    panels: dict[tuple[str, str], list[HistoryRow]] = {}
    for r in rows:
        if (r["night"] in keep and (r["gated"] or r["metric"] == "pass@1")
                and r["value"] is not None):
            panels.setdefault((r["source"], r["metric"]), []).append(r)
    if not panels:
        return None
    keys = sorted(panels)
    # a year of nights stays a readable width: at most ~40 labelled ticks
    width = min(max(6.0, 0.35 * len(nights) + 3), 18.0)
    step = max(1, -(-len(nights) // 40))
    fig = new_figure(figsize=(width, 2.4 * len(keys)), dpi=100)
    axes = fig.subplots(len(keys), 1, squeeze=False)
    x_of = {n: i for i, n in enumerate(nights)}
    for ax, key in zip(axes[:, 0], keys):
        pts = panels[key]
        xs = [x_of[r["night"]] for r in pts]
        ys = [r["value"] for r in pts]
        lo = [r["low"] if r["low"] is not None else r["value"] for r in pts]
        hi = [r["high"] if r["high"] is not None else r["value"] for r in pts]
        ax.fill_between(xs, lo, hi, color="#1f5f99", alpha=0.2, label="95% interval", linewidth=0)
        ax.plot(xs, ys, "o-", color="#1f5f99", markersize=4, label="estimate")
        bad = [(x, y) for x, y, r in zip(xs, ys, pts) if r["regression"]]
        if bad:
            ax.scatter([x for x, _ in bad], [y for _, y in bad], marker="X", s=90, color="#c0392b",
                       zorder=3, label="regression (gated, verdict worse)")
        ax.set_title(f"{study} / {key[0]} / {key[1]}", fontsize=9)
        ax.set_xticks(range(0, len(nights), step))
        ax.set_xticklabels(nights[::step], rotation=60, fontsize=7, ha="right")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    return png_bytes(fig)


def write_history(study_dir: str | os.PathLike[str], *, until: str | None = None,
                  last: int | None = None, out_dir: str | os.PathLike[str] | None = None
                  ) -> tuple[str, list[HistoryRow]]:
    """Write history.json and history.png into ``out_dir`` (default ``study_dir``) and return
    the table text and rows. ``until``/``last`` restrict the nights (the nightly report's plot)."""
    nights = load_nights(study_dir, until)
    if last is not None:
        nights = nights[-last:]
    rows = history_rows(nights)
    study = nights[-1]["study"]
    out = Path(out_dir) if out_dir is not None else Path(study_dir)
    atomic_write(out / "history.json", history_json(rows, study))
    png = history_png(rows, study)
    if png is not None:
        atomic_write(out / "history.png", png)
    return history_table(rows), rows
