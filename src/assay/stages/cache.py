"""Stage caching on the checksum chain: keys, stored pointers, verified loads, progress lines.

A stage's key is ``combine(stage, version, input checksums, parameters, model fingerprint)``;
its outputs are stored first and its ref last, so a killed run never leaves a readable half.

A stage returns a :class:`StageResult`: a small pointer (store keys, content checksums, a
summary) that is cheap to pass between processes; the data stays in the store.

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> store = Store(tempfile.mkdtemp())
    >>> calls = []
    >>> def compute():
    ...     calls.append(1)
    ...     return {"doc": {"answer": 42}}, {"rows": 0}
    >>> a = cached_stage(store, "measure", inputs=["x:1"], params={"p": 1}, compute=compute)
    >>> b = cached_stage(store, "measure", inputs=["x:1"], params={"p": 1}, compute=compute)
    >>> a.cached, b.cached, len(calls), store.get_json(b.outputs["doc"])
    (False, True, 1, {'answer': 42})
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.parquet as pq

from assay.errors import StoreError, StoreVanishedError
from assay.hashing import combine
from assay.modes import Cut
from assay.rows import ROW_GROUP_ROWS, ParquetRows, Rows, stored_columns
from assay.store import Store

#: Every stage's version, declared by its module with :func:`define_stage`. Bump a stage's
#: version when its code changes what it outputs: old entries then miss.
STAGE_VERSIONS: dict[str, int] = {}


def define_stage(name: str, version: int) -> str:
    """Declare a stage (its module calls this once); returns the name for the module's use."""
    if STAGE_VERSIONS.get(name, version) != version:
        raise StoreError(f"stage {name!r} declared twice with versions "
                         f"{STAGE_VERSIONS[name]} and {version}")
    STAGE_VERSIONS[name] = version
    return name


# ------------------------------------------------------------------------------- caching


@dataclass(frozen=True)
class StageResult:
    """Pointer to one stage x shard output in the store.

    ``outputs`` maps output names to store keys; ``checksums`` maps them to content checksums
    (what downstream keys combine); ``summary`` holds small JSON facts (row counts, timings).
    """

    stage: str
    label: str
    key: str
    outputs: dict[str, str]
    checksums: dict[str, str]
    summary: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "label": self.label, "key": self.key,
                "outputs": dict(self.outputs), "checksums": dict(self.checksums),
                "summary": dict(self.summary), "cached": self.cached, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StageResult:
        return cls(**{k: d[k] for k in ("stage", "label", "key", "outputs", "checksums",
                                         "summary", "cached", "seconds")})


def stage_key(stage: str, inputs: Sequence[object], params: object,
              fingerprint: object = None) -> str:
    """The cache key of a stage run: stage name + version + input checksums + parameters +
    model fingerprint (``None`` when no model is involved).

    Example:
        >>> stage_key("grade", ["rows:a"], {"v": 1}) != stage_key("grade", ["rows:b"], {"v": 1})
        True
    """
    if stage not in STAGE_VERSIONS:
        raise StoreError(f"unknown stage {stage!r}; known: {list(STAGE_VERSIONS)}")
    return combine("stage", stage, STAGE_VERSIONS[stage], list(inputs), params, fingerprint)


def _ref_name(key: str) -> str:
    return f"assay-stage/{key}"


def lookup(store: Store, key: str) -> dict[str, Any] | None:
    """The stored pointer document of a finished stage, or None (missing, corrupt, or any of
    its outputs missing or corrupt: then the stage simply runs again)."""
    ref = store.get_ref(_ref_name(key))
    if ref is None:
        return None
    doc = store.get_json(ref["blob"])
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    if not all(store.has(v) for v in doc.get("outputs", {}).values()):
        return None
    return doc


@dataclass(frozen=True)
class Stored:
    """An output that is already in the store (another stage's, unchanged): named, not
    written again. What a stage that leaves its input as it is returns."""

    key: str
    checksum: str


