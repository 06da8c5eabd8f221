"""Read any row-like input into columns grouped by task: codes, rewards, weights and markers.

Every measurement call starts here; the rest of ``assay.measure`` works on numpy arrays only.

Input goes through :func:`assay.rows.as_table` (the one validator), which is zero-copy for an
Arrow table that already has the canonical schema (``Rows`` and what ``assay.rows()`` returns).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assay.errors import MeasureError
from assay.rows import as_table


@dataclass(frozen=True)
class Frame:
    """The columns a measurement reads, one entry per row, tasks as integer codes.

    ``reward`` is NaN for an unjudged row; a marker is NaN on rows that do not carry it.
    """

    table: pa.Table
    codes: np.ndarray  # int64 task code per row, 0..n_tasks-1 in first-appearance order
    task_ids: np.ndarray  # object array: the task id of each code
    reward: np.ndarray  # float64, NaN = unjudged
    weight: np.ndarray | None  # float64 per row, None = every row counts once
    markers: dict[str, np.ndarray]

    @property
    def n_rows(self) -> int:
        return len(self.reward)

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    def binary_mask(self) -> np.ndarray:
        r = self.reward
        return (r == 0.0) | (r == 1.0)

    def counts(self) -> dict[str, int]:
        """How many rows are binary, partial (strictly between 0 and 1) and unjudged."""
        unjudged = np.isnan(self.reward)
        binary = self.binary_mask()
        return {
            "binary": int(binary.sum()),
            "partial": int((~binary & ~unjudged).sum()),
            "unjudged": int(unjudged.sum()),
        }


def _markers_of(col: pa.ChunkedArray, n: int) -> dict[str, np.ndarray]:
    """Scatter a ``map<string, double>`` column into one NaN-filled float array per name."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if len(arr) == 0:
        return {}
    offsets = arr.offsets.to_numpy()
    # keys/items are the unsliced children: cut them to this array's own entries.
    lo, hi = int(offsets[0]), int(offsets[-1])
    if hi == lo:
        return {}
    keys = arr.keys.slice(lo, hi - lo)
    values = arr.items.slice(lo, hi - lo).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    lengths = np.diff(offsets)
    if len(keys) == n and np.all(lengths == 1):
        # One marker per row: often the same name on every row, then no scatter is needed.
        uniq = pc.unique(keys)
        if len(uniq) == 1:
            return {uniq[0].as_py(): values}
    row_of = np.repeat(np.arange(n), lengths)
    key_codes = keys.dictionary_encode()
    names = key_codes.dictionary.to_pylist()
    idx = key_codes.indices.to_numpy()
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(names):
        sel = idx == j
        col_out = np.full(n, np.nan)
        col_out[row_of[sel]] = values[sel]
        out[name] = col_out
    return out


def _weights_of(weights: Any, n: int, markers: dict[str, np.ndarray], argument: str) -> np.ndarray | None:
    if weights is None:
        return None
    if isinstance(weights, str):
        name = weights.removeprefix("marker:")
        if name not in markers:
            raise MeasureError(f"{argument}: weights={weights!r} names no marker; the rows carry markers {sorted(markers)}")
        w = markers[name]
        missing = np.flatnonzero(np.isnan(w))
        if len(missing):
            raise MeasureError(f"{argument}[{missing[0]}]: marker {name!r} (the weights) is missing on {len(missing)} rows")
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise MeasureError(f"weights: expected one number per row ({n}), got shape {w.shape}")
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if len(bad):
        raise MeasureError(f"weights[{bad[0]}] = {w[bad[0]]!r}: weights must be finite and >= 0 ({len(bad)} bad)")
    return w


def read_frame(data: Any, *, argument: str = "rows", weights: Any = None) -> Frame:
    """Validate ``data`` (Rows, dict rows, DataFrame or Arrow table) and read its columns.

    Raises MeasureError when no row carries a reward at all (grade first).

    Example:
        >>> f = read_frame([{"task_id": "a", "reward": 1}, {"task_id": "a", "reward": 0}])
        >>> f.n_tasks, f.reward.tolist()
        (1, [1.0, 0.0])
    """
    table = as_table(data, require=(), argument=argument)
    return frame_of_table(table, argument=argument, weights=weights)


