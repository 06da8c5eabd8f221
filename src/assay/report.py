"""The study report: report.md, report.json and PNG plots, built from the stages' stored results.

Every number printed comes from a result object's own ``str()``/``report()`` (interval and n).

``build_report`` is pure (documents in, file bytes out) so the report stage can cache it;
``write_run_dir`` materializes a finished run; ``read_report`` is what ``assay report`` prints.

Example:
    >>> from assay.results import Estimate, Interval
    >>> est = collect_estimates(
    ...     {"pass1": Estimate("pass@1", 0.5, Interval(0.3, 0.7, 0.95, "t"), 10)})
    >>> est[0]["name"], est[0]["low"], est[0]["n"]
    ('pass@1', 0.3, 10)
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, TypeVar, Unpack

import pyarrow as pa

from assay.errors import ReportError
from assay.headlines import headline_estimate
from assay.jsontypes import JSONValue
from assay.results import collect_estimates
from assay.store import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from assay.rows import Rows, RowsLike

REPORT_VERSION = 1
_T = TypeVar("_T")

#: :func:`_plot_estimates`' arguments: title, the estimates (documents as
#: :func:`collect_estimates` lists them, each with a ``label``), the x label, and optionally a
#: baseline per estimate.
PlotArgs: TypeAlias = (tuple[str, Sequence[Mapping[str, Any]], str]
                       | tuple[str, Sequence[Mapping[str, Any]], str, Sequence[float | None]])


class FigureOptions(TypedDict, total=False):
    """The options :func:`new_figure` passes to matplotlib's ``Figure``."""

    figsize: tuple[float, float]
    dpi: float


def result_doc(kind: str, label: str, result: object, **extra: object) -> dict[str, Any]:
    """A stored, JSON-ready record of one measurement: its line, report, data and estimates."""
    from assay.results import line_of, to_plain

    shown = _without_timings(result)
    report = shown.report() if hasattr(shown, "report") else str(shown)
    return {"kind": kind, "label": label, "text": line_of(shown), "report": report,
            "data": _drop_timings(to_plain(result)), "estimates": collect_estimates(result),
            **extra}


def _without_timings(result: object) -> object:
    """The result with its wall-clock fields set to None, so its text carries no timing (a
    resumed run's report must equal an uninterrupted run's, byte for byte)."""
    if not dataclasses.is_dataclass(result) or isinstance(result, type):
        return result
    blank = {f.name: None for f in dataclasses.fields(result) if f.name in _TIMING_KEYS and f.init}
    return dataclasses.replace(result, **blank) if blank else result


def _drop_timings(obj: Any) -> JSONValue:
    """JSON-ready data without wall-clock timings (not results: equal inputs must give equal
    reports). Row sets become their size and checksum; arrays become lists."""
    if isinstance(obj, dict):
        return {k: _drop_timings(v) for k, v in obj.items() if k not in _TIMING_KEYS}
    if isinstance(obj, (list, tuple)):
        return [_drop_timings(v) for v in obj]
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "checksum") and hasattr(obj, "to_arrow"):  # Rows
        return {"n_rows": len(obj), "checksum": obj.checksum()}
    if hasattr(obj, "tolist"):
        return _drop_timings(obj.tolist())
    return str(obj)


_TIMING_KEYS = frozenset({"seconds", "elapsed", "elapsed_s", "wall_seconds", "throughput",
                          "rows_per_second", "timings"})


# ------------------------------------------------------------------------------- plots


#: What drawing the report's figures imports (matplotlib's Figure and Agg canvas), for a thread
#: with time to spare to import before the report runs (see assay.stages.plan.Preloader).
WARM_IMPORTS = ("matplotlib.figure", "matplotlib.backends.backend_agg")


