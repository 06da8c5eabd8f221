"""Claims on requests in flight: two runs on one store (two cron entries, a deployment and a CLI
run) never send the same request; one asks, the other waits for its answer in the journal.

A claimant writes one small document, ``claims/<journal hex>/<claimant>.json``, naming the request
keys it is about to send and a lease (``ttl`` seconds), then lists the other claims of that
journal. A key another live claim names is yielded (the document is rewritten without it) and
waited for; the rest are the claimant's to send. Two claimants that both keep a key cannot exist:
the later of the two writes is before the later claimant's listing, which therefore sees the
earlier claim (listings are read-after-write consistent on a local folder, S3, GCS, Azure and
SeaweedFS). Two that both yield a key (each saw the other) both find it unclaimed while waiting
and claim it again in a later round, after a random pause that breaks the tie.

A lease lapses ``ttl`` seconds after its holder last wrote it, judged by the store's clock alone
(the last-modified stamps of the claim and of the reader's own claim, just rewritten, as
:meth:`assay.store.Store.live_leases` judges leases): the holder rewrites it every ``ttl / 3``
while it runs, so only a dead (or cut off) claimant's keys are taken over. ``ASSAY_CLAIM_LEASE_S``
sets ``ttl`` (default 60), ``ASSAY_CLAIM_POLL_S`` how often a waiter looks (default 0.2 s on a
local store, 1 s on an object store).

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> st = Store(tempfile.mkdtemp())
    >>> a, b = Claims(st, "journals/ab.jsonl"), Claims(st, "journals/ab.jsonl")
    >>> a.claim(["gen:1", "gen:2"])
    ['gen:1', 'gen:2']
    >>> b.claim(["gen:2", "gen:3"]), sorted(b.held_by_others(["gen:1", "gen:2", "gen:3"]))
    (['gen:3'], ['gen:1', 'gen:2'])
    >>> a.release(); b.held_by_others(["gen:1", "gen:2"]); b.release()
    set()
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from assay.errors import StoreError
from assay.hashing import canonical_json
from assay.store import Store
from assay.store_files import Entry


def lease_s() -> float:
    """Seconds a claim lasts unless renewed (``ASSAY_CLAIM_LEASE_S``, default 60)."""
    return float(os.environ.get("ASSAY_CLAIM_LEASE_S") or 60)


def poll_s(store: Store) -> float:
    """Seconds between a waiter's looks (``ASSAY_CLAIM_POLL_S``; default 0.2 local, 1 remote:
    each look on an object store is a PUT and a listing)."""
    env = os.environ.get("ASSAY_CLAIM_POLL_S")
    return float(env) if env else (1.0 if store.remote else 0.2)


class _Other(TypedDict):
    """Another live claim of a journal: the keys it holds and where its document is."""

    keys: list[str]
    where: str


def _lapsed(doc: Mapping[str, Any], mtime: float, now: float) -> bool:
    """Whether a claim document written at ``mtime`` (the store's stamp) has lapsed at ``now``
    (the store's stamp of a file just written): its holder stopped renewing it."""
    return float(doc.get("ttl") or 0) - (now - mtime) <= 0


def _claim_doc(store: Store, rel: str) -> dict[str, Any] | None:
    """The claim document at ``rel``, or None when it is not one (absent, or another file)."""
    data = store.read_file(rel)
    try:
        doc = json.loads(data) if data is not None else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a claim document is written whole or not at all: this is no claim
    return doc if isinstance(doc, dict) and doc.get("kind") == "claim" else None


def lapsed_claims(store: Store) -> list[Entry]:
    """The claim documents of every journal whose lease lapsed: their claimants died (or were
    cut off) without releasing them, and no live run of that journal looked since (one would
    have removed them). Judged by the store's clock alone, as claimants judge each other: a
    marker written now gives the store's "now", compared with each claim's last-modified stamp.
    ``assay store gc`` removes them.

    Example:
        >>> import tempfile
        >>> st = Store(tempfile.mkdtemp())
        >>> st.write_file("claims/ab/dead.json", canonical_json({"kind": "claim", "ttl": 0,
        ...                                                     "keys": ["gen:1"]}))
        >>> live = Claims(st, "journals/cd.jsonl"); live.claim(["gen:2"])
        ['gen:2']
        >>> [e.rel for e in lapsed_claims(st)]
        ['claims/ab/dead.json']
        >>> live.release()
    """
    clock = f"claims/clock-{uuid.uuid4().hex}.json"
    store.write_file(clock, canonical_json({"kind": "clock"}))
    try:
        entries = store.entries("claims")
        now = next(e.mtime for e in entries if e.rel == clock)
        out = []
        for e in entries:
            if e.rel == clock or not e.rel.endswith(".json"):
                continue
            doc = _claim_doc(store, e.rel)
            if doc is not None and _lapsed(doc, e.mtime, now):
                out.append(e)
        return out
    finally:
        with contextlib.suppress(StoreError):
            store.delete_file(clock)


class Claims:
    """This process's claim on requests of one journal (see module docstring). Thread-safe."""

    def __init__(self, store: Store, journal_rel: str, ttl: float | None = None) -> None:
        self.store = store
        hexd = journal_rel.rsplit("/", 1)[-1].removesuffix(".jsonl")
        self.folder = f"claims/{hexd}"
        self.rel = f"{self.folder}/{uuid.uuid4().hex}.json"
        self.ttl = lease_s() if ttl is None else ttl
        self.keys: set[str] = set()
        self._lock = threading.Lock()
        self._written = False
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    # -- this claim ----------------------------------------------------------------------
    def _write(self) -> None:
        with self._lock:
            doc = {"kind": "claim", "ttl": self.ttl, "keys": sorted(self.keys),
                   "host": socket.gethostname(), "pid": os.getpid()}
            self.store.write_file(self.rel, canonical_json(doc))
            self._written = True

    def claim(self, keys: Iterable[str]) -> list[str]:
        """Claim ``keys`` (added to what this claim holds); the ones now this claimant's to
        send, in the order given. The rest are held by another live claim: wait for them."""
        want = list(dict.fromkeys(keys))
        with self._lock:
            self.keys.update(want)
        self._write()  # before the listing: a racer listing after this sees it
        others = self._others()
        taken = {k for doc in others for k in doc["keys"]}
        yielded = [k for k in want if k in taken]
        if yielded:
            with self._lock:
                self.keys.difference_update(yielded)
            self._write()
        self._renew()
        return [k for k in want if k not in taken]

    def drop(self, keys: Iterable[str]) -> None:
        """Stop claiming ``keys`` (answered and journalled, or given up)."""
        with self._lock:
            self.keys.difference_update(keys)

    def held_by_others(self, keys: Iterable[str]) -> set[str]:
        """Those of ``keys`` another live claim holds (this claim is rewritten first: it is
        the store's "now" for judging the others' leases, and a renewal)."""
        self._write()
        taken = {k for doc in self._others() for k in doc["keys"]}
        return {k for k in keys if k in taken}

    def release(self) -> None:
        """Remove this claim (call after its answers are journalled: a waiter that then finds
        a key unclaimed and not answered asks it itself). Idempotent."""
        if self._stop is not None:
            self._stop.set()
            assert self._thread is not None
            self._thread.join()
            self._stop = self._thread = None
        with self._lock:
            self.keys.clear()
            if not self._written:
                return
            self._written = False
        with contextlib.suppress(StoreError):  # a lapsed lease needs no removal
            self.store.delete_file(self.rel)

    # -- the others ----------------------------------------------------------------------
    def _others(self) -> list[_Other]:
        """The other live claims of this journal; lapsed ones are removed (their holder died)."""
        entries = self.store.entries(self.folder)
        now = next((e.mtime for e in entries if e.rel == self.rel), None)
        out: list[_Other] = []
        for e in entries:
            if e.rel == self.rel or not e.rel.endswith(".json"):
                continue
            doc = _claim_doc(self.store, e.rel)
            if doc is None:
                continue
            if now is not None and _lapsed(doc, e.mtime, now):
                # lapsed: its holder stopped renewing (killed, or cut off from the store)
                with contextlib.suppress(StoreError):
                    self.store.delete_file(e.rel)
                continue
            out.append({"keys": list(doc.get("keys") or []), "where": e.where})
        return out

    def _renew(self) -> None:
        """Rewrite this claim every ttl/3 until released, so it never lapses while we run."""
        if self._thread is not None:
            return
        stop = self._stop = threading.Event()

        def renew() -> None:
            while not stop.wait(max(self.ttl / 3, 0.05)):
                with contextlib.suppress(StoreError):
                    self._write()

        self._thread = threading.Thread(target=renew, name="assay-claim-lease", daemon=True)
        self._thread.start()
