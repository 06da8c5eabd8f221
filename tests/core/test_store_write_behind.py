"""Writes published behind a study on a real S3 server (SeaweedFS): refs only after their blobs,
read-your-writes meanwhile, all published when ``in_use`` ends or the store is pickled, a failed
write fails the study and keeps its ref off the server; one request per small write."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from assay import store, store_files
from assay.errors import StoreError, StoreTimeoutError
from assay.store import Store
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]


def _on_server(url: str, name: str) -> dict | None:
    """The ref as another process sees it (the server's copy, nothing of this process's)."""
    code = f"from assay.store import Store; print(Store({url!r}).get_ref({name!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, check=True).stdout.strip()
    return None if out == "None" else eval(out)  # noqa: S307 (our own repr of a dict)


def test_refs_go_up_after_their_blobs_and_all_before_in_use_ends(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3.url("behind")
    published: list[tuple[str, float, float]] = []
    real = store_files.ObjectFiles.write
    gate = threading.Event()

    def held_blobs(self, rel, parts, *, durable=True):  # type: ignore[no-untyped-def]
        t0 = time.monotonic()
        if rel.startswith("blobs/"):
            gate.wait(30)  # uploads still running when set_ref returns (bounded)
        real(self, rel, parts, durable=durable)
        if not rel.startswith("leases/"):
            published.append((rel, t0, time.monotonic()))

    monkeypatch.setattr(store_files.ObjectFiles, "write", held_blobs)
    st = Store(url)
    with st.in_use(write_behind=True):
        tbl = st.put_table(pa.table({"x": list(range(1000))}))
        doc = st.put_json({"rows": tbl})
        st.set_ref("stage:a", doc, {"stage": "demo"})
        assert published == []  # the caller went on while nothing was uploaded yet
        assert _on_server(url, "stage:a") is None  # no ref ahead of its blobs
        # read your writes: this process (another Store object too) sees what is in flight
        other = Store(url)
        assert other.get_ref("stage:a")["blob"] == doc
        assert other.get_table(tbl).column("x").to_pylist() == list(range(1000))
        gate.set()
    # in_use ended: everything is on the server, the ref strictly after both blobs
    assert _on_server(url, "stage:a")["blob"] == doc
    ref_start = next(start for rel, start, _ in published if rel.startswith("refs/"))
    assert all(end <= ref_start for rel, _, end in published if rel.startswith("blobs/"))
    assert len(published) == 3


def test_pickling_publishes_first(s3: S3Server) -> None:
    url = s3.url("pickled")
    st = Store(url)
    with st.in_use(write_behind=True):
        st.set_ref("stage:p", st.put_json({"p": 1}))
        # a store sent to a worker: the worker reads the server, so it must hold the writes
        worker_side = pickle.loads(pickle.dumps(st))
        assert _on_server(url, "stage:p") is not None
        assert worker_side.get_ref("stage:p") is not None


def test_a_failed_write_fails_the_study_and_keeps_its_ref_off_the_server(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3.url("failed")
    real = store_files.ObjectFiles.write
    gate = threading.Event()

    def refuse_tables(self, rel, parts, *, durable=True):  # type: ignore[no-untyped-def]
        if rel.endswith(".parquet"):
            gate.wait(10)
            raise StoreError(f"store {self.location}: writing {rel} failed: refused")
        real(self, rel, parts, durable=durable)

    monkeypatch.setattr(store_files.ObjectFiles, "write", refuse_tables)
    st = Store(url)
    with pytest.raises(StoreError, match="refused"):  # raised as in_use ends
        with st.in_use(write_behind=True):
            tbl = st.put_table(pa.table({"x": [1]}))
            st.set_ref("stage:f", st.put_json({"rows": tbl}))
            gate.set()
            # the failure reaches the study's next write (so it stops there), and every one
            # after, until in_use ends and raises it
            deadline = time.monotonic() + 10
            with pytest.raises(StoreError, match="failed"):
                while time.monotonic() < deadline:
                    st.put_json({"later": time.monotonic()})
                    time.sleep(0.05)
    assert _on_server(url, "stage:f") is None  # the ref never named a missing blob
    monkeypatch.setattr(store_files.ObjectFiles, "write", real)
    with st.in_use(write_behind=True):  # the store works again afterwards
        st.set_ref("stage:g", st.put_json({"ok": 1}))
    assert _on_server(url, "stage:g") is not None


def test_a_small_write_is_one_request_and_a_large_one_still_whole(s3: S3Server) -> None:
    st = Store(s3.url("one-put"))
    f = st._files.fs  # type: ignore[attr-defined]
    assert f.__reduce__()[1][0]["allow_delayed_open"] is True  # PutObject, not a multipart
    big = bytes(range(256)) * (24 << 12)  # 24 MiB: several parts of a multipart upload
    key = st.put_bytes(big)
    assert Store(s3.url("one-put")).get_bytes(key) == big


def _hang_blobs(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Blob PUTs that never answer (until the returned event is set): a frozen object store."""
    real = store_files.ObjectFiles.write
    gate = threading.Event()

    def frozen(self, rel, parts, *, durable=True):  # type: ignore[no-untyped-def]
        if rel.startswith("blobs/"):
            gate.wait(120)  # longer than any test: without the bound, nothing fails
        real(self, rel, parts, durable=durable)

    monkeypatch.setattr(store_files.ObjectFiles, "write", frozen)
    return gate