def _store_output(store: Store, value: object) -> tuple[str, str]:
    """(store key, content checksum) of one output value."""
    if isinstance(value, Stored):
        return value.key, value.checksum
    if isinstance(value, Rows):  # row groups a shard can read alone (``load_slice``)
        return (store.put_table(value.to_arrow(), row_group_rows=ROW_GROUP_ROWS),
                value.checksum())
    if isinstance(value, ParquetRows):  # encoded as built: stored as it is
        return store.put_parquet(value.data), value.checksum()
    if isinstance(value, pa.Table):
        k = store.put_table(value)
        return k, k
    if isinstance(value, (bytes, bytearray)):
        k = store.put_bytes(bytes(value))
        return k, k
    k = store.put_json(value)
    return k, k


class NotCached(LookupError):
    """Inside :func:`cached_only`: a stage's key is not in the store (it would compute)."""


_CACHED_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("assay_cached_only",
                                                                    default=False)


@contextlib.contextmanager
def cached_only() -> Iterator[None]:
    """While the block runs (in this thread), a stage whose key is not stored raises
    :class:`NotCached` instead of computing: how a fully cached run is served without starting
    any orchestration.

    Example:
        >>> import tempfile
        >>> from assay.store import Store
        >>> with cached_only():
        ...     cached_stage(Store(tempfile.mkdtemp()), "measure", inputs=[], params={},
        ...                  compute=lambda: ({}, {}))
        Traceback (most recent call last):
        assay.stages.cache.NotCached: measure: not in the store
    """
    token = _CACHED_ONLY.set(True)
    try:
        yield
    finally:
        _CACHED_ONLY.reset(token)


def is_cached_only() -> bool:
    """Whether this thread is inside :func:`cached_only` (a stage would raise, not compute).

    Example:
        >>> with cached_only():
        ...     is_cached_only()
        True
        >>> is_cached_only()
        False
    """
    return _CACHED_ONLY.get()


def cached_stage(store: Store, stage: str, *, inputs: Sequence[object], params: object,
                 compute: Callable[[], tuple[Mapping[str, object], Mapping[str, Any]]],
                 fingerprint: object = None, label: str | None = None,
                 progress: Callable[[StageResult], None] | None = None) -> StageResult:
    """Serve ``stage`` from the store, or run ``compute`` and store it.

    ``compute()`` returns ``(outputs, summary)``; outputs are Rows (or ParquetRows), Arrow
    tables, bytes, JSON documents, or :class:`Stored` (already in the store). Outputs are
    written (atomically, verified) before the ref that names them, so a kill at any point
    leaves either a complete entry or none.
    """
    key = stage_key(stage, inputs, params, fingerprint)
    label = label or stage
    doc = lookup(store, key)
    if doc is not None:
        res = StageResult(stage, label, key, doc["outputs"], doc["checksums"], doc["summary"],
                          cached=True, seconds=0.0)
        if progress:
            progress(res)
        return res
    if is_cached_only():
        raise NotCached(f"{label}: not in the store")
    if progress:  # long stages (a reward model, a big shard) say they started
        progress(StageResult(stage, label, key, {}, {}, {"state": "running"}))
    t0 = time.perf_counter()
    values, summary = compute()
    outputs, checksums = {}, {}
    for name, value in values.items():
        outputs[name], checksums[name] = _store_output(store, value)
    seconds = time.perf_counter() - t0
    summary = dict(summary)
    pointer = {"key": key, "stage": stage, "label": label, "outputs": outputs,
               "checksums": checksums, "summary": summary, "seconds": seconds}
    store.set_ref(_ref_name(key), store.put_json(pointer), {"stage": stage, "label": label})
    res = StageResult(stage, label, key, outputs, checksums, summary, cached=False, seconds=seconds)
    if progress:
        progress(res)
    return res


def print_progress(res: StageResult, stream: TextIO | None = None) -> None:
    """One progress line: stage, shard, rows and rows/s (or 'cached')."""
    stream = stream or sys.stderr
    n = res.summary.get("rows")
    if res.summary.get("state") == "running":
        line = f"[{res.stage}] {res.label}: running"
    elif res.cached:
        line = f"[{res.stage}] {res.label}: cached"
    elif n:
        from assay.rates import rate_text  # below 1 row/s: "3.59 s/row", not "0 rows/s"

        line = (f"[{res.stage}] {res.label}: {n} rows in {res.seconds:.1f} s "
                f"({rate_text(n, res.seconds)})")
    else:
        line = f"[{res.stage}] {res.label}: done in {res.seconds:.1f} s"
    with _PRINT_LOCK:  # nodes run concurrently: one write per line, never two half-lines
        stream.write(line + "\n")
        stream.flush()


