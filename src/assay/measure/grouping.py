"""Read any row-like input into columns grouped by task: codes, rewards, weights and markers.

Every measurement call starts here; the rest of ``assay.measure`` works on numpy arrays only.

Input goes through :func:`assay.rows.as_table` (the one validator), which is zero-copy for an
Arrow table that already has the canonical schema (``Rows`` and what ``assay.rows()`` returns);
other input is validated on the columns measured (task_id, reward, markers) and every row key.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assay.errors import MeasureError
from assay.rows import MEASURED_COLUMNS, Rows, RowsLike, as_table


@dataclass(frozen=True)
class Frame:
    """The columns a measurement reads, one entry per row, tasks as integer codes.

    ``reward`` is NaN for an unjudged row; a marker is NaN on rows that do not carry it.
    """

    table: pa.Table
    codes: np.ndarray  # int64 task code per row, 0..n_tasks-1 in first-appearance order
    task_ids: pa.Array  # the task id of each code
    reward: np.ndarray  # float64, NaN = unjudged
    weight: np.ndarray | None  # float64 per row, None = every row counts once
    markers: dict[str, np.ndarray]
    binary: np.ndarray | None = None  # reward is exactly 0 or 1 (computed once)
    block: int = 0  # k when row i is task i // k (every task k rows, grouped in code order), else 0

    @property
    def n_rows(self) -> int:
        return len(self.reward)

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    def binary_mask(self) -> np.ndarray:
        if self.binary is not None:
            return self.binary
        r = self.reward
        return (r == 0.0) | (r == 1.0)

    def counts(self) -> dict[str, int]:
        """How many rows are binary, partial (strictly between 0 and 1) and unjudged."""
        n_binary = int(self.binary_mask().sum())
        unjudged = int(np.isnan(self.reward).sum()) if n_binary < self.n_rows else 0
        return {"binary": n_binary, "partial": self.n_rows - n_binary - unjudged,
                "unjudged": unjudged}


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
    values = (arr.items.slice(lo, hi - lo).to_numpy(zero_copy_only=False)
              .astype(np.float64, copy=False))
    lengths = np.diff(offsets)
    if len(keys) == n and np.all(lengths == 1):
        # One marker per row: often the same name on every row, then no scatter is needed.
        first = keys[0].as_py()
        if _all_equal(keys, first):
            return {first: values}
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


def _all_equal(strings: pa.Array, value: str) -> bool:
    """Whether every entry of a string array is ``value``, read from its offsets and bytes
    (0.07 ms for 80k entries; pyarrow's element-wise equal + all takes ~0.6 ms)."""
    if strings.null_count:
        return False
    if strings.type != pa.string():
        return bool(pc.all(pc.equal(strings, value)).as_py())
    n = len(strings)
    raw = value.encode()
    width = len(raw)
    off = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=n + 1,
                        offset=strings.offset * 4)
    if int(off[-1]) - int(off[0]) != width * n or not np.all(np.diff(off) == width):
        return False
    if width == 0:
        return True
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8, count=width * n, offset=int(off[0]))
    # memcmp; numpy's broadcast compare over rows of 3 bytes is 40x slower
    return data.tobytes() == raw * n