def test_a_store_that_stops_answering_fails_the_study_at_the_bound(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "PUT_WAIT_S", 0.3)
    gate = _hang_blobs(monkeypatch)
    url = s3.url("frozen")
    try:
        st = Store(url)
        with pytest.raises(StoreTimeoutError) as caught:
            with st.in_use(write_behind=True):
                st.set_ref("stage:z", st.put_json({"z": 1}))
        msg = str(caught.value)
        assert "stopped answering" in msg and "ASSAY_STORE_PUT_WAIT_S" in msg
        assert st.location in msg and "blobs/" in msg  # where, and which write
        assert caught.value.internal  # not the user's input: exit 1 naming the node and log
        assert _on_server(url, "stage:z") is None  # the ref never went up ahead of its blob
        gate.set()  # the store answers again: the same process can use it (told once)
        with st.in_use(write_behind=True):
            st.set_ref("stage:y", st.put_json({"y": 1}))
        assert _on_server(url, "stage:y") is not None
    finally:
        gate.set()


def test_a_writer_waiting_for_memory_on_a_frozen_store_is_bounded_too(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "PUT_WAIT_S", 0.3)
    monkeypatch.setattr(store, "BEHIND_BYTES", 64)  # the first blob fills the budget
    gate = _hang_blobs(monkeypatch)
    try:
        st = Store(s3.url("frozen-budget"))
        with pytest.raises(StoreTimeoutError, match="room to write blobs/"):
            with st.in_use(write_behind=True):
                st.put_bytes(b"a" * 64)
                st.put_bytes(b"b" * 64)  # waits for room the frozen PUT never frees
    finally:
        gate.set()


class _Wire:
    """Files whose PUTs hold until released: counts the PUTs on the wire at once."""

    remote, location = True, "mem://wire"

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.inflight = self.most = 0
        self.held: set[str] = set()  # rels whose PUT stays open until released
        self.hold_all = True
        self.done: list[str] = []

    def where(self, rel: str) -> str:
        return f"{self.location}/{rel}"

    def write(self, rel: str, parts, *, durable: bool = True) -> None:  # type: ignore[no-untyped-def]
        with self.cv:
            self.inflight += 1
            self.most = max(self.most, self.inflight)
            self.cv.notify_all()
            assert self.cv.wait_for(lambda: not (self.hold_all or rel in self.held), 30)
            self.inflight -= 1
            self.done.append(rel)
            self.cv.notify_all()

    def wait_for(self, ready, what: str) -> None:  # type: ignore[no-untyped-def]
        with self.cv:
            assert self.cv.wait_for(ready, 30), what