_PRINT_LOCK = threading.Lock()


_TABLES: dict[tuple[str, str], pa.Table] = {}
_TABLES_LOCK = threading.Lock()


def load_rows(store: Store, res: StageResult, name: str = "rows") -> Rows:
    """The rows a stage stored (verified). Tables are immutable and named by content, so a few
    recent ones are memoized: every grading shard reads the same filtered table."""
    memo = (store.location, res.outputs[name])
    t = _TABLES.get(memo)
    if t is None:
        t = store.get_table(res.outputs[name])
        if t is not None:
            with _TABLES_LOCK:  # shards on several threads read and evict at once
                while len(_TABLES) >= 8:
                    _TABLES.pop(next(iter(_TABLES)))
                _TABLES[memo] = t
    if t is None:
        raise _vanished(store, res, name)
    return Rows(t)


def _vanished(store: Store, res: StageResult, name: str) -> StoreVanishedError:
    return StoreVanishedError(
        f"{res.label}: output {name!r} ({res.outputs[name]}) vanished from "
        f"{store.location} after it was computed (did the process that computed it write to "
        "another store? workers must reach the same store as the driver)")


#: Row groups of a stored rows table (see ``ROW_GROUP_ROWS``) decoded lately, and the
#: verified files they came from: shards read their own rows, and neighbouring shards share a
#: group, so a few are kept (evicted oldest first).
_FILES: dict[tuple[str, str], pq.ParquetFile] = {}
_GROUPS: dict[tuple[str, str, int], pa.Table] = {}
_SLICE_LOCK = threading.Lock()


def _stored_file(store: Store, res: StageResult, name: str) -> pq.ParquetFile:
    memo = (store.location, res.outputs[name])
    with _SLICE_LOCK:
        f = _FILES.get(memo)
    if f is None:
        data = store.get_bytes(res.outputs[name])  # verified once, then kept (compressed)
        if data is None:
            raise _vanished(store, res, name)
        f = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
        with _SLICE_LOCK:
            while len(_FILES) >= 4:
                _FILES.pop(next(iter(_FILES)))
            _FILES[memo] = f
    return f


def _row_group(store: Store, res: StageResult, name: str, f: pq.ParquetFile,
               i: int) -> pa.Table:
    memo = (store.location, res.outputs[name], i)
    with _SLICE_LOCK:
        t = _GROUPS.pop(memo, None)
        if t is not None:
            _GROUPS[memo] = t  # most recently used last
            return t
    # no reader threads: see Store.get_table
    t = f.read_row_group(i, use_threads=False)
    with _SLICE_LOCK:
        while len(_GROUPS) >= 4:
            _GROUPS.pop(next(iter(_GROUPS)))
        _GROUPS[memo] = t
    return t


def load_columns(store: Store, res: StageResult, columns: Sequence[str],
                 name: str = "rows") -> Rows:
    """Only ``columns`` of the rows a stage stored (verified), every row: what cutting a
    source into shards reads (its task ids), without decoding the rest."""
    return Rows(_columns_of(store, res, columns, name, keep=True))


def load_slice(store: Store, res: StageResult, lo: int, hi: int, name: str = "rows") -> Rows:
    """Rows ``lo:hi`` of the rows a stage stored (verified), one chunk per column: read from
    the Parquet row groups that hold them, so a shard holds its own rows and a group or two,
    not the whole table (issue 50). The same rows, in the same form, as
    ``load_rows(...).to_arrow().slice(lo, hi - lo)`` of a single-chunk table."""
    memo = (store.location, res.outputs[name])
    whole = _TABLES.get(memo)  # already decoded in this process (a small table, a test)
    if whole is not None:
        t = whole.slice(lo, hi - lo)
    else:
        f = _stored_file(store, res, name)
        parts, start = [], 0
        for i in range(f.metadata.num_row_groups):
            n = f.metadata.row_group(i).num_rows
            if start < hi and start + n > lo:
                g = _row_group(store, res, name, f, i)
                parts.append(g.slice(max(lo - start, 0), min(hi, start + n) - max(lo, start)))
            start += n
            if start >= hi:
                break
        if not parts:
            t = f.schema_arrow.empty_table()
        else:
            t = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    if any(c.num_chunks > 1 for c in t.columns):
        t = t.combine_chunks()
    return Rows(t)