def new_figure(**kw: Unpack[FigureOptions]) -> Figure:
    """A matplotlib Figure drawn by the Agg renderer, outside pyplot: pyplot's import costs
    ~0.5 s (its GUI-backend machinery) on a run's last stage, and it would switch a notebook
    user's backend; an unmanaged figure needs no closing either.

    Example:
        >>> fig = new_figure(figsize=(2, 1), dpi=50)
        >>> png_bytes(fig)[:4]
        b'\\x89PNG'
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """A matplotlib figure as PNG bytes with no software/version stamp (byte-identical across
    runs and matplotlib patch releases)."""
    from matplotlib.layout_engine import TightLayoutEngine

    # The tight layout applied once, as fig.tight_layout() does, but without leaving a layout
    # engine on the figure: with one, savefig draws the whole figure a second time first (text
    # layout is most of a draw: ~0.1 s per figure at a run's very end). Same bytes (tested).
    TightLayoutEngine().execute(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


#: Seconds a figure's process may take before its figures are drawn here instead.
RENDER_BOUND_S = 120.0

#: Held by one report's drawing at a time in this process (the shared state it guards:
#: matplotlib's own locks and caches). A fork while another thread is inside matplotlib copies
#: that thread's held locks into the child, where nobody releases them: the child hangs until
#: RENDER_BOUND_S (two studies reporting at once in one process did).
_DRAWING = threading.Lock()


def render_plots(jobs: Sequence[PlotArgs]) -> list[bytes | None]:
    """:func:`_plot_estimates` of each job's arguments, in order: drawn side by side on the
    machine's cores (each extra core draws its share in a forked child, which sends the PNG
    bytes back), else one after another. Same bytes either way (the same code draws them);
    a child that fails or runs past :data:`RENDER_BOUND_S` is killed and its share drawn
    here. Drawing is most of a report's time (0.2-0.4 s per figure, all Python holding the
    GIL: threads do not help), and the report is a run's last stage.

    Example:
        >>> render_plots([("t", [], "x")])
        [None]
    """
    with _DRAWING:
        return _render_plots(jobs)


def _render_plots(jobs: Sequence[PlotArgs]) -> list[bytes | None]:
    out: list[bytes | None] = [None] * len(jobs)
    todo = [i for i, args in enumerate(jobs)
            if any(e["value"] is not None for e in args[1])]
    from assay.grading import cores

    ways = min(len(todo), cores()) if hasattr(os, "fork") else 1
    shares = [todo[w::ways] for w in range(ways)] if ways > 1 else [todo]
    children = [_render_child([jobs[i] for i in share]) for share in shares[1:]]
    for i in shares[0]:
        out[i] = _plot_estimates(*jobs[i])
    for share, child in zip(shares[1:], children):
        got = _render_wait(child, len(share))
        for k, i in enumerate(share):
            out[i] = got[k] if got is not None else _plot_estimates(*jobs[i])
    return out


def _render_child(jobs: list[PlotArgs]) -> tuple[int, int] | None:
    """Fork a child drawing ``jobs``; (pid, read end of its pipe), or None if it could not."""
    import pickle

    # imported before the fork (the report's drawing needs them anyway): each child would
    # otherwise import them itself
    from matplotlib import figure  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401

    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:  # the child: draw, send, leave without running the parent's exit handlers
        code = 1
        try:
            os.close(r)
            data = pickle.dumps([_plot_estimates(*args) for args in jobs])
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _render_wait(child: tuple[int, int] | None, n: int) -> list[bytes | None] | None:
    """The child's figures, or None (it failed, or ran past the bound: then it is killed)."""
    import pickle
    import select
    import signal

    if child is None:
        return None
    pid, r = child
    chunks, ok = [], False
    deadline = time.monotonic() + RENDER_BOUND_S
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                break  # past the bound
            chunk = os.read(r, 1 << 20)
            if not chunk:
                ok = True
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        if not ok:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if not ok or status != 0:
        return None
    try:
        got = pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 (a truncated message: draw them here)
        return None
    return got if isinstance(got, list) and len(got) == n else None


def _plot_estimates(title: str, ests: Sequence[Mapping[str, Any]], xlabel: str,
                    baseline: Sequence[float | None] | None = None) -> bytes | None:
    ests = [e for e in ests if e["value"] is not None]
    if not ests:
        return None
    labels = [e["label"] for e in ests]
    vals = [e["value"] for e in ests]
    lo = [e["value"] - e["low"] if e["low"] is not None else 0.0 for e in ests]
    hi = [e["high"] - e["value"] if e["high"] is not None else 0.0 for e in ests]
    fig = new_figure(figsize=(7, 0.45 * len(ests) + 1.4), dpi=100)
    ax = fig.subplots()
    ys = list(range(len(ests)))[::-1]
    ax.errorbar(vals, ys, xerr=[lo, hi], fmt="o", capsize=3, color="#1f5f99",
                label="estimate, 95% CI")
    if baseline is not None:
        bx = [(b, y) for b, y in zip(baseline, ys) if b is not None]
        if bx:
            ax.scatter([b for b, _ in bx], [y for _, y in bx], marker="|", s=200, color="#c0392b",
                       label="length-only baseline")
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{lab} (n={e['n']})" for lab, e in zip(labels, ests)], fontsize=8)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return png_bytes(fig)