def test_the_write_behind_widens_with_its_backlog_and_never_past_its_cap() -> None:
    b = store._Behind("mem://wire")
    wire = _Wire()
    # one write waiting: one PUT at a time (each costs the study's CPU)
    b.pending = {f"blobs/{i}": (b"", None, False) for i in range(3)}  # type: ignore[misc]
    assert b._width() == 1
    b.pending = {f"blobs/{i}": (b"", None, False) for i in range(40)}  # type: ignore[misc]
    assert b._width() == store.BEHIND_THREADS
    b.pending = {}
    try:
        for i in range(40):  # a backlog on a slow store: the wire fills to the cap
            b.submit(wire, f"blobs/{i}", b"x")
        wire.wait_for(lambda: wire.inflight == store.BEHIND_THREADS, "widened to the cap")
    finally:
        with wire.cv:
            wire.hold_all = False
            wire.cv.notify_all()
    b.flush()
    assert len(wire.done) == 40 and wire.most == store.BEHIND_THREADS


def test_a_ref_waits_for_the_blobs_before_it_not_for_other_refs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "BEHIND_BACKLOG", 1)  # a PUT on the wire per write waiting
    b = store._Behind("mem://wire")
    wire = _Wire()
    wire.hold_all = False
    wire.held = {"refs/a", "blobs/c"}
    try:
        b.submit(wire, "blobs/a", b"a")
        b.submit(wire, "refs/a", b"ra", barrier=True)  # its PUT hangs (a slow request)
        wire.wait_for(lambda: "blobs/a" in wire.done and wire.inflight == 1, "ref a on the wire")
        b.submit(wire, "blobs/b", b"b")
        b.submit(wire, "refs/b", b"rb", barrier=True)
        # ref b goes up beside the hanging ref a (it needs blob b, not ref a)
        wire.wait_for(lambda: "refs/b" in wire.done, "ref b published")
        assert "refs/a" not in wire.done
        b.submit(wire, "blobs/c", b"c")  # held
        b.submit(wire, "refs/c", b"rc", barrier=True)
        wire.wait_for(lambda: wire.inflight == 2, "blob c on the wire")
        assert "refs/c" not in wire.done  # a ref still waits for its blob
        with wire.cv:
            wire.held.discard("blobs/c")
            wire.cv.notify_all()
        wire.wait_for(lambda: "refs/c" in wire.done, "ref c published")
        assert wire.done.index("blobs/c") < wire.done.index("refs/c")
    finally:
        with wire.cv:
            wire.held.clear()
            wire.cv.notify_all()
    b.flush()


def test_a_flush_puts_every_write_waiting_on_the_wire() -> None:
    b = store._Behind("mem://wire")
    wire = _Wire()
    for i in range(3):  # a short backlog: one PUT at a time while the study computes
        b.submit(wire, f"blobs/{i}", b"x")
    wire.wait_for(lambda: wire.inflight == 1, "one on the wire")
    flusher = threading.Thread(target=b.flush)  # the study is done: nothing else needs CPU
    flusher.start()
    try:
        wire.wait_for(lambda: wire.inflight == 3, "all three on the wire while flushing")
    finally:
        with wire.cv:
            wire.hold_all = False
            wire.cv.notify_all()
        flusher.join(30)
    assert not flusher.is_alive() and sorted(wire.done) == [f"blobs/{i}" for i in range(3)]


def test_a_run_poisoned_by_a_blob_names_the_blobs_failure_not_the_ref_it_kept_off() -> None:
    """The ref's waiter can wake before the failed blob's own callback records it; the run's
    error must still be the blob's (the first failure), not "the ref was not written"."""
    import concurrent.futures

    from assay.errors import StoreIOError

    b = store._Behind("mem://wire")
    wire = _Wire()
    wire.hold_all = False
    blob_err = StoreError("store mem://wire: writing blobs/x failed: 503 SlowDown")
    failed: concurrent.futures.Future[None] = concurrent.futures.Future()
    failed.set_exception(blob_err)  # failed, its callback (which records it) not yet run
    b.enter()
    try:
        b.pending["blobs/x"] = (b"x", failed, False)
        b.held += 1
        b.submit(wire, "refs/x", b"rx", barrier=True)
        with b.lock:
            assert b.lock.wait_for(lambda: "refs/x" not in b.pending, 30)  # refused
        assert b.failed is blob_err
        with pytest.raises(StoreIOError) as told:
            b._check()
        assert str(told.value).endswith("writing blobs/x failed: 503 SlowDown"), told.value
        assert "refs/x" not in wire.done
    finally:
        b.leave()
