"""Completion keys, per-sample seeds, and the journals completions are committed to and found in.

A journal is an append-only JSON-lines file in the store; a SIGKILL loses only requests in flight.

A journal holds one generation config (model identity, backend, API, parameters): it lives at
``<store root>/journals/<config hex>.jsonl``, whatever rows or shards asked, so a completion is
found by its own key (:func:`completion_key`) however the data around it changed. A process reads
a journal once and then only what was appended since (:meth:`Journal.lookup`); a key missing
there is looked up in every other journal of the store (:func:`find_elsewhere`), which is how
journals written per shard by earlier versions keep serving. Each line is one completion record
with its key and a checksum of the line, written with one ``write`` on an ``O_APPEND``
descriptor as the answer arrives (two shards appending at once never interleave a line); the
file is fsynced at most every ``FSYNC_EVERY_S`` seconds and when the run ends, so a killed
process loses nothing the kernel got, and a power loss at most the last second. A torn line (a
write cut short by a kill or a full disk) is skipped on read, and a writer that finds the file
not ending in a newline starts its first line on a new one, so the torn piece stays a line of its
own (:func:`line_state` tells it from corruption). A later line for a key supersedes an earlier
one, which is how a retried error row becomes a completion. A record :func:`assay.models.generate`
writes also carries ``batch`` (the call that asked it) and ``tally`` (that call's request counts
so far): a killed call never reports its counts, and a later call counts them from these.

On an object store (no append there) the lines gather in memory and go out as one new object per
flush, ``journals/<shard hex>/<time>-<writer>.jsonl``; a reader joins the segments in name order.
An answer is flushed at most ``FSYNC_EVERY_S`` seconds after it was appended (by the next append
or by a timer, whichever comes first) and at close, so a killed writer loses at most the last
``FSYNC_EVERY_S`` seconds of answers (plus a PUT in flight, bounded by the store's
``PUT_WAIT_S``), which are asked again; a store that stops answering fails the run at the next
append or flush, and the answers since the last published segment are lost with it.

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> j = Journal(Store(tempfile.mkdtemp()), "gshard:abc")
    >>> j.append({"key": "gen:1", "completion": "hi", "status": "ok"})
    >>> j.close(); Journal(j.store, "gshard:abc").load()["gen:1"]["completion"]
    'hi'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.hashing import canonical_json, content_hash
from assay.store import CorruptEntryWarning, Store
from assay.store_files import full_error

if TYPE_CHECKING:
    from assay.models.base import Rendered

FSYNC_EVERY_S = 1.0


def sample_seed(seed: int, rendered: Rendered, index: int) -> int:
    """The seed of one sample: derived from the study seed, the rendered prompt and the sample
    index, so the k samples of a prompt differ and each is reproducible on its own.

    Example:
        >>> sample_seed(0, "hi", 0) == sample_seed(0, "hi", 0) != sample_seed(0, "hi", 1)
        True
    """
    return int(content_hash([seed, rendered, index], "seed").split(":", 1)[1][:8], 16) & 0x7FFFFFFF


def completion_key(config: Mapping[str, object], rendered: object, seed: int, index: int) -> str:
    """The cache key of one completion: the shard config (model identity, backend, base URL,
    API, every sampling parameter), the rendered prompt, the per-sample seed and the index."""
    return content_hash({"config": config, "rendered": rendered, "seed": seed, "index": index},
                        "gen")


def shard_id(config: Mapping[str, object]) -> str:
    """The journal a generation config writes to."""
    return content_hash(config, "gshard")


def _line(record: Mapping[str, object]) -> bytes:
    body = canonical_json(record)
    return (b'{"sum":"' + hashlib.sha256(body).hexdigest()[:16].encode() + b'","rec":' + body
            + b"}\n")


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: a write the disk cuts short (it fills up) returns a short count,
    and the rest is written again (raising ENOSPC) instead of being dropped unnoticed."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


#: the layout _line writes: head, a 16-hex sum, then the record's canonical bytes
_HEAD = b'{"sum":"'
_SUM_END = len(_HEAD) + 16
_MID = b'","rec":'
_BODY_AT = _SUM_END + len(_MID)


def line_ok(raw: bytes) -> bool:
    """Whether one journal line is intact (parses, and its checksum matches its record)."""
    return _checked(raw) is not None


def _checked(raw: bytes) -> dict[str, Any] | None:
    """The record of an intact journal line (parsed once), else None."""
    # A line as _line writes it carries its record's canonical bytes verbatim: checking the sum
    # on those bytes spares re-canonicalizing every record read (a third of a generate run's
    # hashing at 8k samples). Any other layout of the same record takes the general check.
    body = raw[_BODY_AT:-1]
    if (raw[:len(_HEAD)] == _HEAD and raw[_BODY_AT - len(_MID):_BODY_AT] == _MID
            and raw[-1:] == b"}"
            and hashlib.sha256(body).hexdigest()[:16].encode() == raw[len(_HEAD):_SUM_END]):
        try:
            rec = json.loads(body)
        except ValueError:
            return None
        return rec if isinstance(rec, dict) else None
    try:
        doc = json.loads(raw)
        ok = hashlib.sha256(canonical_json(doc["rec"])).hexdigest()[:16] == doc["sum"]
    except (ValueError, KeyError, TypeError):
        return None
    return doc["rec"] if ok and isinstance(doc["rec"], dict) else None


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


def _read_line(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """(the record to keep or None, :func:`line_state`'s state) of one line: an intact line is
    parsed once, here, not again by its reader."""
    rec = _checked(raw)
    if rec is not None:
        return rec, "ok"
    state, whole = line_state(raw)
    return (None if whole is None else json.loads(whole)["rec"]), state


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
        #: object store: the pending timer's flush, and its failure until raised
        self._timer: threading.Timer | None = None
        self._failed: Exception | None = None

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
            rec, state = _read_line(raw)
            if state != "ok":
                bad += 1
            if rec is not None:
                out[rec["key"]] = rec
        if bad:
            warnings.warn(f"journal {self.path}: {bad} torn or corrupt line(s) skipped (a killed "
                          "run's last write); those completions are asked again",
                          CorruptEntryWarning, stacklevel=2)
        return out

    def lookup(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The committed records of those of ``keys`` this journal holds (an ``ok`` record is
        never superseded by a later error for its key). The first call in a process reads the
        journal; later calls read only what was appended since, so the shards of a study that
        share a journal do not each parse it whole.

        Example:
            >>> import tempfile
            >>> from assay.store import Store
            >>> j = Journal(Store(tempfile.mkdtemp()), "gshard:abc")
            >>> j.append({"key": "gen:1", "status": "ok"}); j.close()
            >>> sorted(j.lookup(["gen:1", "gen:2"]))
            ['gen:1']
        """
        seen = _seen(self.store, self.rel)
        with seen.lock:
            bad = _catch_up(self.store, self.rel, seen)
            out = {k: seen.records[k] for k in keys if k in seen.records}
        if bad:
            warnings.warn(f"journal {self.path}: {bad} torn or corrupt line(s) skipped (a killed "
                          "run's last write); those completions are asked again",
                          CorruptEntryWarning, stacklevel=2)
        return out

    def append(self, record: Mapping[str, object]) -> None:
        """Commit one record: one write on an O_APPEND descriptor, fsynced at most every second."""
        line = _line(record)
        with self._lock:
            if self.store.remote:
                self.store.check()  # the run's store failed: this answer cannot be kept
                if self._failed is not None:  # the timer's flush failed: say so here
                    raise self._failed
                self._pending.append(line)
                if time.monotonic() - self._synced >= FSYNC_EVERY_S:
                    self._flush()
                elif self._timer is None:
                    # a quiet spell after this answer (a slow request, the last answers of a
                    # shard) must not keep it unpublished: a timer flushes it within the bound
                    self._timer = threading.Timer(FSYNC_EVERY_S, self._flush_later)
                    self._timer.daemon = True
                    self._timer.start()
                return
            path = self.store.root / self.rel
            try:
                if self._fd is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
                    end = os.fstat(self._fd).st_size
                    if end and os.pread(self._fd, 1, end - 1) != b"\n":
                        # a torn last line (a kill, a full disk): ours starts on a new line,
                        # so neither is glued to the other. Readers skip an unended last line
                        # silently (it may be a write in flight), so the torn one is told here
                        line = b"\n" + line
                        warnings.warn(f"journal {path}: 1 torn line (a killed run's last write) "
                                      "skipped; its completion is asked again",
                                      CorruptEntryWarning, stacklevel=2)
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
            if self._failed is not None:
                failed, self._failed = self._failed, None
                raise failed
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

    def _flush_later(self) -> None:
        """The timer's flush: what was appended since the last flush goes out now."""
        with self._lock:
            self._timer = None
            try:
                self._flush()
            except Exception as e:  # kept for the next append or close, which raise it
                self._failed = e

    def _flush(self) -> None:
        """Object store: write the pending lines as one new segment (call under the lock)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._synced = time.monotonic()
        if not self._pending:
            return
        seg = f"{self.rel[:-len('.jsonl')]}/{time.time_ns():020d}-{self._writer}.jsonl"
        self.store.write_file(seg, b"".join(self._pending))
        self._pending = []


# ---------------------------------------------------------------- what this process has read

class _Seen:
    """The records this process has read of one journal, and how far it read: a local file's
    inode and byte offset (up to its last newline), or an object store's segment names."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self, ino: int | None = None) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.offset = 0
        self.ino = ino
        self.segments: set[str] = set()


_SEEN: dict[tuple[str, str], _Seen] = {}
_SEEN_LOCK = threading.Lock()


def _seen(store: Store, rel: str) -> _Seen:
    with _SEEN_LOCK:
        return _SEEN.setdefault((store.describe(), rel), _Seen())


def _merge(records: dict[str, dict[str, Any]], rec: dict[str, Any]) -> None:
    """A later line for a key wins, except an error over an ok record: two shards that share a
    prompt may both ask it, and one's failure must not hide the other's completion."""
    prev = records.get(rec["key"])
    if prev is None or prev.get("status") != "ok" or rec.get("status") == "ok":
        records[rec["key"]] = rec


def _parse_into(data: bytes, records: dict[str, dict[str, Any]]) -> int:
    """Merge the whole lines of ``data`` into ``records``; how many were torn or corrupt."""
    bad = 0
    for raw in data.split(b"\n"):
        if not raw:
            continue
        rec, state = _read_line(raw)
        if state != "ok":
            bad += 1
        if rec is not None:
            _merge(records, rec)
    return bad


def _read_from(path: Path, offset: int, seen: _Seen | None = None) -> tuple[int, bytes] | None:
    """(inode, bytes from ``offset`` to the end) of a local file, None when it is absent; from 0
    when it is another file than ``seen`` read (recreated) or shorter than ``offset``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if seen is not None and (st.st_ino != seen.ino or st.st_size < seen.offset):
            seen.reset(st.st_ino)
            offset = 0
        chunks, at = [], offset
        while at < st.st_size:  # pread returns at most 2 GiB at a time
            got = os.pread(fd, st.st_size - at, at)
            if not got:
                break
            chunks.append(got)
            at += len(got)
        return st.st_ino, b"".join(chunks)
    finally:
        os.close(fd)


def _catch_up(store: Store, rel: str, seen: _Seen) -> int:
    """Read what was committed to journal ``rel`` since ``seen`` last read it (call under its
    lock); how many torn or corrupt lines that held."""
    if store.remote:
        segs = [e.rel for e in store.entries(rel[:-len(".jsonl")]) if e.rel.endswith(".jsonl")]
        if not seen.segments <= set(segs):  # a segment went (gc): read them all again
            seen.reset()
        new = [r for r in segs if r not in seen.segments]
        # a segment's name starts with its flush time: read in name order, later wins
        parts = store.each(lambda r: store.read_file(r) or b"", new)
        bad = sum(_parse_into(d, seen.records) for d in parts)
        seen.segments.update(new)
        return bad
    got = _read_from(store.root / rel, seen.offset, seen)
    if got is None:
        seen.reset()
        return 0
    data = got[1]
    end = data.rfind(b"\n") + 1
    bad = _parse_into(data[:end], seen.records)
    seen.offset += end
    # an unended last line: a write in flight, or torn by a kill (whoever appends next ends it
    # and says so). Kept unread, so the next look reads it again; if whole, it counts now
    if data[end:] and line_ok(data[end:]):
        _merge(seen.records, json.loads(data[end:])["rec"])
    return bad


# ------------------------------------------------------------- a key in every other journal

#: the record key and an ok status as the canonical JSON of a journal line writes them: a quote
#: inside a string is always escaped, so neither matches inside a completion's text
_KEY_RE = re.compile(rb'[{,]"key":"([^"\\]*)"')
_OK = re.compile(rb'[{,]"status":"ok"[,}]')


class _Index:
    """Where the ok records of a store's journals are, by key: (file, line start, line end),
    and how far each file was read (local: inode and offset; object store: segment names)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: a key's short form (:func:`_short`) -> file number << 80 | line start << 40 | end:
        #: about 150 bytes a record in memory, where strings and tuples took twice that
        self.where: dict[bytes, int] = {}
        self.files: list[str] = []
        self.file_no: dict[str, int] = {}
        #: a local file: (inode, offset read to, its size and mtime as listed then)
        self.read: dict[str, tuple[int, int, int, float]] = {}
        self.segments: set[str] = set()

    def put(self, key: bytes, rel: str, lo: int, hi: int) -> None:
        no = self.file_no.get(rel)
        if no is None:
            no = self.file_no[rel] = len(self.files)
            self.files.append(rel)
        self.where[_short(key)] = no << 80 | lo << 40 | hi

    def get(self, key: str) -> tuple[str, int, int] | None:
        at = self.where.get(_short(key.encode()))
        if at is None:
            return None
        return self.files[at >> 80], (at >> 40) & (1 << 40) - 1, at & (1 << 40) - 1


def _short(key: bytes) -> bytes:
    """12 bytes of a key's hash (a collision only loses a hit: the line read is checked
    against the whole key, and the request is asked again)."""
    return hashlib.blake2b(key, digest_size=12).digest()


_INDEX: dict[str, _Index] = {}


def _index_lines(index: _Index, rel: str, data: bytes, base: int) -> int:
    """Index the whole lines of ``data`` (at byte ``base`` of ``rel``); the bytes indexed."""
    end = data.rfind(b"\n") + 1
    for m in _KEY_RE.finditer(data, 0, end):
        lo = data.rfind(b"\n", 0, m.start()) + 1
        hi = data.find(b"\n", m.end())
        if _OK.search(data, lo, hi):
            index.put(m.group(1), rel, base + lo, base + hi)
    return end


def _refresh(store: Store, index: _Index, skip: str) -> None:
    """Index what every journal but ``skip`` gained since the last look (call under the lock)."""
    if store.remote:  # segments never change once written
        stem = skip[:-len(".jsonl")] + "/"
        new = [e.rel for e in store.journal_entries() if e.rel not in index.segments
               and not e.rel.startswith(stem)]
        for r, data in zip(new, store.each(lambda r: store.read_file(r) or b"", new), strict=True):
            _index_lines(index, r, data, 0)
            index.segments.add(r)
        return
    for rel, size, mtime in _local_journals(store):
        if rel == skip:
            continue
        ino, offset, seen_size, seen_mtime = index.read.get(rel, (-1, 0, -1, -1.0))
        if (size, mtime) == (seen_size, seen_mtime):  # as listed last time: unchanged
            continue
        got = _read_from(store.root / rel, offset)
        if got is None:
            continue
        if got[0] != ino and offset:  # another file under the same name: from its start
            got = _read_from(store.root / rel, 0)
            if got is None:
                continue
            offset = 0
        index.read[rel] = (got[0], offset + _index_lines(index, rel, got[1], offset), size,
                           mtime)


def _local_journals(store: Store) -> list[tuple[str, int, float]]:
    """(path, size, mtime) of a local store's journals: one ``scandir`` (the generic listing
    builds a path object per file, 0.1 ms each: as much as the look it serves)."""
    out = []
    try:
        with os.scandir(store.root / "journals") as it:
            for d in it:
                if d.name.endswith(".jsonl") and not d.name.startswith("."):
                    with contextlib.suppress(FileNotFoundError):  # removed meanwhile (gc)
                        st = d.stat()
                        out.append((f"journals/{d.name}", st.st_size, st.st_mtime))
    except FileNotFoundError:
        return []
    return out


def _read_lines(path: Path, spans: list[tuple[int, int]]) -> list[bytes]:
    """Bytes ``lo:hi`` of a local file for each span, one open (b"" each when it is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return [b""] * len(spans)
    try:
        return [os.pread(fd, hi - lo, lo) for lo, hi in spans]
    finally:
        os.close(fd)


def find_elsewhere(store: Store, keys: Iterable[str], skip: str) -> dict[str, dict[str, Any]]:
    """The ok records of those of ``keys`` committed to any journal of ``store`` but ``skip``
    (a journal's store-relative path): journals an earlier assay wrote per shard of rows, or
    under a caller's ``journal=`` name. A key is the request's own checksum (config, prompt,
    seed, index), so any journal's record of it is the answer. The journals are indexed once
    per process, then only what they gained: one look answers all of a call's keys.

    Example:
        >>> import tempfile
        >>> from assay.store import Store
        >>> st = Store(tempfile.mkdtemp())
        >>> old = Journal(st, "gshard:ab"); old.append({"key": "gen:1", "status": "ok"})
        >>> old.close(); list(find_elsewhere(st, ["gen:1", "gen:2"], skip="journals/cd.jsonl"))
        ['gen:1']
    """
    keys = list(keys)
    if not keys:
        return {}
    with _SEEN_LOCK:
        index = _INDEX.setdefault(store.describe(), _Index())
    with index.lock:
        _refresh(store, index, skip)
        stem = skip[:-len(".jsonl")] + "/"
        found = {k: index.get(k) for k in keys}
        hits = {k: at for k, at in found.items()
                if at is not None and at[0] != skip and not at[0].startswith(stem)}
    by_file: dict[str, list[str]] = {}
    for k, (rel, _, _) in hits.items():
        by_file.setdefault(rel, []).append(k)
    out: dict[str, dict[str, Any]] = {}
    for rel, ks in by_file.items():
        spans = [hits[k][1:] for k in ks]
        if store.remote:  # a segment: small, read whole
            data = store.read_file(rel) or b""
            lines = [data[lo:hi] for lo, hi in spans]
        else:
            lines = _read_lines(store.root / rel, spans)
        for k, raw in zip(ks, lines, strict=True):
            rec = _checked(raw)  # None: damaged since indexed, asked again
            if rec is not None and rec.get("key") == k and rec.get("status") == "ok":
                out[k] = rec
    return out
