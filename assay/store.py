"""Content-addressed store: Arrow tables as Parquet, small documents as JSON, by checksum.

Blobs are named by the SHA-256 of their bytes and verified on every read; refs name blobs.

Layout under the root (default ``$ASSAY_STORE`` or ``./.assay``)::

    blobs/<2 hex>/<64 hex>.<parquet|json|bin>   immutable, named by sha256 of the file bytes
    refs/<2 hex>/<sha256 of name>.json          {"name":..., "blob":..., "meta":...}

Every write goes to a unique temp file in the same directory, is fsynced, then ``os.replace``d
into place, so a reader sees either nothing or a whole file; two writers of the same key both
write complete identical bytes and the last rename wins. A blob whose bytes do not match its
name (truncated, bit-flipped) is reported through ``warnings`` and treated as missing: it is
never returned. Refs are the cache layer's pointers: a ref to a missing or corrupt blob is a
miss, so a killed run leaves at worst an unreferenced blob behind.

Lifecycle (see :mod:`assay.upkeep`): reading a ref touches its mtime (its last use), a running
study holds :meth:`Store.in_use` (a shared ``flock`` on ``<root>/lock``) and ``gc`` takes the
lock exclusively, so an entry a running study may still read is never removed.

Example:
    >>> import tempfile, pyarrow as pa
    >>> s = Store(tempfile.mkdtemp())
    >>> key = s.put_table(pa.table({"x": [1, 2]}))
    >>> s.get_table(key).column("x").to_pylist()
    [1, 2]
    >>> s.set_ref("stage:demo", key); s.get_ref("stage:demo")["blob"] == key
    True
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import mmap
import os
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from assay.errors import StoreError
from assay.hashing import canonical_json

_EXT = {"parquet", "json", "bin"}
#: file suffix -> key kind (the inverse of ``Store._blob_path``'s table).
KIND_OF_EXT = {"parquet": "tbl", "json": "doc", "bin": "bin"}


class CorruptEntryWarning(UserWarning):
    """A store entry failed verification and was treated as missing."""


def default_root() -> Path:
    """``$ASSAY_STORE`` when set, else ``./.assay``."""
    return Path(os.environ.get("ASSAY_STORE") or ".assay")


def atomic_write(path: Path, data: bytes | Sequence[Any], *, durable: bool = True) -> None:
    """Write ``data`` (bytes, or a sequence of buffers written one after another) to ``path`` so a
    reader sees the old file or the whole new one, never a part. ``durable=False`` skips the
    fsync: after a power loss the file may be lost or torn (the store's verified reads then
    treat it as missing), for data that is cheaper to rebuild than to sync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            parts: Sequence[Any] = (
                [data] if isinstance(data, (bytes, bytearray, memoryview)) else data)
            for part in parts:
                f.write(part)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class Store:
    """A content-addressed store rooted at a directory (see module docstring)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -- blobs -------------------------------------------------------------------------------
    def _blob_path(self, key: str) -> Path:
        try:
            kind, hexd = key.split(":", 1)
            ext = {"tbl": "parquet", "doc": "json", "bin": "bin"}[kind]
        except (ValueError, KeyError):
            raise StoreError(
                f"not a store key: {key!r}; keys look like 'tbl:<sha256>', 'doc:<sha256>' or "
                "'bin:<sha256>' and come from put_table/put_json/put_bytes"
            ) from None
        if len(hexd) != 64 or any(c not in "0123456789abcdef" for c in hexd):
            raise StoreError(f"not a store key: {key!r} (expected 64 lowercase hex digits)")
        return self.root / "blobs" / hexd[:2] / f"{hexd}.{ext}"

    def _put(self, data: bytes, kind: str) -> str:
        key = f"{kind}:{hashlib.sha256(data).hexdigest()}"
        path = self._blob_path(key)
        if not self._verified(path, key):
            atomic_write(path, data)
        return key

    def _verified(self, path: Path, key: str) -> bytes | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != key.split(":", 1)[1]:
            warnings.warn(
                f"store entry {path} is corrupt (checksum mismatch, {len(data)} bytes); "
                "treated as missing and will be rewritten",
                CorruptEntryWarning,
                stacklevel=3,
            )
            return None
        return data

    def has(self, key: str) -> bool:
        """True when ``key`` is present and verifies."""
        return self._verified(self._blob_path(key), key) is not None

    def put_bytes(self, data: bytes) -> str:
        """Store raw bytes; returns ``bin:<sha256>``."""
        return self._put(bytes(data), "bin")

    def put_parts(self, parts: Sequence[Any], *, durable: bool = True) -> str:
        """Store the concatenation of ``parts`` (bytes or contiguous arrays) without building it:
        hashed and written buffer by buffer; returns ``bin:<sha256>`` as ``put_bytes`` would.
        ``durable=False``: not fsynced (see :func:`atomic_write`).

        Example:
            >>> import tempfile, numpy as np
            >>> st = Store(tempfile.mkdtemp())
            >>> st.put_parts([b"ab", np.frombuffer(b"cd", dtype=np.uint8)]) == st.put_bytes(b"abcd")
            True
        """
        views = [memoryview(p).cast("B") for p in parts]
        h = hashlib.sha256()
        for v in views:
            h.update(v)  # releases the GIL on large buffers
        key = f"bin:{h.hexdigest()}"
        path = self._blob_path(key)
        if not self._verified(path, key):
            atomic_write(path, views, durable=durable)
        return key

    def map_fresh(self, key: str) -> mmap.mmap:
        """A read-only memory map of the blob under ``key``, *not* verified: for a blob this
        process has just written (its pages are still in the page cache, so mapping them costs
        no read and no copy). Anything read back later goes through :meth:`get_bytes`.
        """
        path = self._blob_path(key)
        with open(path, "rb") as f:
            # MAP_POPULATE maps every page up front: one call instead of a fault per page
            return mmap.mmap(f.fileno(), 0,
                             flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                             prot=mmap.PROT_READ)

    def get_bytes(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None when missing or corrupt."""
        return self._verified(self._blob_path(key), key)

    def put_json(self, doc: Any) -> str:
        """Store a JSON-like document in canonical form; returns ``doc:<sha256>``."""
        return self._put(canonical_json(doc), "doc")

    def get_json(self, key: str) -> Any | None:
        """The document under ``key``, or None when missing or corrupt."""
        data = self._verified(self._blob_path(key), key)
        return None if data is None else json.loads(data)

    def put_table(self, table: pa.Table) -> str:
        """Store an Arrow table as Parquet (zstd); returns ``tbl:<sha256 of the file>``."""
        if not isinstance(table, pa.Table):
            raise StoreError(f"put_table needs a pyarrow.Table, got {type(table).__name__}")
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return self._put(buf.getvalue(), "tbl")

    def get_table(self, key: str) -> pa.Table | None:
        """The table under ``key``, or None when missing or corrupt."""
        data = self._verified(self._blob_path(key), key)
        if data is None:
            return None
        # No reader threads: Arrow's parquet thread pools can abort the process at interpreter
        # exit ("terminate called without an active exception", apache/arrow#34314); the bytes
        # are already in memory, so threads buy little here. ParquetFile, not read_table: the
        # latter goes through pyarrow.dataset, which imports pandas (start-up time for nothing).
        return pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).read(use_threads=False)

    # -- refs (named pointers, e.g. a stage's cache key -> its output blob) ------------------
    def _ref_path(self, name: str) -> Path:
        h = hashlib.sha256(name.encode("utf-8")).hexdigest()
        return self.root / "refs" / h[:2] / f"{h}.json"

    def set_ref(self, name: str, blob: str, meta: dict[str, Any] | None = None) -> None:
        """Point ``name`` at ``blob`` (which must already be stored), atomically."""
        if not self.has(blob):
            raise StoreError(f"set_ref({name!r}): blob {blob} is not in the store; put it first")
        doc = {"name": name, "blob": blob, "meta": meta or {}}
        atomic_write(self._ref_path(name), canonical_json(doc))

    def get_ref(self, name: str) -> dict[str, Any] | None:
        """``{"name", "blob", "meta"}`` for ``name``, or None when absent, unreadable, or the blob
        it names is missing or corrupt (a ref is only as good as its blob)."""
        path = self._ref_path(name)
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            warnings.warn(f"store ref {path} is unreadable; treated as missing",
                          CorruptEntryWarning, stacklevel=2)
            return None
        if not isinstance(doc, dict) or doc.get("name") != name:
            return None
        try:
            if not self.has(doc.get("blob") or ""):
                return None
        except StoreError:
            return None
        # the ref's mtime records its last use: gc keeps what the kept runs' window used
        with contextlib.suppress(OSError):
            os.utime(path)
        return doc

    def delete_ref(self, name: str) -> None:
        """Remove a ref if present."""
        try:
            self._ref_path(name).unlink()
        except FileNotFoundError:
            pass

    # -- lifecycle: locks and listings (used by assay.upkeep) ------------------------------
    @property
    def lock_path(self) -> Path:
        return self.root / "lock"

    @contextlib.contextmanager
    def _flock(self, mode: int, wait: float | None) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = None if wait is None else time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        what = "a store gc" if mode == fcntl.LOCK_SH else "a running study"
                        raise StoreError(
                            f"{self.root} is locked by {what} (lock file {self.lock_path}); "
                            f"waited {wait:.0f} s: retry when it has finished") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock (also when a process dies)

    def in_use(self, wait: float | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold a shared lock while a study reads and writes this store: ``gc`` (exclusive)
        waits for every holder, and a study started during a ``gc`` waits for it to finish.
        The kernel drops the lock when the process dies, so a killed run never blocks gc.

        Example:
            >>> import tempfile
            >>> st = Store(tempfile.mkdtemp())
            >>> with st.in_use(), st.in_use():  # shared: any number of studies at once
            ...     pass
        """
        return self._flock(fcntl.LOCK_SH, wait)

    def exclusive(self, wait: float | None = 0.0) -> contextlib.AbstractContextManager[None]:
        """The lock ``gc`` holds: no study is running on this store while it is held. Raises
        StoreError after ``wait`` seconds (None: wait forever) when studies hold it."""
        return self._flock(fcntl.LOCK_EX, wait)

    def blob_files(self) -> Iterator[tuple[str, Path]]:
        """``(key, path)`` of every blob file (verified or not), in path order."""
        for path in sorted((self.root / "blobs").glob("*/*")):
            hexd, _, ext = path.name.partition(".")
            if ext in KIND_OF_EXT and len(hexd) == 64 and path.parent.name == hexd[:2]:
                yield f"{KIND_OF_EXT[ext]}:{hexd}", path

    def ref_files(self) -> Iterator[Path]:
        """Every ref file, in path order."""
        yield from sorted(p for p in (self.root / "refs").glob("*/*.json")
                          if not p.name.startswith("."))

    def journal_files(self) -> Iterator[Path]:
        """Every completion journal (``journals/<shard>.jsonl``: generations and judge calls,
        see :mod:`assay.models.journal`), in path order."""
        yield from sorted((self.root / "journals").glob("*.jsonl"))

    def temp_files(self) -> Iterator[Path]:
        """Temp files of writers (live, or killed mid-write) under blobs/ and refs/."""
        for sub in ("blobs", "refs"):
            yield from sorted((self.root / sub).glob("*/.*.tmp"))
