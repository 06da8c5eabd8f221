"""select(rows, mode="rl"): keep the task groups that carry an RL learning signal, gate by gate.

Every gate that drops rows or groups is counted and printed, in the order it ran.

Order (each gate sees what the previous ones kept):

1. ``non-binary reward``: partial (strictly between 0 and 1) and unjudged rows.
2. ``unanimous (all pass)`` / ``unanimous (all fail)``: groups with no advantage signal
   (GRPO/DAPO: Yu et al. 2025, arXiv:2503.14476, dynamic sampling).
3. ``outside band``: groups whose pass rate is outside ``band`` (inclusive; Lambert 2025,
   chapter Reasoning). The rate of a task is computed from *all* its binary graded rows, before
   any of the row gates or de-duplication below, so dropping a duplicate never moves a task
   in or out of the band.
4. ``empty reply``: final_text empty or whitespace.
5. ``cut-off reply``: stamped as cut at the token cap: ``judge_meta`` with
   ``"finish_reason": "length"`` or ``"truncated": true``, a ``truncated`` marker != 0, or a
   grader ``reason`` saying truncated / cut off. The text's shape is never used: correct long
   code that does not end in punctuation is not junk.
6. ``privileged leak``: the reply quotes a privileged field other than the reference (a string
   of 20+ characters, verbatim). A reply that equals or contains the reference answer is the
   answer, never a leak.
7. ``duplicate within group``: same task and the same reply after whitespace normalization;
   the first is kept.
8. ``no longer mixed``: groups left all-pass, all-fail or with one row by gates 4-7.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assay.errors import MeasureError
from assay.measure.grouping import _cache_key, frame_of_table
from assay.results import Estimate, Result
from assay.rows import Rows, RowsLike, as_table

LEAK_MIN_CHARS = 20


@dataclass(frozen=True)
class Gate:
    """One gate of the selection: rows and whole groups it dropped."""

    name: str
    rows_dropped: int
    groups_dropped: int
    note: str = ""

    def __str__(self) -> str:
        g = f", {self.groups_dropped} groups" if self.groups_dropped else ""
        return f"{self.name}: -{self.rows_dropped} rows{g}"


@dataclass(frozen=True)
class Selection(Result):
    """Kept rows (``rows``, their positions in the input ``indices``) and the gate report."""

    rows: Rows
    indices: np.ndarray
    gates: tuple[Gate, ...]
    mode: str
    band: tuple[float, float]
    n_rows_in: int
    n_tasks_in: int
    n_rows_kept: int
    n_tasks_kept: int
    warnings: tuple[str, ...] = ()

    def _headline(self) -> Estimate:
        """The tasks kept, out of the tasks given."""
        return Estimate("tasks kept", float(self.n_tasks_kept), None, self.n_tasks_in, "tasks",
                        self.n_rows_kept)

    def __len__(self) -> int:
        return self.n_rows_kept

    def __iter__(self):
        return iter(self.rows)

    def __str__(self) -> str:
        gates = " | ".join(str(g) for g in self.gates if g.rows_dropped or g.groups_dropped)
        return (f"select({self.mode}, band [{self.band[0]:g}, {self.band[1]:g}]): kept "
                f"{self.n_rows_kept} of {self.n_rows_in} rows in {self.n_tasks_kept} of "
                f"{self.n_tasks_in} tasks"
                + (f" | {gates}" if gates else ""))

    def report(self) -> str:
        lines = [self._line()]
        for g in self.gates:
            lines.append(f"  gate {g.name}: dropped {g.rows_dropped} rows, {g.groups_dropped} "
                         "whole groups"
                         + (f" ({g.note})" if g.note else ""))
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        from assay.results import to_plain

        return to_plain({"gates": list(self.gates), "mode": self.mode, "band": list(self.band),
                         "n_rows_in": self.n_rows_in, "n_tasks_in": self.n_tasks_in,
                         "n_rows_kept": self.n_rows_kept, "n_tasks_kept": self.n_tasks_kept,
                         "warnings": list(self.warnings)})


def _strings(obj: object) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _leaks(table: pa.Table, idx: np.ndarray) -> np.ndarray:
    """Rows (positions in idx) whose reply quotes a non-reference privileged string."""
    out = np.zeros(len(idx), dtype=bool)
    priv = table.column("privileged").take(pa.array(idx))
    if priv.null_count == len(idx):
        return out
    enc = priv.combine_chunks().dictionary_encode()
    secrets: list[list[str]] = []
    for text in enc.dictionary.to_pylist():
        d = json.loads(text)
        if not isinstance(d, dict):
            secrets.append([])
            continue
        found = [s for key, v in d.items() if key != "reference" for s in _strings(v)
                 if len(s.strip()) >= LEAK_MIN_CHARS]
        ref = {s for s in _strings(d.get("reference"))}
        secrets.append([s for s in found if s not in ref])
    if not any(secrets):
        return out
    codes = enc.indices.to_numpy(zero_copy_only=False)
    valid = ~pc.is_null(enc.indices).to_numpy(zero_copy_only=False)
    texts = table.column("final_text").take(pa.array(idx))
    candidates = np.flatnonzero(valid & np.isin(codes, [i for i, s in enumerate(secrets) if s]))
    for j in candidates:
        reply = texts[int(j)].as_py()
        out[j] = any(s in reply for s in secrets[int(codes[j])])
    return out


def _normalize_ws(texts: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Trim, and collapse whitespace runs to one space. The regex runs only on the rows that
    need it (found by fast literal searches for RE2's \\s characters beyond a single space)."""
    t = pc.utf8_trim_whitespace(texts)
    t = t.combine_chunks() if isinstance(t, pa.ChunkedArray) else t
    need = None
    for lit in ("  ", "\t", "\n", "\r", "\f"):
        m = pc.match_substring(t, lit)
        need = m if need is None else pc.or_(need, m)
    rows = np.flatnonzero(pc.fill_null(need, False).to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return t
    fixed = pc.replace_substring_regex(t.take(pa.array(rows)), r"\s+", " ")
    # Splice the fixed rows back with one take over [original; fixed].
    combined = pa.concat_arrays([t, fixed])
    index = np.arange(len(t))
    index[rows] = len(t) + np.arange(len(rows))
    return combined.take(pa.array(index))


def _cut_off(table: pa.Table, idx: np.ndarray, markers: dict[str, np.ndarray]) -> np.ndarray:
    take = pa.array(idx)
    meta = table.column("judge_meta").take(take)
    reason = table.column("reason").take(take)
    hit = np.zeros(len(idx), dtype=bool)
    if meta.null_count < len(idx):
        m = pc.match_substring_regex(meta, r'"finish_reason":\s*"length"|"truncated":\s*true')
        hit |= pc.fill_null(m, False).to_numpy(zero_copy_only=False)
    if reason.null_count < len(idx):
        r = pc.match_substring_regex(reason, r"truncat|cut off|cut-off", ignore_case=True)
        hit |= pc.fill_null(r, False).to_numpy(zero_copy_only=False)
    if "truncated" in markers:
        t = markers["truncated"][idx]
        hit |= ~np.isnan(t) & (t != 0)
    return hit


def select(rows: RowsLike, mode: str = "rl", band: tuple[float, float] = (0.2, 0.8)) -> Selection:
    """Keep the groups worth RL training on and say, gate by gate, what was dropped and why.

    Args:
        rows: graded rows (any row-like input), several samples per task.
        mode: ``"rl"`` (the only mode: group-relative RL needs mixed groups).
        band: inclusive pass-rate band a task must fall in, from all its graded rows.

    Example:
        >>> rs = [{"task_id": t, "prompt": t, "final_text": f"answer {j}", "reward": float(j < n)}
        ...       for t, n in [("easy", 4), ("mid", 2), ("hard", 0)] for j in range(4)]
        >>> sel = select(rs)
        >>> len(sel), sel.n_tasks_kept, [g.name for g in sel.gates if g.groups_dropped]
        (4, 1, ['unanimous (all pass)', 'unanimous (all fail)'])
    """
    if mode != "rl":
        raise MeasureError(f"select: mode={mode!r} is not supported; mode='rl' keeps mixed groups "
                           "for RL")
    try:
        lo, hi = (float(band[0]), float(band[1]))
    except (TypeError, ValueError, IndexError):
        raise MeasureError(f"band must be a pair (low, high) of pass rates, got {band!r}") from None
    if not 0.0 <= lo <= hi <= 1.0:
        raise MeasureError(f"band must satisfy 0 <= low <= high <= 1, got {band!r}")
    table = as_table(rows, require=(), argument="rows")
    frame = frame_of_table(table, argument="rows", key=_cache_key(rows))
    n, T = frame.n_rows, frame.n_tasks
    codes = frame.codes
    gates: list[Gate] = []
    keep = np.ones(n, dtype=bool)

    def groups_alive(mask: np.ndarray) -> int:
        return int((np.bincount(codes[mask], minlength=T) > 0).sum())

    def drop(name: str, rows_mask: np.ndarray, note: str = "") -> None:
        before_groups = groups_alive(keep)
        dropped = keep & rows_mask
        keep[dropped] = False
        gates.append(Gate(name, int(dropped.sum()), before_groups - groups_alive(keep), note))

    binary = frame.binary_mask()
    unjudged = np.isnan(frame.reward)
    drop("non-binary reward", ~binary,
         f"{int((~binary & ~unjudged).sum())} partial, {int(unjudged.sum())} unjudged")
    # The band reads each task's rate from all its binary graded rows, before any other gate.
    nb = np.bincount(codes[binary], minlength=T).astype(np.float64)
    cb = np.bincount(codes[binary], weights=frame.reward[binary], minlength=T)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = cb / nb
    row_rate = rate[codes]
    drop("unanimous (all pass)", row_rate == 1.0)
    drop("unanimous (all fail)", row_rate == 0.0)
    drop("outside band", (row_rate < lo) | (row_rate > hi),
         f"rate from all graded rows, band [{lo:g}, {hi:g}]")
    idx = np.flatnonzero(keep)
    if len(idx):
        texts = table.column("final_text").take(pa.array(idx))
        trimmed = pc.utf8_trim_whitespace(texts)
        empty = np.zeros(n, dtype=bool)
        empty[idx] = (pc.utf8_length(trimmed).to_numpy(zero_copy_only=False) == 0)
        drop("empty reply", empty)
        cut = np.zeros(n, dtype=bool)
        cut[idx] = _cut_off(table, idx, frame.markers)
        drop("cut-off reply", cut, "stamped by judge_meta/reason/marker; text shape is never used")
        leak = np.zeros(n, dtype=bool)
        leak[idx] = _leaks(table, idx)
        drop("privileged leak", leak, "a reply equal to the reference is never a leak")
        idx2 = np.flatnonzero(keep)
        dup = np.zeros(n, dtype=bool)
        if len(idx2):
            norm = _normalize_ws(table.column("final_text").take(pa.array(idx2)))
            tcodes = (norm.dictionary_encode().indices.to_numpy(zero_copy_only=False)
                      .astype(np.int64))
            key = codes[idx2] * (int(tcodes.max()) + 1) + tcodes
            _, first = np.unique(key, return_index=True)
            is_dup = np.ones(len(idx2), dtype=bool)
            is_dup[first] = False
            dup[idx2] = is_dup
        drop("duplicate within group", dup, "same task, same reply after whitespace normalization")
    else:
        for name in ("empty reply", "cut-off reply", "privileged leak", "duplicate within group"):
            gates.append(Gate(name, 0, 0))
    # A group the row gates left all-pass, all-fail or single carries no advantage signal.
    k2 = np.flatnonzero(keep)
    nk = np.bincount(codes[k2], minlength=T)
    ck = np.bincount(codes[k2], weights=frame.reward[k2], minlength=T)
    mixed = (nk >= 2) & (ck > 0) & (ck < nk)
    drop("no longer mixed", ~mixed[codes], "after the row gates")
    kept_idx = np.flatnonzero(keep)
    warnings: list[str] = []
    if len(kept_idx) == 0:
        worst = max(gates, key=lambda g: g.rows_dropped)
        warnings.append("no mixed groups left: every row was dropped; the largest gate was "
                        f"'{worst.name}' ({worst.rows_dropped} rows)")
    kept = Rows(table.take(pa.array(kept_idx, type=pa.int64())))
    return Selection(kept, kept_idx, tuple(gates), mode, (lo, hi), n, T, len(kept_idx),
                     groups_alive(keep), tuple(warnings))