#: What the reward-rows plot shows per (source, model), in order.
_REWARD_ROWS_SHOWN = ("pass@1", "best-of-n", "pass@", "ranking accuracy", "length concordance")


def _reward_rows_plot(measures: Sequence[Mapping[str, Any]]) -> PlotArgs:
    """:func:`_plot_estimates`' arguments for best-of-n between pass@1 (random pick) and the
    oracle pick, ranking accuracy and length concordance, per scored source and reward model,
    each with its interval over tasks."""
    ests = []
    for m in measures:
        if m["kind"] != "reward_rows":
            continue
        for want in _REWARD_ROWS_SHOWN:
            # "pass@": the oracle pick (pass@k, k the samples per task), not pass@1
            e = _first(m["estimates"], lambda e, w=want: (
                e["name"] == w if w != "pass@" else e["name"].startswith(w)
                and e["name"] != "pass@1"))
            if e:
                ests.append({**e, "label": f"{m['source']} {m['marker']}: {e['name']}"})
    return ("reward models on the scored rows (95% CI over tasks)", ests,
            "rate over tasks (length concordance 0.5: no preference)")


def guard_counts(rows: RowsLike) -> dict[str, int]:
    """How many graded rows a grading guard stopped, per guard (``judge_meta["guard"]``, set by
    CodeExec when a candidate returned non-plain data, patched what its tests use, was refused
    an operation, ...); a policy that starts gaming its reward shows up as a rising count.

    ``rows``: anything with ``to_arrow()`` (assay's Rows) or an iterable of row dicts; the
    meta may be a dict or its JSON text.

    Example:
        >>> guard_counts([{"judge_meta": {"guard": "plain_data"}},
        ...               {"judge_meta": '{"guard": "plain_data"}'},
        ...               {"judge_meta": None}, {"judge_meta": {"outcome": "passed"}}])
        {'plain_data': 2}
    """
    if hasattr(rows, "to_arrow"):
        table = rows.to_arrow()
        metas = table.column("judge_meta").to_pylist() if "judge_meta" in table.column_names else []
    else:
        metas = [r.get("judge_meta") for r in rows]
    counts: dict[str, int] = {}
    for meta in metas:
        if isinstance(meta, str):
            meta = json.loads(meta)
        guard = meta.get("guard") if isinstance(meta, Mapping) else None
        if isinstance(guard, str):
            counts[guard] = counts.get(guard, 0) + 1
    return dict(sorted(counts.items()))


def _first(ests: Iterable[_T], pred: Callable[..., object]) -> _T | None:
    return next((e for e in ests if pred(e)), None)


# ------------------------------------------------------------------------------- the report