def frame_of_table(table: pa.Table, *, argument: str = "rows", weights: Any = None,
                   codes: np.ndarray | None = None, task_ids: np.ndarray | None = None) -> Frame:
    """Columns of an already validated canonical table (see :func:`read_frame`); ``codes`` and
    ``task_ids`` when the task coding is shared with other tables (:func:`read_runs`)."""
    n = table.num_rows
    if n == 0:
        raise MeasureError(f"{argument}: no rows")
    if codes is None or task_ids is None:
        enc = table.column("task_id").combine_chunks().dictionary_encode()
        codes = enc.indices.to_numpy().astype(np.int64, copy=False)
        task_ids = np.asarray(enc.dictionary.to_pylist(), dtype=object)
    reward_col = table.column("reward")
    if reward_col.null_count == n:
        raise MeasureError(
            f"{argument}: none of the {n} rows has a reward; grade them first "
            "(assay.grade(rows, verifier)) or give 'reward' numbers in [0, 1]"
        )
    reward = reward_col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if reward_col.null_count:
        reward = np.where(pc.is_null(reward_col).to_numpy(zero_copy_only=False), np.nan, reward)
    markers = _markers_of(table.column("markers"), n)
    w = _weights_of(weights, n, markers, argument)
    return Frame(table, codes, task_ids, reward, w, markers)


def read_runs(runs: Sequence[Any], *, argument: str = "runs") -> tuple[list[Frame], np.ndarray]:
    """Frames for several runs with task codes shared across them (a task id is one code).

    Returns the frames and the task id of each shared code.
    """
    tables = [as_table(r, require=(), argument=f"{argument}[{i}]") for i, r in enumerate(runs)]
    joined = pa.chunked_array([t.column("task_id").combine_chunks() for t in tables]).combine_chunks()
    enc = joined.dictionary_encode()
    all_codes = enc.indices.to_numpy().astype(np.int64, copy=False)
    task_ids = np.asarray(enc.dictionary.to_pylist(), dtype=object)
    frames, start = [], 0
    for i, t in enumerate(tables):
        codes = all_codes[start:start + t.num_rows]
        start += t.num_rows
        frames.append(frame_of_table(t, argument=f"{argument}[{i}]", codes=codes, task_ids=task_ids))
    return frames, task_ids


@dataclass(frozen=True)
class TaskStats:
    """Per-task sums of one metric: weight n, sum s and sum of squares ss (over rows used)."""

    n: np.ndarray
    s: np.ndarray
    ss: np.ndarray
    rows: np.ndarray  # unweighted row count per task

    @property
    def present(self) -> np.ndarray:
        return self.n > 0

    def means(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.s / self.n

    def within_var(self) -> np.ndarray:
        """Unbiased within-task variance of one row (ddof 1 on row counts); NaN below 2 rows."""
        with np.errstate(invalid="ignore", divide="ignore"):
            m = self.s / self.n
            v = (self.ss - self.n * m * m) / self.n * (self.rows / (self.rows - 1))
        v = np.where(self.rows >= 2, np.maximum(v, 0.0), np.nan)
        return v


def task_stats(codes: np.ndarray, values: np.ndarray, mask: np.ndarray, n_tasks: int,
               weight: np.ndarray | None = None) -> TaskStats:
    """Per-task weighted count, sum and sum of squares of ``values`` over rows in ``mask``."""
    c = codes[mask]
    v = values[mask]
    w = None if weight is None else weight[mask]
    rows = np.bincount(c, minlength=n_tasks).astype(np.float64)
    if w is None:
        n = rows
        s = np.bincount(c, weights=v, minlength=n_tasks)
        ss = np.bincount(c, weights=v * v, minlength=n_tasks)
    else:
        n = np.bincount(c, weights=w, minlength=n_tasks)
        s = np.bincount(c, weights=w * v, minlength=n_tasks)
        ss = np.bincount(c, weights=w * v * v, minlength=n_tasks)
    return TaskStats(n, s, ss, rows)
