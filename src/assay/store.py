"""Content-addressed store: Arrow tables as Parquet, small documents as JSON, by checksum.

Blobs are named by the SHA-256 of their bytes and verified on every read; refs name blobs.

Layout under the root (default ``$ASSAY_STORE`` or ``./.assay``)::

    blobs/<2 hex>/<64 hex>.<parquet|json|bin>   immutable, named by sha256 of the file bytes
    refs/<2 hex>/<sha256 of name>.json          {"name":..., "blob":..., "meta":...}
    journals/<shard>.jsonl                      completion journals (assay.models.journal)
    quarantine/...                              what `assay store verify` found corrupt
    lock  or  leases/<kind>-<id>.json           gc's flock file, or leases on an object store

Every write goes to a unique temp file in the same directory, is fsynced, then ``os.replace``d
into place (inside a study's ``in_use(write_behind=True)`` the fsyncs wait for its end and are
issued together: see :class:`_Deferred`), so a reader sees either nothing or a whole file; two
writers of the same key both write complete identical bytes and the last rename wins. A blob
whose bytes do not match its name (truncated, bit-flipped) is reported through ``warnings`` and
treated as missing: it is never returned. Refs are the cache layer's pointers: a ref to a
missing or corrupt blob is a miss, so a killed run leaves at worst an unreferenced blob behind.

Lifecycle (see :mod:`assay.upkeep`): reading a ref touches its mtime (its last use), a running
study holds :meth:`Store.in_use` (a shared ``flock`` on ``<root>/lock``) and ``gc`` takes the
lock exclusively, so an entry a running study may still read is never removed.

The root may be an object store (``s3://bucket/prefix``, anything ``pyarrow.fs`` serves; see
:mod:`assay.store_files`): each write is one PUT (an object appears whole or not at all), reads
are verified the same way, and the lock is a lease: a ``leases/<id>.json`` object that its
holder rewrites while it runs and that lapses a set time after its last write, by the store's
clock (the server's last-modified stamps), so a dead holder stops blocking gc once it lapses.
While a study holds it with ``in_use(write_behind=True)``, its blob and ref PUTs are published
behind it, several at once as a backlog builds (see :class:`_Behind`): a ref still goes up only
after every blob put before it, and leaving ``in_use`` (or pickling the store for another
process) waits for them all; a failed or unanswered PUT (none finishing for ``PUT_WAIT_S``)
fails the study: StoreIOError. Every other request to an object store (reads, listings, journal
segments, leases) is bounded by ``PUT_WAIT_S`` too, and while a study holds ``in_use`` the first
failure poisons the store for the rest of the run: later requests raise the same error at once
(exit 1, naming the store), so no node goes on asking models for answers it cannot keep. A store
unpickled in another process opens its client on first use (no request, no credentials before).

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

import collections
import concurrent.futures
import contextlib
import fcntl
import hashlib
import io
import json
import mmap
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from assay.errors import StoreError, StoreIOError, StoreTimeoutError
from assay.hashing import canonical_json
from assay.store_files import (
    Entry,
    Files,
    LocalFiles,
    ObjectFiles,
    full_error,
    is_url,
    open_files,
)
from assay.store_files import atomic_write as atomic_write  # re-exported: callers import it here

_EXT = {"parquet", "json", "bin"}
_T = TypeVar("_T")
#: file suffix -> key kind (the inverse of ``Store._blob_path``'s table).
KIND_OF_EXT = {"parquet": "tbl", "json": "doc", "bin": "bin"}


class CorruptEntryWarning(UserWarning):
    """A store entry failed verification and was treated as missing."""


def default_root() -> Path:
    """``$ASSAY_STORE`` when set, else ``./.assay``."""
    return Path(os.environ.get("ASSAY_STORE") or ".assay")


def default_location() -> str:
    """``$ASSAY_STORE`` when set (a URL, or a path made absolute: read by
    :func:`assay.store_url.parse_store`, as every ``--store`` flag is), else ``.assay``."""
    env = os.environ.get("ASSAY_STORE")
    if not env:
        return ".assay"
    from assay.store_url import parse_store  # a malformed URL is the user's error, not a folder

    return parse_store(env)


#: seconds a lease on an object store lasts unless renewed (its holder renews it every third)
LEASE_S = float(os.environ.get("ASSAY_STORE_LEASE_S") or 300)
#: verified blobs an object-store ``Store`` keeps in memory (bytes in all, and per blob): a
#: stage's outputs are read right after its ref is checked, and a blob just put is checked
#: again by ``set_ref``; each would otherwise be a second download
MEMO_BYTES, MEMO_BLOB_BYTES = 128 << 20, 16 << 20
#: an object-store ref read is rewritten (its time is its last use) once it is this old: a
#: rewrite is a PUT, so a ref is not rewritten on every read
TOUCH_AFTER_S = 3600.0


#: PUTs one location's write-behind publishes at once at most, and the most bytes it holds
#: unpublished (a writer past that waits: memory stays bounded however fast a study produces
#: outputs)
BEHIND_THREADS, BEHIND_BYTES = 8, 256 << 20
#: writes waiting per PUT in flight before the write-behind adds another: it publishes one at a
#: time while that keeps up, since each PUT costs client CPU the study's own stages need (on a
#: small machine more threads made the study slower: benchmarks/store_s3.py), and widens to
#: BEHIND_THREADS as a backlog builds (a slow or distant store)
BEHIND_BACKLOG = int(os.environ.get("ASSAY_STORE_BACKLOG") or 4)
#: fsyncs a local store's deferred sync (:class:`_Deferred`) issues at once, and the files
#: written that make it sync before its scope's end
SYNC_THREADS, SYNC_BATCH = 16, 4096
#: requests a bulk walk of an object store (``Store.each``: upkeep's du, verify, gc) keeps in
#: flight: each read or delete is a round trip, and a store for months holds thousands
READ_THREADS = 16
#: the longest any wait on an object store lasts: a request made in the caller's thread (a
#: read, a listing, a journal segment, a lease), and a writer (waiting for memory) or a flush
#: while none of the pending PUTs finishes. Then the object store has stopped answering, and
#: the run fails naming it rather than wait on its client's own timeouts (pyarrow's S3 client
#: ignores its request timeout on Linux; other filesystems may have none)
PUT_WAIT_S = float(os.environ.get("ASSAY_STORE_PUT_WAIT_S") or 300)


class _Behind:
    """Writes to one object-store location, published behind their callers on a few threads.

    Why: an object store answers each PUT after a round trip and the server's own commit, while
    a study's stage needs nothing back from it; so the stage goes on computing while its outputs
    upload. What the store promises still holds: each write is one PUT (all or nothing); a ref
    (``barrier=True``) is PUT only after every blob submitted before it succeeded, so it never
    names a blob that is not there (refs do not wait for each other); and until a write is
    published, this process reads its bytes from here (a stage reads what the stage before it
    wrote). One per location and process, shared by its ``Store`` objects (a head start's and
    the flow's see each other's). It publishes one PUT at a time while that keeps up and
    widens as a backlog builds (``BEHIND_BACKLOG``).

    It is also the location's health within a run: while a study holds ``in_use`` (``scopes``
    > 0), the first request that fails or goes unanswered for PUT_WAIT_S "poisons" the
    location (``failed``), and every later request of this process raises the same error at
    once, so nodes fail at their first store access instead of each waiting out the bound
    (and sending model requests meanwhile). The last scope's end clears it: a later run asks
    the store again.
    """

    def __init__(self, where: str) -> None:
        self.where = where  # the location, for messages (no secrets)
        self.lock = threading.Condition()
        # rel -> (bytes, its PUT, whether it is a barrier write: a ref)
        self.pending: dict[str, tuple[bytes, concurrent.futures.Future[None], bool]] = {}
        self.held = 0  # bytes submitted and not yet published
        self.depth = 0  # open ``in_use(write_behind=True)`` scopes: writes go behind while > 0
        self.failed: BaseException | None = None
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.finished = 0  # PUTs finished (either way): a wait's progress, its bound's reset
        self.active = 0  # PUTs on the wire now (at most ``_width()``)
        self.flushing = 0  # callers waiting in ``flush``
        self.scopes = 0  # open ``Store.in_use`` scopes (any): a run is on; a failure poisons
        self.answered = False  # a request to this location succeeded in this process
        self.epoch = 0  # runs begun (scopes from 0): a write of an earlier run failing late
        # (abandoned when it was poisoned) does not poison the next

    def enter(self) -> None:
        """A study's ``in_use`` begins (see the class docstring)."""
        with self.lock:
            if self.scopes == 0:  # a new run: what an earlier one's writes did is told
                self.epoch += 1
                self.failed = None
            self.scopes += 1

    def leave(self) -> None:
        """A study's ``in_use`` ended: after the last, the store is asked again (a failure was
        told by the scope's flush or its own error)."""
        with self.lock:
            self.scopes -= 1
            if self.scopes == 0:
                self.failed = None

    def _wake(self, _f: object = None) -> None:
        with self.lock:
            self.lock.notify_all()

    def _fail(self, err: BaseException) -> None:
        """Record the first failure while a run is on (call holding ``self.lock``)."""
        if self.scopes and self.failed is None:
            self.failed = err
        self.lock.notify_all()

    def call(self, fn: Callable[[], _T], what: str) -> _T:
        """``fn()``, one request to the store, bounded: it runs on a daemon thread (a request
        the store never answers is abandoned, and holds no exit) and the caller waits at most
        PUT_WAIT_S, or until the location is poisoned. While a run is on, any failure poisons
        the location and is a StoreIOError (exit 1: the store answered earlier in this process,
        so the failure is an outage, not the user's settings)."""
        with self.lock:
            if self.scopes:
                self._check()
        fut: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001  (re-raised in the caller's thread)
                fut.set_exception(e)

        fut.add_done_callback(self._wake)
        threading.Thread(target=run, name="assay-store-call", daemon=True).start()
        try:
            out = self._await(fut, what, bound=True)
        except StoreIOError:
            raise
        except StoreError as e:
            with self.lock:
                if not (self.scopes and self.answered):
                    self._fail(e)
                    raise
                err = StoreIOError(f"{e} (mid-run: the store answered earlier in this run)")
                self._fail(err)
            raise err from None
        with self.lock:
            self.answered = True
        return out

    def _await(self, fut: concurrent.futures.Future[_T], what: str, *, bound: bool) -> _T:
        """The result of ``fut`` (whose end wakes ``self.lock``); raises the poison at once
        when the location fails meanwhile, and StoreTimeoutError after PUT_WAIT_S (``bound``)."""
        with self.lock:
            deadline = time.monotonic() + PUT_WAIT_S
            while not fut.done():
                if self.scopes:
                    self._check()
                left = deadline - time.monotonic()
                if bound and left <= 0:
                    err = StoreTimeoutError(
                        f"store {self.where}: {what} was not answered in {PUT_WAIT_S:g} s: the "
                        "object store stopped answering; check the server, then rerun (what "
                        "was published is kept). ASSAY_STORE_PUT_WAIT_S sets this bound")
                    self._fail(err)
                    raise err
                self.lock.wait(left if bound else None)
        return fut.result()

    def read(self, rel: str) -> bytes | None:
        with self.lock:
            got = self.pending.get(rel)
        return None if got is None else got[0]

    def _check(self) -> None:
        """Raise the location's poison (the first failure of this run), as its own kind."""
        f = self.failed
        if f is None:
            return
        kind = StoreTimeoutError if isinstance(f, StoreTimeoutError) else StoreIOError
        text = str(f)
        if not text.startswith(f"store {self.where}"):
            text = f"store {self.where}: {text}"
        raise kind(f"an earlier request to the store failed, so this run asks nothing more "
                   f"of it: {text}")

    def submit(self, files: Files, rel: str, data: bytes, *, barrier: bool = False) -> None:
        with self.lock:
            self._check()
            # bounded memory: wait while others' bytes fill the budget (one write may exceed it)
            self._wait(lambda: not (self.held and self.held + len(data) > BEHIND_BYTES),
                       f"room to write {rel}")
            if self.pool is None:
                # twice the PUTs on the wire: a ref waiting for its blobs holds a thread, and
                # must not keep the blobs after it off the wire (``_width`` caps the PUTs)
                self.pool = concurrent.futures.ThreadPoolExecutor(
                    2 * BEHIND_THREADS, thread_name_prefix="assay-store-put")
            # a ref waits for the blobs put before it (what it names, and what that names),
            # not for earlier refs: refs go up side by side
            before = ([(r, f) for r, (_, f, ref) in self.pending.items() if not ref]
                      if barrier else [])
            self.held += len(data)
            fut: concurrent.futures.Future[None] = self.pool.submit(
                self._publish, files, rel, data, before)
            self.pending[rel] = (data, fut, barrier)
            self.lock.notify_all()  # a longer backlog may widen the wire for writes waiting
            epoch = self.epoch

        def done(f: concurrent.futures.Future[None]) -> None:
            with self.lock:
                self.finished += 1
                self.held -= len(data)
                if self.pending.get(rel, (None, None, None))[1] is f:
                    del self.pending[rel]
                err = f.exception()
                if (err is not None and self.failed is None
                        and self.epoch == epoch):  # not a late failure of an earlier run's
                    # a ref refused because a blob before it failed: the blob's failure is the
                    # run's (its waiter may wake before the blob's own callback records it)
                    self.failed = getattr(err, "first", err)
                self.lock.notify_all()

        fut.add_done_callback(done)

    def _width(self) -> int:
        """PUTs allowed on the wire: one, plus one per BEHIND_BACKLOG writes waiting; all of
        BEHIND_THREADS while a flush waits (its caller computes nothing meanwhile)."""
        if self.flushing:
            return BEHIND_THREADS
        waiting = len(self.pending) - self.active
        return max(1, min(BEHIND_THREADS, 1 + waiting // max(1, BEHIND_BACKLOG)))

    def _publish(self, files: Files, rel: str, data: bytes,
                 before: list[tuple[str, concurrent.futures.Future[None]]]) -> None:
        # the pool takes jobs in submission order, so every write in ``before`` has started on
        # another thread: waiting on them cannot deadlock (nor can the width below: this job
        # holds no place on the wire while it waits for them)
        for blob, f in before:
            try:
                failed = f.exception(timeout=PUT_WAIT_S)
            except concurrent.futures.TimeoutError:
                failed = StoreTimeoutError(
                    f"store {self.where}: waited {PUT_WAIT_S:g} s for the write of {blob} and "
                    "it was not answered: the object store stopped answering; check the "
                    "server, then rerun (what was published is kept). ASSAY_STORE_PUT_WAIT_S "
                    "sets this bound")
            if failed is not None:  # an outage stays one (the run's exit names it so)
                kind = StoreTimeoutError if isinstance(failed, StoreTimeoutError) else StoreIOError
                err = kind(f"{files.where(rel)} was not written: the write of {blob} before it "
                           f"failed ({failed})")
                # the poison is the blob's failure, not this one (see ``done``)
                err.first = failed  # type: ignore[attr-defined]
                raise err from failed
        with self.lock:
            # woken by each PUT's end (and by submit and flush, which may widen the wire)
            self._wait(lambda: self.active < self._width(), f"a place on the wire for {rel}",
                       check=False)
            if self.scopes:
                self._check()  # the run has failed: nothing more goes up
            self.active += 1
        try:
            # on a daemon thread: a PUT the store never answers is abandoned once the location
            # is poisoned (the pool's threads hold the process's exit; a daemon does not)
            fut: concurrent.futures.Future[None] = concurrent.futures.Future()

            def put() -> None:
                try:
                    files.write(rel, [data])
                    fut.set_result(None)
                except BaseException as e:  # noqa: BLE001  (raised by _await below)
                    fut.set_exception(e)

            fut.add_done_callback(self._wake)
            threading.Thread(target=put, name="assay-store-put", daemon=True).start()
            self._await(fut, f"the write of {rel}", bound=False)
        finally:
            with self.lock:
                self.active -= 1
                self.lock.notify_all()

    def _wait(self, ready: Callable[[], bool], what: str, *, check: bool = True) -> None:
        """Wait (holding ``self.lock``) until ``ready()``, woken by each PUT's end (``check``:
        raising an earlier failure at once). Raises StoreTimeoutError once PUT_WAIT_S pass in
        which none of the pending PUTs finished."""
        seen, deadline = self.finished, time.monotonic() + PUT_WAIT_S
        while not ready():
            if check:
                self._check()
            if self.finished != seen:  # progress: the store answers, if slowly
                seen, deadline = self.finished, time.monotonic() + PUT_WAIT_S
            left = deadline - time.monotonic()
            if left <= 0:
                stuck = sorted(self.pending)
                err = StoreTimeoutError(
                    f"store {self.where}: waited {PUT_WAIT_S:g} s for {what} and none of the "
                    f"{len(stuck)} writes in flight finished (the first: "
                    f"{stuck[0] if stuck else '-'}): the object store stopped answering; check "
                    "the server, then rerun (what was published is kept). "
                    "ASSAY_STORE_PUT_WAIT_S sets this bound")
                if self.failed is None:
                    self.failed = err  # nothing later may be published ahead of these
                raise err
            self.lock.wait(left)

    def flush(self) -> None:
        """Wait until every write submitted so far is published; raise the first failure
        (StoreTimeoutError when the store stops answering: see PUT_WAIT_S)."""
        with self.lock:
            self.flushing += 1
            self.lock.notify_all()  # the wire widens for the writes waiting
            try:
                if not isinstance(self.failed, StoreTimeoutError):  # else: waited its bound
                    futs = [f for _, f, _ in self.pending.values()]
                    self._wait(lambda: all(f.done() for f in futs), "the pending writes",
                               check=False)
            finally:
                self.flushing -= 1
                failed = self.failed
                if not self.scopes:  # told once: the store may recover (in a run: poisoned
                    self.failed = None  # until its last scope ends, see ``leave``)
        if isinstance(failed, StoreTimeoutError):
            raise failed
        if failed is not None:
            raise StoreIOError(f"a write to the store failed: {failed}") from failed


@contextlib.contextmanager
def _depth_scope(owner: _Behind | _Deferred, finish: Callable[[], None],
                 quiet: type[BaseException]) -> Iterator[None]:
    """``owner.depth`` raised (under ``owner.lock``) while the block runs, then ``finish()``
    (publish or fsync what it wrote); when the block raised, ``finish`` failing with ``quiet``
    is not told: the block's own error is the news."""
    with owner.lock:
        owner.depth += 1
    try:
        yield
    except BaseException:
        with owner.lock:
            owner.depth -= 1
        with contextlib.suppress(quiet):
            finish()
        raise
    with owner.lock:
        owner.depth -= 1
    finish()


class _Deferred:
    """A local location's writes made durable together: while a study holds
    ``in_use(write_behind=True)`` (``depth`` > 0), a blob or ref is written and renamed into
    place without its own fsync and its path kept here; :meth:`sync` (the scope's end,
    ``Store.flush`` before run.json names the outputs) fsyncs them all at once, on threads.

    Why: an fsync per file cost 3-5 ms, three per shard (its rows, its pointer document, its
    ref): most of a small shard's store time (benchmarks/shard_overhead.py); fsyncs issued
    together share the file system's journal commits (about 0.1-0.2 ms a file). What it
    changes: nothing for a killed process (the kernel has the bytes; the SIGKILL resume tests
    hold), and after a power loss mid-run the files of the last seconds (until the kernel's
    own writeback) may be missing or torn, which verified reads treat as missing, so those
    nodes run again: never a wrong result. One per location and process, shared by its
    ``Store`` objects (a head start's and the flow's)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.lock = threading.Lock()
        self.depth = 0
        self.paths: dict[str, None] = {}  # written, not yet fsynced (insertion-ordered)

    def add(self, path: str) -> bool:
        """Keep ``path`` (just written without fsync) for the next sync; False when no
        deferring scope is open any more (the caller syncs it itself). The writer whose file
        makes ``SYNC_BATCH`` syncs them: memory and what a power loss may take stay bounded
        in a long run."""
        with self.lock:
            if self.depth <= 0:
                return False
            self.paths[path] = None
            full = len(self.paths) >= SYNC_BATCH
        if full:
            self.sync()
        return True

    def sync(self) -> None:
        """fsync every file kept so far (several at once); a failure names the store and the
        file (a full disk: StoreFullError)."""
        with self.lock:
            paths, self.paths = list(self.paths), {}
        if not paths:
            return
        if len(paths) == 1:
            _fsync_path(self.where, paths[0])
            return
        with concurrent.futures.ThreadPoolExecutor(min(SYNC_THREADS, len(paths)),
                                                   thread_name_prefix="assay-sync") as pool:
            for f in [pool.submit(_fsync_path, self.where, p) for p in paths]:
                f.result()


def _fsync_path(where: str, path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # removed since (a gc, a quarantine): nothing to keep
    try:
        os.fsync(fd)
    except OSError as e:
        full = full_error(where, path, e)
        if full is None:
            raise
        raise full from e
    finally:
        os.close(fd)


_DEFERRED: dict[str, _Deferred] = {}


def _deferred_for(root: Path) -> _Deferred:
    key = os.path.realpath(root)
    with _BEHIND_LOCK:
        d = _DEFERRED.get(key)
        if d is None:
            d = _DEFERRED[key] = _Deferred(str(root))
        return d


class _Bounded:
    """An object store's files with every request bounded and poisoned through the location's
    :class:`_Behind` (``call``); anything else (``fs``, ``base``) is the files' own."""

    remote = True

    def __init__(self, files: Files, behind: _Behind) -> None:
        self.files, self.behind = files, behind
        self.location = files.location

    def __getattr__(self, name: str) -> Any:
        return getattr(self.files, name)

    def where(self, rel: str) -> str:
        return self.files.where(rel)

    def read(self, rel: str) -> bytes | None:
        return self.behind.call(lambda: self.files.read(rel), f"reading {rel}")

    def read_with_mtime(self, rel: str) -> tuple[bytes, float] | None:
        return self.behind.call(lambda: self.files.read_with_mtime(rel), f"reading {rel}")

    def write(self, rel: str, parts: Sequence[Any], *, durable: bool = True) -> None:
        self.behind.call(lambda: self.files.write(rel, parts, durable=durable), f"writing {rel}")

    def delete(self, rel: str) -> None:
        self.behind.call(lambda: self.files.delete(rel), f"deleting {rel}")

    def touch(self, rel: str, data: bytes) -> None:
        self.behind.call(lambda: self.files.touch(rel, data), f"rewriting {rel}")

    def list(self, prefix: str) -> list[Entry]:
        return self.behind.call(lambda: self.files.list(prefix), f"listing {prefix}/")

    def move(self, rel: str, dest: str) -> None:
        self.behind.call(lambda: self.files.move(rel, dest), f"moving {rel}")

    def exists(self) -> bool:
        return self.behind.call(self.files.exists, "checking the store")


_BEHIND: dict[str, _Behind] = {}
_BEHIND_LOCK = threading.Lock()


def _unpickled(location: str) -> Store:
    """A store sent to another process (``Store.__reduce__``): its client is made on first use."""
    return Store(location, connect=False)


def _behind_for(location: str, where: str) -> _Behind:
    with _BEHIND_LOCK:
        b = _BEHIND.get(location)
        if b is None:
            b = _BEHIND[location] = _Behind(where)
        return b


class Store:
    """A content-addressed store rooted at a directory or an object-store URL (see module
    docstring)."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *,
                 connect: bool = True) -> None:
        """``connect=False``: an object store's client is made on its first request, not here
        (what a store unpickled on a worker does: no request, no credentials until used)."""
        loc = os.fspath(root) if root is not None else default_location()
        self._loc = loc
        raw = ObjectFiles(loc, connect=connect) if is_url(loc) else open_files(loc)
        # object stores only: verified blob bytes by key (content-named, so never stale)
        self._memo: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._memo_size = 0
        self._memo_lock = threading.Lock()
        self._behind = _behind_for(loc, raw.location) if raw.remote else None
        #: local stores only: durability deferred to the end of a study's write scope
        self._deferred = (_deferred_for(raw.root) if isinstance(raw, LocalFiles) else None)
        #: the files as they are (the write-behind's PUTs, bounded by it), and as every other
        #: request goes: bounded, and poisoned after a failure mid-run (see ``_Behind``)
        self._raw: Files = raw
        self._files: Files = raw if self._behind is None else _Bounded(raw, self._behind)

    @property
    def remote(self) -> bool:
        """True when the store lives behind a URL (an object store), not in a local folder."""
        return self._files.remote

    @property
    def root(self) -> Path:
        """The local folder of a local store (an object store has none: see ``location``)."""
        if isinstance(self._files, LocalFiles):
            return self._files.root
        raise StoreError(f"store {self.location} is not a local folder")

    @property
    def location(self) -> str:
        """Where the store is, for messages and run.json: a path, or a URL without secrets."""
        return self._files.location

    def describe(self) -> str:
        """``location``, with a local path made absolute (what another process must see)."""
        return self.location if self.remote else str(self.root.resolve())

    def exists(self) -> bool:
        """Whether anything is stored there yet."""
        return self._files.exists()

    def __repr__(self) -> str:
        return f"Store({self.location!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # a store travels to a worker as its location (no client, no credentials from the
        # environment: the worker opens it with its own); a local path goes absolute, since the
        # worker's working folder may differ. What this process still publishes behind goes up
        # first: the other process reads the server (a local folder's files are there already:
        # their deferred fsyncs are this process's to issue).
        if self._behind is not None:
            self._behind.flush()
        if self.remote:  # made lazily there: unpickling asks nothing of the store
            return (_unpickled, (self._loc,))
        return (Store, (str(self.root.absolute()),))

    def check(self) -> None:
        """Raise at once (no request) when this run's requests to the store already failed
        (see :class:`_Behind`): a writer that keeps its data in memory for a while (a
        journal's lines) stops with the run instead of going on until its next request.

        Example:
            >>> import tempfile
            >>> Store(tempfile.mkdtemp()).check()  # a local store has no such state
        """
        if self._behind is not None:
            with self._behind.lock:
                if self._behind.scopes:
                    self._behind._check()

    def flush(self) -> None:
        """Wait until every write this process put behind (``in_use(write_behind=True)``) on
        this location is published; raises StoreError naming the first that failed."""
        if self._behind is not None:
            self._behind.flush()
        if self._deferred is not None:
            self._deferred.sync()

    def _local_write(self, rel: str, parts: Sequence[Any], *, durable: bool = True) -> None:
        """A local write: durable now, or (inside a study's ``in_use(write_behind=True)``)
        written now and made durable with the rest at the scope's end (:class:`_Deferred`)."""
        d = self._deferred
        if not durable or d is None or d.depth <= 0:
            self._files.write(rel, parts, durable=durable)
            return
        self._files.write(rel, parts, durable=False)
        path = self._files.where(rel)
        if not d.add(path):  # the scope ended meanwhile: nobody else syncs it
            _fsync_path(self.location, path)

    def _write(self, rel: str, data: bytes, *, barrier: bool = False) -> None:
        """One write: behind the caller while a write-behind scope is open, else now (a
        ``barrier`` write, a ref, then after what is still pending)."""
        b = self._behind
        if b is None:
            self._local_write(rel, [data])
        elif b.depth > 0:
            b.submit(self._raw, rel, data, barrier=barrier)
        else:
            if barrier:
                b.flush()
            self._files.write(rel, [data])

    # -- blobs -------------------------------------------------------------------------------
    @staticmethod
    def _blob_rel(key: str) -> str:
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
        return f"blobs/{hexd[:2]}/{hexd}.{ext}"

    def _blob_path(self, key: str) -> Path:
        """The file of ``key`` in a local store."""
        return self.root / self._blob_rel(key)

    def _put(self, data: bytes, kind: str) -> str:
        key = f"{kind}:{hashlib.sha256(data).hexdigest()}"
        rel = self._blob_rel(key)
        if self.remote:
            # one PUT, no look first: checking would download the object (to verify it) and
            # cost as much as writing identical bytes again, which is harmless
            self._remember(key, data)
            self._write(rel, data)
        elif not self._verified(rel, key):
            self._local_write(rel, [data])
        return key

    def _remember(self, key: str, data: bytes) -> None:
        if not self.remote or len(data) > MEMO_BLOB_BYTES:
            return
        with self._memo_lock:
            if key in self._memo:
                return
            self._memo[key] = data
            self._memo_size += len(data)
            while self._memo_size > MEMO_BYTES:
                self._memo_size -= len(self._memo.popitem(last=False)[1])

    def forget(self, key: str) -> None:
        """Drop ``key`` from this store's memory of verified blobs (it was removed)."""
        with self._memo_lock:
            data = self._memo.pop(key, None)
            if data is not None:
                self._memo_size -= len(data)

    def _verified(self, rel: str, key: str, memo: bool = True) -> bytes | None:
        if memo and self.remote:
            with self._memo_lock:
                hit = self._memo.get(key)
            if hit is not None:
                return hit
        if self._behind is not None:
            hit = self._behind.read(rel)  # written by this process, still being published
            if hit is not None:
                return hit
        data = self._files.read(rel)
        if data is None:
            return None
        if hashlib.sha256(data).hexdigest() != key.split(":", 1)[1]:
            warnings.warn(
                f"store entry {self._files.where(rel)} is corrupt (checksum mismatch, "
                f"{len(data)} bytes); treated as missing and will be rewritten",
                CorruptEntryWarning,
                stacklevel=3,
            )
            return None
        self._remember(key, data)
        return data

    def has(self, key: str) -> bool:
        """True when ``key`` is present and verifies."""
        return self._verified(self._blob_rel(key), key) is not None

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
        rel = self._blob_rel(key)
        if self.remote:  # as in _put: no look first
            self._write(rel, b"".join(views))
        elif not self._verified(rel, key, memo=False):
            self._local_write(rel, views, durable=durable)
        return key

    def map_fresh(self, key: str) -> mmap.mmap | bytes:
        """A read-only memory map of the blob under ``key``, *not* verified: for a blob this
        process has just written (its pages are still in the page cache, so mapping them costs
        no read and no copy). Anything read back later goes through :meth:`get_bytes`. On an
        object store: the verified bytes (there is nothing to map).
        """
        if self.remote:
            data = self.get_bytes(key)
            if data is None:
                raise StoreError(f"{key} vanished from {self.location} just after it was written")
            return data
        path = self._blob_path(key)
        with open(path, "rb") as f:
            # MAP_POPULATE maps every page up front: one call instead of a fault per page
            return mmap.mmap(f.fileno(), 0,
                             flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                             prot=mmap.PROT_READ)

    def get_bytes(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None when missing or corrupt."""
        return self._verified(self._blob_rel(key), key)

    def put_json(self, doc: object) -> str:
        """Store a JSON-like document in canonical form; returns ``doc:<sha256>``."""
        return self._put(canonical_json(doc), "doc")

    def get_json(self, key: str) -> Any | None:
        """The document under ``key``, or None when missing or corrupt."""
        data = self._verified(self._blob_rel(key), key)
        return None if data is None else json.loads(data)

    def put_table(self, table: pa.Table, *, row_group_rows: int | None = None) -> str:
        """Store an Arrow table as Parquet (zstd; ``row_group_rows`` rows per row group, else
        pyarrow's default); returns ``tbl:<sha256 of the file>``."""
        if not isinstance(table, pa.Table):
            raise StoreError(f"put_table needs a pyarrow.Table, got {type(table).__name__}")
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd", row_group_size=row_group_rows)
        return self._put(buf.getvalue(), "tbl")

    def put_parquet(self, data: bytes) -> str:
        """Store a Parquet file's bytes as a table, as they are (written by the caller, e.g. a
        build a batch at a time); returns ``tbl:<sha256 of the file>``, read by
        :meth:`get_table`."""
        if data[:4] != b"PAR1" or data[-4:] != b"PAR1":
            raise StoreError("put_parquet needs a Parquet file's bytes")
        return self._put(data, "tbl")

    def get_table(self, key: str) -> pa.Table | None:
        """The table under ``key``, or None when missing or corrupt."""
        data = self._verified(self._blob_rel(key), key)
        if data is None:
            return None
        # No reader threads: Arrow's parquet thread pools can abort the process at interpreter
        # exit ("terminate called without an active exception", apache/arrow#34314); the bytes
        # are already in memory, so threads buy little here. ParquetFile, not read_table: the
        # latter goes through pyarrow.dataset, which imports pandas (start-up time for nothing).
        return pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).read(use_threads=False)

    # -- refs (named pointers, e.g. a stage's cache key -> its output blob) ------------------
    @staticmethod
    def _ref_rel(name: str) -> str:
        h = hashlib.sha256(name.encode("utf-8")).hexdigest()
        return f"refs/{h[:2]}/{h}.json"

    def _ref_path(self, name: str) -> Path:
        """The file of ref ``name`` in a local store."""
        return self.root / self._ref_rel(name)

    def set_ref(self, name: str, blob: str, meta: Mapping[str, object] | None = None) -> None:
        """Point ``name`` at ``blob`` (which must already be stored), atomically."""
        if not self.has(blob):
            raise StoreError(f"set_ref({name!r}): blob {blob} is not in the store; put it first")
        doc = {"name": name, "blob": blob, "meta": meta or {}}
        self._write(self._ref_rel(name), canonical_json(doc), barrier=True)

    def get_ref(self, name: str) -> dict[str, Any] | None:
        """``{"name", "blob", "meta"}`` for ``name``, or None when absent, unreadable, or the blob
        it names is missing or corrupt (a ref is only as good as its blob)."""
        rel = self._ref_rel(name)
        pending = self._behind.read(rel) if self._behind is not None else None
        got = ((pending, time.time()) if pending is not None
               else self._files.read_with_mtime(rel) if self.remote else self._files.read(rel))
        if got is None:
            return None
        data, mtime = got if isinstance(got, tuple) else (got, 0.0)
        try:
            doc = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            warnings.warn(f"store ref {self._files.where(rel)} is unreadable; treated as missing",
                          CorruptEntryWarning, stacklevel=2)
            return None
        if not isinstance(doc, dict) or doc.get("name") != name:
            return None
        try:
            if not self.has(doc.get("blob") or ""):
                return None
        except StoreIOError:
            raise  # the store failed: not a miss (that would recompute, asking models again)
        except StoreError:
            return None
        # the ref's time records its last use: gc keeps what the kept runs' window used
        if not self.remote:
            self._files.touch(rel, data)
        elif time.time() - mtime >= TOUCH_AFTER_S:
            self._write(rel, data)  # an object's time changes only when it is written again
        return doc

    def delete_ref(self, name: str) -> None:
        """Remove a ref if present."""
        self.flush()
        self._files.delete(self._ref_rel(name))

    # -- raw files (journals, upkeep) --------------------------------------------------------
    def each(self, fn: Callable[[str], _T], rels: Sequence[str]) -> list[_T]:
        """``[fn(rel) for rel in rels]``, in order: on an object store up to READ_THREADS calls
        at once (each is a round trip or more), on a local folder one after another (a file
        read there is microseconds). The first exception ``fn`` raises is raised.

        Example:
            >>> import tempfile
            >>> Store(tempfile.mkdtemp()).each(len, ["a", "bb"])
            [1, 2]
        """
        if not self.remote or len(rels) < 2:
            return [fn(r) for r in rels]
        with concurrent.futures.ThreadPoolExecutor(
                min(READ_THREADS, len(rels)), thread_name_prefix="assay-store-read") as ex:
            return list(ex.map(fn, rels))

    def read_file(self, rel: str) -> bytes | None:
        """The bytes of ``rel`` under the root (unverified), or None when absent."""
        return self._files.read(rel)

    def write_file(self, rel: str, data: bytes) -> None:
        """Write ``rel`` under the root, all or nothing."""
        self._files.write(rel, [data])

    def delete_file(self, rel: str) -> None:
        """Remove ``rel`` under the root if present."""
        self.flush()
        self._files.delete(rel)

    def where(self, rel: str) -> str:
        """Where ``rel`` is, for messages (a path, or a URL without secrets)."""
        return self._files.where(rel)

    def quarantine(self, rel: str) -> str:
        """Move ``rel`` to ``quarantine/<rel>``; returns where it went."""
        self.flush()
        self._files.move(rel, f"quarantine/{rel}")
        return self._files.where(f"quarantine/{rel}")

    def restore(self, rel: str) -> None:
        """Undo :meth:`quarantine` of ``rel``."""
        self._files.move(f"quarantine/{rel}", rel)

    def entries(self, sub: str) -> list[Entry]:
        """Every file under ``<root>/<sub>``, in path order."""
        self.flush()
        return self._files.list(sub)

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

    def live_leases(self, kind: str | None = None) -> list[dict[str, object]]:
        """The unexpired leases on an object store (``kind``: "study" or "gc"), each with
        ``where`` and ``left`` (seconds until it lapses unless renewed). Judged by the store's
        clock alone: a marker written now gives the store's "now" (see :meth:`_live`)."""
        marker = f"leases/clock-{uuid.uuid4().hex}.json"
        self._files.write(marker, [canonical_json({"kind": "clock"})])
        try:
            return self._live(kind, marker)
        finally:
            with contextlib.suppress(StoreError):
                self._files.delete(marker)

    def _live(self, kind: str | None, fresh: str) -> list[dict[str, object]]:
        # A lease's age is the store's "now" (the last-modified time the server stamped on
        # ``fresh``, an object this process has just written) minus the last-modified time the
        # server stamped on the lease when its holder last wrote it: both stamps come from the
        # server's clock, so no two machines' clocks are ever compared (a holder whose clock is
        # minutes off holds its lease exactly as long as one whose clock is right).
        entries = self._files.list("leases")
        now = next((e.mtime for e in entries if e.rel == fresh), None)
        if now is None:  # not listed yet: its own read gives the stamp
            got = self._files.read_with_mtime(fresh)
            now = got[1] if got is not None else time.time()
        out = []
        for e in entries:
            if e.rel == fresh:
                continue
            data = self._files.read(e.rel)
            try:
                doc = json.loads(data) if data is not None else None
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(doc, dict) or doc.get("kind") not in ("study", "gc"):
                continue
            left = float(doc.get("ttl") or LEASE_S) - (now - e.mtime)
            if left > 0 and (kind is None or doc.get("kind") == kind):
                out.append({**doc, "where": e.where, "left": left})
        return out

    @contextlib.contextmanager
    def _lease(self, kind: str, other: str, wait: float | None,
               seconds: float | None = None) -> Iterator[None]:
        # Each side writes its own lease, then looks for the other's: with read-after-write
        # consistent listings (S3, GCS, Azure, SeaweedFS) two racers cannot both miss each other.
        # The lease holds no time of its holder's clock: the server's last-modified stamp of
        # each (re)write is its start, so expiry never depends on the machines' clocks agreeing.
        ttl = LEASE_S if seconds is None else seconds
        rel = f"leases/{kind}-{uuid.uuid4().hex}.json"

        def write() -> None:
            doc = {"kind": kind, "ttl": ttl, "host": socket.gethostname(), "pid": os.getpid()}
            self._files.write(rel, [canonical_json(doc)])

        deadline = None if wait is None else time.monotonic() + wait
        while True:
            write()
            held = self._live(other, rel)  # this lease, just written, is the store's "now"
            if not held:
                break
            self._files.delete(rel)
            if deadline is not None and time.monotonic() >= deadline:
                what = "a store gc" if kind == "study" else "a running study"
                raise StoreError(
                    f"{self.location} is locked by {what} (lease {held[0]['where']}, host "
                    f"{held[0].get('host')}, lapses in {held[0]['left']:.0f} s unless renewed);"
                    f" waited {wait:.0f} s: retry when it has finished")
            time.sleep(0.5)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(ttl / 3):
                with contextlib.suppress(StoreError):
                    write()

        t = threading.Thread(target=renew, name="assay-store-lease", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()
            with contextlib.suppress(StoreError):
                self._files.delete(rel)

    def in_use(self, wait: float | None = None, *,
               write_behind: bool = False) -> contextlib.AbstractContextManager[None]:
        """Hold a shared lock while a study reads and writes this store: ``gc`` (exclusive)
        waits for every holder, and a study started during a ``gc`` waits for it to finish.
        The kernel drops the lock when the process dies, so a killed run never blocks gc (on
        an object store: a lease, which expires unless renewed).

        ``write_behind`` (for a study whose nodes all run in this process): on an object store
        the blobs and refs written meanwhile are published behind their writers, several at
        once (refs after the blobs put before them); the block's end waits until all are
        published and raises StoreError if one failed, before the lease goes. A store pickled
        for another process publishes first. On a local folder each write is in place at once
        (another process reads it) and its fsync waits for the block's end (or ``flush``),
        where all are issued together (:class:`_Deferred`).

        Example:
            >>> import tempfile
            >>> st = Store(tempfile.mkdtemp())
            >>> with st.in_use(), st.in_use():  # shared: any number of studies at once
            ...     pass
        """
        if self.remote:
            return self._study_lease(wait, write_behind)
        if write_behind:
            return self._deferring(wait)
        return self._flock(fcntl.LOCK_SH, wait)

    @contextlib.contextmanager
    def _deferring(self, wait: float | None) -> Iterator[None]:
        """A local study's scope: its writes' fsyncs deferred to its end (:class:`_Deferred`)."""
        d = self._deferred
        assert d is not None  # a local store's
        with self._flock(fcntl.LOCK_SH, wait):
            # before the lock goes: what this scope wrote is durable
            with _depth_scope(d, d.sync, Exception):
                yield

    @contextlib.contextmanager
    def _study_lease(self, wait: float | None, write_behind: bool) -> Iterator[None]:
        b = self._behind
        assert b is not None  # an object store's
        b.enter()  # a failure from here on poisons the location until the scope's end
        try:
            with self._lease("study", "gc", wait):
                if not write_behind:
                    yield
                    return
                with _depth_scope(b, b.flush, StoreError):
                    yield
        finally:
            b.leave()

    def exclusive(self, wait: float | None = 0.0) -> contextlib.AbstractContextManager[None]:
        """The lock ``gc`` holds: no study is running on this store while it is held. Raises
        StoreError after ``wait`` seconds (None: wait forever) when studies hold it."""
        if self.remote:
            return self._lease("gc", "study", wait)
        return self._flock(fcntl.LOCK_EX, wait)

    def blob_entries(self) -> Iterator[tuple[str, Entry]]:
        """``(key, entry)`` of every blob file (verified or not), in path order."""
        for e in self.entries("blobs"):
            d, _, name = e.rel[len("blobs/"):].partition("/")
            hexd, _, ext = name.partition(".")
            if ext in KIND_OF_EXT and len(hexd) == 64 and d == hexd[:2]:
                yield f"{KIND_OF_EXT[ext]}:{hexd}", e

    def ref_entries(self) -> list[Entry]:
        """Every ref file, in path order."""
        return [e for e in self.entries("refs")
                if e.rel.endswith(".json") and not e.rel.rsplit("/", 1)[-1].startswith(".")]

    def journal_entries(self) -> list[Entry]:
        """Every completion journal file: ``journals/<shard>.jsonl`` in a local store, one
        object per flushed segment ``journals/<shard>/<segment>.jsonl`` on an object store
        (see :mod:`assay.models.journal`), in path order."""
        return [e for e in self.entries("journals") if e.rel.endswith(".jsonl")
                and not e.rel.rsplit("/", 1)[-1].startswith(".")]

    def temp_entries(self) -> list[Entry]:
        """Temp files of writers (live, or killed mid-write) under blobs/ and refs/ (none on an
        object store: a PUT has no temp file)."""
        return [e for sub in ("blobs", "refs") for e in self.entries(sub)
                if e.rel.rsplit("/", 1)[-1].startswith(".") and e.rel.endswith(".tmp")]

    # local-store paths, for callers that work on files
    def blob_files(self) -> Iterator[tuple[str, Path]]:
        """``(key, path)`` of every blob file of a local store, in path order."""
        for k, e in self.blob_entries():
            yield k, self.root / e.rel

    def ref_files(self) -> Iterator[Path]:
        """Every ref file of a local store, in path order."""
        yield from (self.root / e.rel for e in self.ref_entries())

    def journal_files(self) -> Iterator[Path]:
        """Every completion journal of a local store, in path order."""
        yield from (self.root / e.rel for e in self.journal_entries())