#: Bump when what a cut's memo holds changes meaning (the slice checksum, the memo's fields).
CUT_VERSION = 1


def cut_rows(store: Store, res: StageResult, cut: Cut, per: int,
             name: str = "rows") -> tuple[list[tuple[int, int]], list[str]]:
    """The shards ``cut(rows, per)`` makes of a stage's stored rows, and each shard's content
    checksum (what its key combines), remembered in the store under the rows' own content key
    and the cut: a rerun names every shard's key without reading or hashing the rows (the cut
    and the hashes of 1,563 shards were most of a cached 400k-row rerun). Both are functions of
    the content the key names, so the memo can be stale only if the cut's code changes, and
    that module's checksum is in the key.

    Example:
        >>> import tempfile, assay
        >>> from assay.modes import shard_bounds
        >>> store = Store(tempfile.mkdtemp())
        >>> r = assay.rows(["a", "b", "c"], [["x", "y"], ["z"], ["v"]], [[1, 0], [1], [0]])
        >>> res = cached_stage(store, "filter-rows", inputs=[], params={},
        ...                    compute=lambda: ({"rows": r}, {"rows": len(r)}))
        >>> bounds, sums = cut_rows(store, res, shard_bounds, 2)
        >>> bounds, sums[0] == load_slice(store, res, 0, 2).checksum()
        ([(0, 2), (2, 4)], True)
        >>> cut_rows(store, res, shard_bounds, 2) == (bounds, sums)  # from the memo
        True
    """
    from assay.hashing import code_checksum

    ref_name = "assay-cut/" + combine("cut", CUT_VERSION, res.outputs[name], per,
                                      f"{cut.__module__}.{cut.__qualname__}",
                                      code_checksum(cut.__module__))
    ref = store.get_ref(ref_name)
    doc = store.get_json(ref["blob"]) if ref is not None else None
    if (isinstance(doc, dict) and isinstance(doc.get("bounds"), list)
            and isinstance(doc.get("checksums"), list)
            and len(doc["bounds"]) == len(doc["checksums"])):
        return [(int(lo), int(hi)) for lo, hi in doc["bounds"]], [str(c) for c in doc["checksums"]]
    bounds = cut(load_columns(store, res, ["task_id"], name), per)  # the cut reads task ids
    sums = [load_slice(store, res, lo, hi, name).checksum() for lo, hi in bounds]
    blob = store.put_json({"bounds": [list(b) for b in bounds], "checksums": sums})
    store.set_ref(ref_name, blob, {"cut": res.label, "shards": len(bounds)})
    return bounds, sums


class ShardRows:
    """A shard's rows of a stage's stored rows: its checksum (the cut's, or read and hashed)
    without reading them, and the rows themselves only when asked (a cached shard never
    decodes them)."""

    def __init__(self, store: Store, res: StageResult, bounds: tuple[int, int],
                 checksum: str | None = None, name: str = "rows") -> None:
        self._store, self._res, self._name = store, res, name
        self.bounds, self._checksum = bounds, checksum

    @functools.cached_property
    def rows(self) -> Rows:
        lo, hi = self.bounds
        return load_slice(self._store, self._res, lo, hi, self._name)

    def checksum(self) -> str:
        if self._checksum is None:
            self._checksum = self.rows.checksum()
        return self._checksum


def concat_rows(store: Store, parts: Sequence[StageResult],
                columns: Sequence[str] | None = None) -> Rows:
    """The rows of several shards of one source, in shard order; ``columns``: only those (the
    ones the shards have), each shard's other columns dropped as it is read."""
    if columns is None:
        tables = list(shard_tables(store, parts))
        return Rows(pa.concat_tables(tables)) if len(tables) > 1 else Rows(tables[0])
    # only those columns decoded: a shard's others (its text) never enter the process
    tables = [_columns_of(store, p, columns) for p in parts]
    return stored_columns(pa.concat_tables(tables) if len(tables) > 1 else tables[0])