def build_report(spec_doc: Mapping[str, Any], sources: Sequence[Mapping[str, Any]],
                 measures: Sequence[Mapping[str, Any]], contamination: Sequence[Mapping[str, Any]],
                 audits: Sequence[Mapping[str, Any]]) -> dict[str, bytes]:
    """report.md, report.json and the PNGs, as ``{file name: bytes}``.

    ``spec_doc``: name, checksum, description. ``sources``: per source name, rows, tasks,
    verifier. The others: documents made by :func:`result_doc`.
    """
    # (file name, caption, _plot_estimates' arguments), rendered together below
    jobs: list[tuple[str, str, PlotArgs]] = []

    pass_ests = []
    for m in measures:
        e = headline_estimate(m)
        if e:
            pass_ests.append({**e, "label": m.get("source", m["label"])})
    for c in contamination:
        e = _first(c.get("clean_estimates", []), lambda e: e["name"].startswith("pass@1"))
        if e:
            pass_ests.append({**e, "label": f"{c.get('source')} (clean subset)"})
    jobs.append(("pass_rates.png", "pass@1 per source",
                 ("pass@1 per source (95% intervals over tasks)", pass_ests, "pass@1")))

    for m in measures:
        if m["kind"] == "pass_at_by":
            ests = [{**e, "label": e["category"]} for e in m["categories"]]
            ests.append({**m["macro"], "label": "macro average"})
            jobs.append((f"pass_by_{m['by']}_{m['source']}.png".replace("/", "_"),
                         f"pass@1 of {m['source']} per {m['by']}",
                         (f"pass@1 of {m['source']} per {m['by']} (95% intervals over each "
                          "category's tasks)", ests, "pass@1")))

    cont_ests = []
    for c in contamination:
        e = _first(c["estimates"], lambda e: "rate" in e["name"] or "contamin" in e["name"])
        if e:
            cont_ests.append({**e, "label": c.get("source", c["label"])})
    jobs.append(("contamination.png", "contamination rate",
                 ("contamination rate per source", cont_ests, "fraction of eval items")))

    jobs.append(("reward_rows.png", "reward models on the study's completions",
                 _reward_rows_plot(measures)))

    for a in audits:
        dims = a.get("dimensions") or []
        if dims:
            jobs.append((f"reward_{a['label']}.png", f"reward model {a['label']}",
                         (f"reward model {a['label']}: pair accuracy per dimension",
                          [{**d, "label": d["dimension"]} for d in dims], "pair accuracy",
                          [d.get("baseline") for d in dims])))

    files: dict[str, bytes] = {}
    plots: list[tuple[str, str]] = []
    for (fname, caption, _), png in zip(jobs, render_plots([args for _, _, args in jobs])):
        if png:
            files[fname] = png
            plots.append((fname, caption))

    md = _markdown(spec_doc, sources, measures, contamination, audits, plots)
    files["report.md"] = md.encode("utf-8")
    doc = {"report_version": REPORT_VERSION, "study": dict(spec_doc), "sources": list(sources),
           "measurements": list(measures), "contamination": list(contamination),
           "reward_audits": list(audits), "plots": [p for p, _ in plots]}
    files["report.json"] = (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False,
                                       allow_nan=False) + "\n").encode("utf-8")
    return files


def _block(text: str) -> str:
    return "```text\n" + text.rstrip() + "\n```\n"


