"""Every wait on an object store is bounded (reads, listings, journal segments, not only the
write-behind); a failure mid-run poisons the store for the rest of the run (later requests raise
at once, as an outage: exit 1); a pickled store asks nothing of the store until used."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from assay import store, store_files
from assay.errors import StoreError, StoreIOError, StoreTimeoutError
from assay.models.journal import Journal
from assay.store import Store
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]


def _hang(monkeypatch: pytest.MonkeyPatch, method: str, prefix: str) -> threading.Event:
    """``ObjectFiles.<method>`` never answers for paths under ``prefix`` until the returned
    event is set (a frozen server), and counts every call in ``event.calls``."""
    real = getattr(store_files.ObjectFiles, method)
    gate = threading.Event()
    gate.calls = []  # type: ignore[attr-defined]

    def frozen(self, rel, *a, **kw):  # type: ignore[no-untyped-def]
        gate.calls.append(rel)  # type: ignore[attr-defined]
        if rel.startswith(prefix):
            gate.wait(120)  # longer than any test: without a bound, nothing fails
        return real(self, rel, *a, **kw)

    monkeypatch.setattr(store_files.ObjectFiles, method, frozen)
    return gate


def test_a_journal_segment_is_bounded_and_the_failure_poisons_the_run(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "PUT_WAIT_S", 0.3)
    url = s3.url("journal-frozen")
    st = Store(url)
    gate = _hang(monkeypatch, "write", "journals/")
    reads = _hang(monkeypatch, "read_with_mtime", "-")  # counts reads, never holds one
    try:
        with pytest.raises(StoreTimeoutError) as caught:  # told again as the run's scope ends
            with st.in_use(write_behind=True):
                key = st.put_json({"before": 1})
                j = Journal(st, "gshard:" + "cd" * 32)
                j.append({"key": "k1", "status": "ok", "completion": "x"})
                with pytest.raises(StoreTimeoutError) as seg:
                    j.close()  # the segment's PUT is never answered
                msg = str(seg.value)
                assert st.location in msg and "journals/" in msg
                assert "ASSAY_STORE_PUT_WAIT_S" in msg and seg.value.internal
                # poisoned: every later request of the run raises at once, asking nothing
                n = len(reads.calls)  # type: ignore[attr-defined]
                with pytest.raises(StoreTimeoutError, match="asks nothing more"):
                    st.get_ref("stage:anything")  # an outage, not a cache miss
                with pytest.raises(StoreTimeoutError):
                    st.get_json("doc:" + "0" * 64)  # (``key`` is in memory: no request)
                with pytest.raises(StoreTimeoutError):  # a journal keeps no answer either
                    Journal(st, "gshard:" + "ef" * 32).append({"key": "k2", "status": "ok"})
                assert len(reads.calls) == n  # type: ignore[attr-defined]
        assert st.location in str(caught.value)
        gate.set()  # the store answers again: the next run asks it again
        with st.in_use(write_behind=True):
            assert st.get_json(key) == {"before": 1}
    finally:
        gate.set()


def test_a_read_that_is_never_answered_is_bounded_outside_a_run_too(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "PUT_WAIT_S", 0.3)
    st = Store(s3.url("read-frozen"))
    key = st.put_json({"r": 1})
    other = Store(s3.url("read-frozen"))  # no memory of the blob: it must ask the server
    gate = _hang(monkeypatch, "read_with_mtime", "blobs/")
    try:
        with pytest.raises(StoreTimeoutError, match="reading blobs/"):
            other.get_json(key)
        with pytest.raises(StoreTimeoutError, match="listing journals/"):
            _hang(monkeypatch, "list", "journals")
            other.journal_entries()
    finally:
        gate.set()


def test_a_failure_mid_run_is_an_outage_and_at_the_start_a_setting(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    real = store_files.ObjectFiles.list

    def refused(self, prefix):  # type: ignore[no-untyped-def]
        # what pyarrow says when the server is gone: an OSError, wrapped by ObjectFiles
        raise self._err("listing", prefix, OSError("connection refused"))

    st = Store(s3.url("mid-run"))
    with pytest.raises(StoreIOError) as caught:
        with st.in_use():  # the lease: the store answered when the run began
            monkeypatch.setattr(store_files.ObjectFiles, "list", refused)
            st.journal_entries()
    assert caught.value.internal and st.location in str(caught.value)  # exit 1, naming it
    monkeypatch.setattr(store_files.ObjectFiles, "list", real)
    with st.in_use():  # the run's end cleared it
        assert st.journal_entries() == []
    # a store that never answered in this process: its settings are wrong (exit 2)
    monkeypatch.setattr(store_files.ObjectFiles, "list", refused)
    with pytest.raises(StoreError) as first:
        Store(s3.url("never-answered")).journal_entries()
    assert not getattr(first.value, "internal", False)


def test_unpickling_an_object_store_asks_nothing_and_needs_no_credentials(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.fs

    url = s3.url("pickled-lazy")
    key = Store(url).put_json({"lazy": 1})
    data = pickle.dumps(Store(url))

    class NoClient:
        @staticmethod
        def from_uri(*a: object, **kw: object) -> None:
            raise AssertionError("unpickling a store opened the object store")

    with monkeypatch.context() as m:
        m.setattr(pyarrow.fs, "FileSystem", NoClient)
        worker = pickle.loads(data)
    assert worker.location == url
    assert worker.get_json(key) == {"lazy": 1}  # its first use opens it, here
    # a process without the credentials unpickles it too (a scheduler that only routes it)
    env = {k: v for k, v in os.environ.items()
           if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    code = ("import pickle, sys; st = pickle.loads(sys.stdin.buffer.read()); "
            "print(st.location, st._raw._fs is None)")
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                         timeout=60, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode().split() == [url, "True"]


class _Held:
    """Files whose PUTs wait until released, then fail (a write abandoned by a failed run)."""

    remote, location = True, "mem://held"

    def __init__(self) -> None:
        self.release = threading.Event()

    def where(self, rel: str) -> str:
        return f"{self.location}/{rel}"

    def write(self, rel: str, parts, *, durable: bool = True) -> None:  # type: ignore[no-untyped-def]
        assert self.release.wait(30)
        raise StoreError(f"store {self.location}: writing {rel} failed: reset")


def test_a_write_of_an_earlier_run_failing_late_does_not_poison_the_next() -> None:
    b = store._Behind("mem://held")
    held = _Held()
    b.enter()
    b.depth = 1
    b.submit(held, "blobs/old", b"x")  # the first run ends before its write does
    b.depth = 0
    b.leave()
    b.enter()  # the next run, in the same process
    try:
        held.release.set()  # now the old write fails
        with b.lock:
            assert b.lock.wait_for(lambda: "blobs/old" not in b.pending, 30)
        b.submit(_Ok(), "blobs/new", b"y")  # not refused for the earlier run's failure
        b.flush()
    finally:
        b.leave()


class _Ok(_Held):
    def write(self, rel: str, parts, *, durable: bool = True) -> None:  # type: ignore[no-untyped-def]
        pass