def _columns_of(store: Store, res: StageResult, columns: Sequence[str], name: str = "rows",
                keep: bool = False) -> pa.Table:
    """The ``columns`` a stage's stored table has of those asked, read alone (verified);
    ``keep``: its file kept for the reads that follow (a source's table, not a shard's)."""
    whole = _TABLES.get((store.location, res.outputs[name]))
    if whole is not None:
        return whole.select([c for c in columns if c in whole.column_names])
    if keep:
        f = _stored_file(store, res, name)
    else:
        data = store.get_bytes(res.outputs[name])
        if data is None:
            raise _vanished(store, res, name)
        f = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
    have = set(f.schema_arrow.names)
    # no reader threads: see Store.get_table
    return f.read(columns=[c for c in columns if c in have], use_threads=False)


def shard_tables(store: Store, parts: Sequence[StageResult]) -> Iterator[pa.Table]:
    """The tables of several shards of one source, in shard order, read one at a time (a pass
    over a source's rows that holds one shard, not all of them)."""
    for p in parts:
        yield load_rows(store, p).to_arrow()


def graded_checksums(
    graded: Mapping[str, Sequence[StageResult]], names: Sequence[str]
) -> list[object]:
    """``[[source, [shard rows checksums]], ...]``: the input checksums of a stage that reads
    the graded rows of ``names``."""
    return [[n, [p.checksums["rows"] for p in graded[n]]] for n in names]


def load_doc(store: Store, res: StageResult, name: str) -> Any:
    d = store.get_json(res.outputs[name])
    if d is None:
        raise StoreVanishedError(f"{res.label}: output {name!r} vanished from {store.location} "
                                 "after it was computed")
    return d


def summarize(results: Sequence[StageResult]) -> str:
    """``cached (n): a, b`` and ``computed (n): c`` over stage labels, in order; a stage's
    shards of one source named together when more than a few (a line, not one name per shard
    of a 4M-row run).

    Example:
        >>> rs = [StageResult("grade", f"m shard {i}/9", "k", {}, {}, cached=i != 4)
        ...       for i in range(1, 10)]
        >>> print(summarize(rs))
        cached (8): grade[m shards 1-3, 5-9 of 9]
        computed (1): grade[m shard 4/9]
    """
    cached = _named([r for r in results if r.cached])
    fresh = _named([r for r in results if not r.cached])
    n_cached = sum(r.cached for r in results)
    return (f"cached ({n_cached}): {', '.join(cached) or '-'}\n"
            f"computed ({len(results) - n_cached}): {', '.join(fresh) or '-'}")


def shard_label(source: str, index: int, count: int) -> str:
    """Shard ``index`` (from 0) of ``count`` of a source, as its stage results are labelled:
    ``a shard 3/8``; a node's id is ``stage[label]``."""
    return f"{source} shard {index + 1}/{count}"


def shards_label(stage: str, source: str, ranges: str, count: int) -> str:
    """Several shards of one stage and source named at once: ``grade[a shards 1-16 of 40]``."""
    return f"{stage}[{source} shards {ranges} of {count}]"


#: :func:`shard_label` read back: (source, number from 1, count)
_SHARD_LABEL = re.compile(r"(.*) shard (\d+)/(\d+)")


def _named(results: Sequence[StageResult]) -> list[str]:
    """``stage[label]`` per result; more than 4 shards of one stage and source as one
    ``stage[source shards 1-700, 702-900 of 900]`` (at most 4 ranges, then ``...``)."""
    order: list[tuple[str, str, str] | str] = []
    shards: dict[tuple[str, str, str], list[int]] = {}
    for r in results:
        m = _SHARD_LABEL.fullmatch(r.label)
        if m is None:
            order.append(f"{r.stage}[{r.label}]")
            continue
        group = (r.stage, m[1], m[3])
        if group not in shards:
            shards[group] = []
            order.append(group)
        shards[group].append(int(m[2]))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        stage, source, count = item
        idx = sorted(shards[item])
        if len(idx) <= 4:
            out += [f"{stage}[{shard_label(source, i - 1, int(count))}]" for i in idx]
            continue
        ranges: list[list[int]] = []
        for i in idx:
            if ranges and ranges[-1][1] == i - 1:
                ranges[-1][1] = i
            else:
                ranges.append([i, i])
        text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:4])
        out.append(shards_label(stage, source, text + (", ..." if len(ranges) > 4 else ""),
                                int(count)))
    return out