def _markdown(spec_doc: Mapping[str, Any], sources: Sequence[Mapping[str, Any]],
              measures: Sequence[Mapping[str, Any]], contamination: Sequence[Mapping[str, Any]],
              audits: Sequence[Mapping[str, Any]], plots: Sequence[tuple[str, str]]) -> str:
    out = [f"# Study `{spec_doc['name']}`\n"]
    if spec_doc.get("description"):
        out.append(spec_doc["description"].strip() + "\n")
    out.append(f"Spec checksum `{spec_doc['checksum']}`. Intervals are 95% unless stated; n counts "
               "tasks (independent units), not rows.\n")
    if sources:
        out.append("Every task's samples, verdicts and reasons: [view/index.html](view/index.html) "
                   "(open it in a browser; `assay view RUN` rewrites it).\n")
    if sources:
        out.append("## Sources\n")
        guarded = any("guard_stopped" in s for s in sources)
        out.append("| source | tasks | rows | graded by |"
                   + (" stopped by a guard |" if guarded else "")
                   + "\n|---|---:|---:|---|" + ("---|" if guarded else ""))
        for s in sources:
            stopped = ""
            if guarded:
                g = s.get("guard_stopped") or {}
                stopped = f" {sum(g.values())}" + (
                    " (" + ", ".join(f"{k}: {v}" for k, v in g.items()) + ")" if g else "") + " |"
            out.append(f"| {s['name']} | {s['tasks']} | {s['rows']} | {s['verifier']} |{stopped}")
        out.append("")
        for s in sources:
            d = s.get("data")
            if d:
                cfg = f", config {d['config']}" if d.get("config") else ""
                split = d["split"] if d.get("split") else "(none: one Dataset, every record)"
                out.append(f"- {s['name']}: {d['dataset']}{cfg}, split {split}, revision "
                           f"{d.get('revision') or 'NOT PINNED (not reproducible)'}; "
                           f"{d['records']} records read{' (limit)' if d.get('limit') else ''}, "
                           f"content checksum `{d['checksum']}`")
        if any(s.get("data") for s in sources):
            out.append("")
        unjudged = [s for s in sources if (s.get("unjudged") or {}).get("rows")]
        for s in unjudged:
            u = s["unjudged"]
            out.append(f"- {s['name']}: {u['rows']} of {s['rows']} rows unjudged (no reward; "
                       "left out of the measurements); top reasons: "
                       + "; ".join(f"{why} ({n})" for why, n in u["reasons"]))
        if unjudged:
            out.append("")
    made = [s for s in sources if s.get("generation")]
    if made:
        out.append("## Generation\n")
        out.append("Completions sampled by assay. A `length` finish is a truncated completion; "
                   "failed requests are never graded and are asked again by the next run. "
                   "Requests sent, retries by status and requests that gave up are facts of each "
                   "run, in its run.json (`generation`).\n")
        out.append("| source | model | k | completions | failed | truncated | prompt tokens (mean) "
                   "| completion tokens (mean) | completion tokens (total) | sampling |\n"
                   "|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for s in made:
            g = s["generation"]
            tr = "n/a" if g["truncated_share"] is None else f"{100 * g['truncated_share']:.1f}%"
            by = g.get("errors_by_cause") or {}
            failed = f"{g['errors']}" + (" (" + ", ".join(f"{k}: {v}" for k, v in by.items()) + ")"
                                         if by else "")
            out.append(f"| {s['name']} | {g['model']} | {g['k']} | {g['completions']} | {failed} "
                       f"| {tr} | {g['prompt_tokens_mean']} | {g['completion_tokens_mean']} "
                       f"| {g['completion_tokens_total']} | {g.get('sampling') or '-'} |")
        out.append("")
        notes = [n for s in made for n in generation_notes(s["name"], s["generation"])]
        if notes:  # what the server did that a reader of the numbers must know
            out.extend([*notes, ""])
    if measures:
        out.append("## Measurements\n")
        for m in measures:
            out.append(f"### {m['label']}\n")
            out.append(_block(m["report"]))
    if contamination:
        out.append("## Contamination\n")
        for c in contamination:
            out.append(f"### {c['label']}\n")
            out.append(_block(c["report"]))
            if c.get("clean_report"):
                out.append("Scores on the full set and on the clean subset:\n")
                out.append(_block(c["clean_report"]))
    if audits:
        out.append("## Reward-model audits\n")
        for a in audits:
            out.append(f"### {a['label']}\n")
            out.append(_block(a["report"]))
    if plots:
        out.append("## Plots\n")
        for f, title in plots:
            out.append(f"![{title}]({f})\n")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------------------- run dir


def write_run_dir(out: str | os.PathLike[str], files: Mapping[str, bytes],
                  rows: Mapping[str, pa.Table | Rows], run_info: Mapping[str, object]) -> Path:
    """Write report files, ``rows/<source>.parquet`` and ``run.json`` (each atomically)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        atomic_write(out / name, data)
    for name, r in rows.items():
        buf = io.BytesIO()
        import pyarrow.parquet as pq

        pq.write_table(r if isinstance(r, pa.Table) else r.to_arrow(), buf, compression="zstd")
        atomic_write(out / "rows" / f"{name}.parquet", buf.getvalue())
    atomic_write(out / "run.json",
                 (json.dumps(dict(run_info), indent=2, sort_keys=True) + "\n").encode())
    return out


def read_report(run_dir: str | os.PathLike[str]) -> str:
    """The Markdown report of a finished run (what ``assay report RUN_DIR`` prints)."""
    p = Path(run_dir) / "report.md"
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{p} not found: {run_dir} is not a finished run directory "
                          "(run `assay run SPEC --output DIR` first)") from None




def generation_notes(name: str, g: Mapping[str, object]) -> list[str]:
    """The report's notes on what a source's server did: samples that differ at temperature 0,
    completions whose stop string assay cut.

    Example:
        >>> generation_notes("qa", {"k": 2, "differ_at_t0": 0, "stop_trimmed": 3})[0][:40]
        '- qa: 3 completion(s) kept the stop stri'
    """
    out = []
    if g.get("differ_at_t0"):
        out.append(f"- {name}: temperature 0, yet the {g['k']} samples of {g['differ_at_t0']} "
                   "prompt(s) differ: the server does not decode greedily (batching, "
                   "non-deterministic kernels); agreement between samples measures the server, "
                   "not the model.")
    if g.get("stop_trimmed"):
        out.append(f"- {name}: {g['stop_trimmed']} completion(s) kept the stop string in the "
                   "server's text; assay cut them before it, as OpenAI and vLLM return them "
                   "(run.json: `generation`).")
    return out