def _local_codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array, int]:
    """Task code of every row of one column (first-appearance order), the id of each code, and
    the block size k when the rows are k per task grouped by task (else 0; see Frame.block).

    Rows usually arrive grouped by task, so only the first id of each run of equal ids is
    dictionary-encoded; ungrouped rows just have more runs.
    """
    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(a)
    if n <= 1:
        return np.zeros(n, dtype=np.int64), a, n
    change = pc.not_equal(a.slice(1), a.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    starts = np.concatenate([[0], np.flatnonzero(change) + 1])
    enc = a.take(pa.array(starts)).dictionary_encode()
    run_codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    lengths = np.diff(np.append(starts, n))
    # every run a new task (codes are then 0, 1, 2, ... in run order) and every run k long
    block = (int(lengths[0]) if len(enc.dictionary) == len(starts)
             and np.all(lengths == lengths[0]) else 0)
    return np.repeat(run_codes, lengths), enc.dictionary, block


def task_codes(columns: Sequence[pa.ChunkedArray | pa.Array]) -> tuple[list[np.ndarray], pa.Array]:
    """Integer task codes for each task_id column, shared across columns, and the id of each code.

    Example:
        >>> codes, ids = task_codes([pa.array(["a", "a", "b"]), pa.array(["b", "c"])])
        >>> [c.tolist() for c in codes], ids.to_pylist()
        ([[0, 0, 1], [1, 2]], ['a', 'b', 'c'])
    """
    local = [_local_codes(c)[:2] for c in columns]
    return _unify(local)


def _unify(local: Sequence[tuple[np.ndarray, pa.Array]]) -> tuple[list[np.ndarray], pa.Array]:
    first_ids = local[0][1]
    if all(ids.equals(first_ids) for _, ids in local[1:]):  # the same tasks in the same order
        return [c for c, _ in local], first_ids
    enc = pa.concat_arrays([ids for _, ids in local]).dictionary_encode()
    shared = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    out, pos = [], 0
    for c, ids in local:
        out.append(shared[pos:pos + len(ids)][c])
        pos += len(ids)
    return out, enc.dictionary


def _weights_of(weights: object, n: int, markers: dict[str, np.ndarray],
                argument: str) -> np.ndarray | None:
    if weights is None:
        return None
    if isinstance(weights, str):
        name = weights.removeprefix("marker:")
        if name not in markers:
            raise MeasureError(f"{argument}: weights={weights!r} names no marker; the rows carry "
                               f"markers {sorted(markers)}")
        w = markers[name]
        missing = np.flatnonzero(np.isnan(w))
        if len(missing):
            raise MeasureError(f"{argument}[{missing[0]}]: marker {name!r} (the weights) is "
                               f"missing on {len(missing)} rows")
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise MeasureError(f"weights: expected one number per row ({n}), got shape {w.shape}")
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if len(bad):
        raise MeasureError(f"weights[{bad[0]}] = {w[bad[0]]!r}: weights must be finite and >= 0 "
                           f"({len(bad)} bad)")
    return w


def _read_columns(markers: bool) -> tuple[str, ...]:
    """What as_table checks and returns for a call that reads markers or not."""
    return MEASURED_COLUMNS if markers else tuple(c for c in MEASURED_COLUMNS if c != "markers")


def read_frame(data: RowsLike, *, argument: str = "rows", weights: object = None,
               markers: bool = True) -> Frame:
    """Validate ``data`` (Rows, dict rows, DataFrame or Arrow table) and read its columns.

    ``markers=False``: the caller reads only task ids and rewards, so markers given as dicts are
    neither checked nor decoded (a canonical table's are decoded anyway, once, and cached).
    Raises MeasureError when no row carries a reward at all (grade first).

    Example:
        >>> f = read_frame([{"task_id": "a", "reward": 1}, {"task_id": "a", "reward": 0}])
        >>> f.n_tasks, f.reward.tolist()
        (1, [1.0, 0.0])
    """
    table = as_table(data, require=(), argument=argument,
                     columns=_read_columns(markers or isinstance(weights, str)))
    return frame_of_table(table, argument=argument, weights=weights, key=_cache_key(data))


@dataclass(frozen=True)
class _Decoded:
    codes: np.ndarray
    task_ids: pa.Array
    reward: np.ndarray
    binary: np.ndarray
    markers: dict[str, np.ndarray]
    block: int


# An Arrow table is immutable, so what is decoded from it (task codes, rewards, markers) is
# computed once per table object and dropped with it: a study calls pass_at, compare,
# eval_variance and select on the same rows. Keyed by id (tables are unhashable), guarded by a
# weak reference, and removed when the table is collected (before its id can be reused).
_DECODED: dict[int, tuple[weakref.ref, _Decoded]] = {}


def _cache_key(data: object) -> pa.Table | None:
    """The immutable table behind ``data`` (Rows or an Arrow table), or None (not cached)."""
    if isinstance(data, Rows):
        return data.table
    return data if isinstance(data, pa.Table) else None


def _decode(table: pa.Table, argument: str, key: pa.Table | None = None,
            same_tasks_as: _Decoded | None = None) -> _Decoded:
    if "markers" not in table.column_names:
        key = None  # a partial decoding is never cached under the whole table
    if key is not None:
        entry = _DECODED.get(id(key))
        if entry is not None and entry[0]() is key:
            return entry[1]
    n = table.num_rows
    if n == 0:
        raise MeasureError(f"{argument}: no rows")
    reward_col = table.column("reward")
    if reward_col.null_count == n:
        raise MeasureError(
            f"{argument}: none of the {n} rows has a reward; grade them first "
            "(assay.grade(rows, verifier)) or give 'reward' numbers in [0, 1]"
        )
    if same_tasks_as is not None:  # the caller checked the task_id column is identical
        codes, task_ids, block = same_tasks_as.codes, same_tasks_as.task_ids, same_tasks_as.block
    else:
        codes, task_ids, block = _local_codes(table.column("task_id"))
    reward = reward_col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if reward_col.null_count:
        reward = np.where(pc.is_null(reward_col).to_numpy(zero_copy_only=False), np.nan, reward)
    markers = _markers_of(table.column("markers"), n) if "markers" in table.column_names else {}
    dec = _Decoded(codes, task_ids, reward, (reward == 0.0) | (reward == 1.0), markers, block)
    for arr in (dec.codes, dec.reward, dec.binary, *dec.markers.values()):
        arr.flags.writeable = False  # shared by every later call on this table
    if key is not None:
        _DECODED[id(key)] = (weakref.ref(key), dec)
        weakref.finalize(key, _DECODED.pop, id(key), None)
    return dec


def frame_of_table(table: pa.Table, *, argument: str = "rows", weights: object = None,
                   codes: np.ndarray | None = None, task_ids: pa.Array | None = None,
                   key: pa.Table | None = None) -> Frame:
    """Columns of an already validated canonical table (see :func:`read_frame`); ``codes`` and
    ``task_ids`` when the task coding is shared with other tables; ``key``: the caller's
    immutable table (see :func:`_cache_key`) under which the decoding is cached."""
    dec = _decode(table, argument, key)
    block = 0
    if codes is None or task_ids is None:
        codes, task_ids, block = dec.codes, dec.task_ids, dec.block
    w = _weights_of(weights, table.num_rows, dec.markers, argument)
    return Frame(table, codes, task_ids, dec.reward, w, dec.markers, dec.binary, block)


def read_runs(runs: Sequence[RowsLike], *, argument: str = "runs",
              markers: bool = True) -> tuple[list[Frame], pa.Array]:
    """Frames for several runs with task codes shared across them (a task id is one code).

    Returns the frames and the task id of each shared code; ``markers`` as in :func:`read_frame`.
    """
    cols = _read_columns(markers)
    tables = [as_table(r, require=(), argument=f"{argument}[{i}]", columns=cols)
              for i, r in enumerate(runs)]
    decoded: list[_Decoded] = []
    for i, (t, r) in enumerate(zip(tables, runs)):
        # Re-runs and paired arms usually list the same tasks in the same order: one coding.
        same = decoded[0] if i and t.column("task_id").equals(tables[0].column("task_id")) else None
        decoded.append(_decode(t, f"{argument}[{i}]", _cache_key(r), same))
    codes, task_ids = _unify([(d.codes, d.task_ids) for d in decoded])
    # a re-coded run (the runs' task sets differ) is no longer in block layout
    frames = [Frame(t, c, task_ids, d.reward, None, d.markers, d.binary,
                    d.block if c is d.codes else 0)
              for t, c, d in zip(tables, codes, decoded)]
    return frames, task_ids


@dataclass(frozen=True)
class TaskStats:
    """Per-task sums of one metric: weight n, sum s and sum of squares ss (over rows used)."""

    n: np.ndarray
    s: np.ndarray
    ss: np.ndarray
    rows: np.ndarray  # unweighted row count per task

    def __add__(self, other: TaskStats) -> TaskStats:
        return TaskStats(self.n + other.n, self.s + other.s, self.ss + other.ss,
                         self.rows + other.rows)

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


def _row_sums(m: np.ndarray) -> np.ndarray:
    """Row sums of a (T, k) float matrix by matrix-vector products, in slices small enough that
    BLAS stays on one thread (a second thread doubled CPU time at 100k tasks, saving no time)."""
    ones = np.ones(m.shape[1])
    step = 8192
    if len(m) <= step:
        return m @ ones
    return np.concatenate([m[i:i + step] @ ones for i in range(0, len(m), step)])


def task_stats(codes: np.ndarray, values: np.ndarray, mask: np.ndarray, n_tasks: int,
               weight: np.ndarray | None = None, *, binary: bool = False,
               block: int = 0) -> TaskStats:
    """Per-task weighted count, sum and sum of squares of ``values`` over rows in ``mask``
    (``binary``: values are 0/1, so the sum of squares is the sum; ``block``: Frame.block)."""
    if block and weight is None and len(codes) == n_tasks * block:
        # k rows per task in task order: row sums of a (T, k) matrix, ~6x faster than bincount
        if mask.all():
            v, rows = values, np.full(n_tasks, float(block))
        else:
            v = np.where(mask, values, 0.0)
            rows = _row_sums(mask.reshape(n_tasks, block).astype(np.float64))
        m = v.reshape(n_tasks, block)
        s = _row_sums(m)
        return TaskStats(rows, s, s if binary else _row_sums(m * m), rows)
    if mask.all():  # the common case: skip three copies
        c, v, w = codes, values, weight
    else:
        c = codes[mask]
        v = values[mask]
        w = None if weight is None else weight[mask]
    rows = np.bincount(c, minlength=n_tasks).astype(np.float64)
    if w is None:
        n = rows
        s = np.bincount(c, weights=v, minlength=n_tasks)
        ss = s if binary else np.bincount(c, weights=v * v, minlength=n_tasks)
    else:
        n = np.bincount(c, weights=w, minlength=n_tasks)
        s = np.bincount(c, weights=w * v, minlength=n_tasks)
        ss = np.bincount(c, weights=w * v * v, minlength=n_tasks)
    return TaskStats(n, s, ss, rows)
