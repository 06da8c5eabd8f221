"""Completion keys, per-sample seeds, and the per-shard journal completions are committed to.

A journal is an append-only JSON-lines file in the store; a SIGKILL loses only requests in flight.

A shard is one generation config (model identity, backend, API, parameters); its journal lives at
``<store root>/journals/<shard hex>.jsonl``. Each line is one completion record with its key and
a checksum of the line, written with one ``write`` on an ``O_APPEND`` descriptor as the answer
arrives; the file is fsynced at most every ``FSYNC_EVERY_S`` seconds and when the run ends, so a
killed process loses nothing the kernel got, and a power loss at most the last second. A torn
line (a write cut short by a kill or a full disk) is skipped on read, and a writer that finds
the file not ending in a newline starts its first line on a new one, so the torn piece stays a
line of its own (:func:`line_state` tells it from corruption). A later line for a key supersedes
an earlier one, which is how a retried error row becomes a completion.

On an object store (no append there) the lines gather in memory and go out as one new object per
flush, ``journals/<shard hex>/<time>-<writer>.jsonl``, at most every ``FSYNC_EVERY_S`` seconds
and at close; a reader joins the segments in name order. A killed writer loses its unflushed
lines, which are asked again.

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> j = Journal(Store(tempfile.mkdtemp()), "gshard:abc")
    >>> j.append({"key": "gen:1", "completion": "hi", "status": "ok"})
    >>> j.close(); Journal(j.store, "gshard:abc").load()["gen:1"]["completion"]
    'hi'
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from assay.hashing import canonical_json, content_hash
from assay.store import CorruptEntryWarning, Store
from assay.store_files import full_error

FSYNC_EVERY_S = 1.0


def sample_seed(seed: int, rendered: Any, index: int) -> int:
    """The seed of one sample: derived from the study seed, the rendered prompt and the sample
    index, so the k samples of a prompt differ and each is reproducible on its own.

    Example:
        >>> sample_seed(0, "hi", 0) == sample_seed(0, "hi", 0) != sample_seed(0, "hi", 1)
        True
    """
    return int(content_hash([seed, rendered, index], "seed").split(":", 1)[1][:8], 16) & 0x7FFFFFFF


def completion_key(config: dict[str, Any], rendered: Any, seed: int, index: int) -> str:
    """The cache key of one completion: the shard config (model identity, backend, base URL,
    API, every sampling parameter), the rendered prompt, the per-sample seed and the index."""
    return content_hash({"config": config, "rendered": rendered, "seed": seed, "index": index},
                        "gen")


def shard_id(config: dict[str, Any]) -> str:
    """The journal a generation config writes to."""
    return content_hash(config, "gshard")


def _line(record: dict[str, Any]) -> bytes:
    body = canonical_json(record)
    return (b'{"sum":"' + hashlib.sha256(body).hexdigest()[:16].encode() + b'","rec":' + body
            + b"}\n")


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: a write the disk cuts short (it fills up) returns a short count,
    and the rest is written again (raising ENOSPC) instead of being dropped unnoticed."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def line_ok(raw: bytes) -> bool:
    """Whether one journal line is intact (parses, and its checksum matches its record)."""
    try:
        doc = json.loads(raw)
        return hashlib.sha256(canonical_json(doc["rec"])).hexdigest()[:16] == doc["sum"]
    except (ValueError, KeyError, TypeError):
        return False


_HEAD = b'{"sum":"'
#: JSON literals (and a number's sign) a cut can leave half written
_LITERALS = ("true", "false", "null", "-")


def _cut_short(raw: bytes) -> bool:
    """Whether ``raw`` is the beginning of a journal line that was cut off (its bytes end before
    the line does), as opposed to a whole line that was damaged."""
    if not raw or raw[:len(_HEAD)] != _HEAD[:len(raw)]:
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # cut inside a character: only its last bytes are missing
        if e.end < len(raw) or len(raw) - e.start > 3:
            return False
        text = raw[:e.start].decode("utf-8")
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        rest = text[e.pos:]
        return (e.pos >= len(text) or e.msg.startswith("Unterminated string")
                or (e.msg.startswith("Expecting value")
                    and any(lit.startswith(rest) for lit in _LITERALS)))
    return False  # whole JSON: a damaged line, not a cut one


def line_state(raw: bytes) -> tuple[str, bytes | None]:
    """What one journal line is: ``("ok", raw)``; ``("torn", intact)``: a write cut short
    (``intact``: a whole line glued after it by a writer before torn tails were ended with a
    newline, else None); or ``("corrupt", None)``: a whole line that fails its checksum.

    Example:
        >>> good = _line({"key": "k"}).rstrip()
        >>> line_state(good)[0], line_state(good[:20])[0], line_state(good[:20] + good)[0]
        ('ok', 'torn', 'torn')
        >>> line_state(good.replace(b'"k"', b'"K"'))
        ('corrupt', None)
    """
    if line_ok(raw):
        return "ok", raw
    i = raw.rfind(_HEAD)
    if i > 0 and line_ok(raw[i:]) and _cut_short(raw[:i]):
        return "torn", raw[i:]
    return ("torn", None) if _cut_short(raw) else ("corrupt", None)


class Journal:
    """The append-only journal of one shard (see module docstring). Thread-safe appends."""

    def __init__(self, store: Store, shard: str) -> None:
        self.store = store
        hexd = shard.split(":", 1)[-1]
        self.rel = f"journals/{hexd}.jsonl"
        #: the journal file (a local store), or its URL prefix on an object store
        self.path: Path | str = store.where(self.rel) if store.remote else store.root / self.rel
        self._fd: int | None = None
        self._pending: list[bytes] = []  # object store: lines not yet flushed
        self._writer = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._synced = time.monotonic()

    def load(self) -> dict[str, dict[str, Any]]:
        """Every committed record by key (the last line per key wins); torn lines skipped."""
        if self.store.remote:
            # segments in name order (their names start with the flush time): later wins
            segs = [e for e in self.store.entries(self.rel[:-len(".jsonl")])
                    if e.rel.endswith(".jsonl")]
            data = b"".join(self.store.read_file(e.rel) or b"" for e in segs)
        else:
            data = self.store.read_file(self.rel) or b""
        if not data:
            return {}
        out: dict[str, dict[str, Any]] = {}
        bad = 0
        for raw in data.split(b"\n"):
            if not raw:
                continue
            state, whole = line_state(raw)
            if state != "ok":
                bad += 1
            if whole is None:
                continue
            rec = json.loads(whole)["rec"]
            out[rec["key"]] = rec
        if bad:
            warnings.warn(f"journal {self.path}: {bad} torn or corrupt line(s) skipped (a killed "
                          "run's last write); those completions are asked again",
                          CorruptEntryWarning, stacklevel=2)
        return out

    def append(self, record: dict[str, Any]) -> None:
        """Commit one record: one write on an O_APPEND descriptor, fsynced at most every second."""
        line = _line(record)
        with self._lock:
            if self.store.remote:
                self.store.check()  # the run's store failed: this answer cannot be kept
                self._pending.append(line)
                if time.monotonic() - self._synced >= FSYNC_EVERY_S:
                    self._flush()
                return
            path = self.store.root / self.rel
            try:
                if self._fd is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
                    end = os.fstat(self._fd).st_size
                    if end and os.pread(self._fd, 1, end - 1) != b"\n":
                        # a torn last line (a kill, a full disk): ours starts on a new line,
                        # so neither is glued to the other
                        line = b"\n" + line
                _write_all(self._fd, line)
                now = time.monotonic()
                if now - self._synced >= FSYNC_EVERY_S:
                    os.fsync(self._fd)
                    self._synced = now
            except OSError as e:
                self._drop()  # reopened (and its tail checked) by the next append
                full = full_error(self.store.location, path, e)
                if full is None:
                    raise
                raise full from e

    def close(self) -> None:
        """Fsync and close (idempotent)."""
        with self._lock:
            self._flush()
            if self._fd is not None:
                try:
                    os.fsync(self._fd)  # a full disk may show here first
                except OSError as e:
                    full = full_error(self.store.location, self.store.root / self.rel, e)
                    if full is None:
                        raise
                    raise full from e
                finally:
                    self._drop()

    def _drop(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _flush(self) -> None:
        """Object store: write the pending lines as one new segment (call under the lock)."""
        self._synced = time.monotonic()
        if not self._pending:
            return
        seg = f"{self.rel[:-len('.jsonl')]}/{time.time_ns():020d}-{self._writer}.jsonl"
        self.store.write_file(seg, b"".join(self._pending))
        self._pending = []
