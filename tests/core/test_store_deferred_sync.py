"""A local store inside a study's ``in_use(write_behind=True)``: writes land at once, their
fsyncs wait for the scope's end (or ``flush``) and are issued together (issue 50: three fsyncs
per shard were most of a small shard's store time); outside it every write is fsynced as made."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pytest

from assay.errors import StoreFullError
from assay.hashing import canonical_json
from assay.store import Store


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files fsynced from now on (by path), in order."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def _files(root: Path) -> set[str]:
    return {str(p) for sub in ("blobs", "refs") for p in (root / sub).rglob("*") if p.is_file()}


def test_a_study_scope_syncs_its_writes_at_its_end_not_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")
    synced = _spy(monkeypatch)
    with st.in_use(write_behind=True):
        t = st.put_table(pa.table({"x": [1, 2, 3]}))
        d = st.put_json({"outputs": {"rows": t}})
        st.set_ref("stage:x", d)
        # in place at once: another Store (another process) reads them now
        other = Store(tmp_path / "store")
        assert other.get_ref("stage:x")["blob"] == d and other.get_table(t).num_rows == 3
        assert synced == []  # none synced yet
    written = _files(tmp_path / "store")
    assert len(written) == 3 and set(synced) == written  # all synced as the scope ended
    assert len(synced) == 3


def test_flush_syncs_what_was_written_so_far(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")
    synced = _spy(monkeypatch)
    with st.in_use(write_behind=True):
        k = st.put_json({"a": 1})
        assert synced == []
        st.flush()  # what a study does before run.json names its outputs
        assert synced == [str(st._blob_path(k))]
        st.put_json({"b": 2})
    assert len(synced) == 2  # the second at the scope's end; the first not again


def test_outside_a_study_scope_each_write_is_synced_as_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")
    synced = _spy(monkeypatch)
    with st.in_use():  # a scope without write_behind (a cluster's flow) keeps them too
        k = st.put_json({"a": 1})
        # the temp file, before its rename into place
        assert len(synced) == 1 and f".{k.split(':')[1]}.json." in synced[0]
    st.set_ref("r", k)
    assert len(synced) == 2


def test_a_full_disk_at_the_deferred_sync_names_the_store_and_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")

    def full(fd: int) -> None:  # the kernel reports the lost write at fsync
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(StoreFullError) as caught, st.in_use(write_behind=True):
        st.put_json({"a": 1})
        monkeypatch.setattr(os, "fsync", full)
    sha = hashlib.sha256(canonical_json({"a": 1})).hexdigest()
    path = tmp_path / "store" / "blobs" / sha[:2] / f"{sha}.json"
    assert f"store {tmp_path / 'store'}: writing {path} failed" in str(caught.value)
    assert "disk is full" in str(caught.value)


def test_the_scope_s_own_error_is_not_hidden_by_a_failing_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(KeyError), st.in_use(write_behind=True):
        st.put_json({"a": 1})
        monkeypatch.setattr(os, "fsync", full)
        raise KeyError("the node's failure")


def test_a_long_run_syncs_in_batches_not_only_at_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import assay.store

    monkeypatch.setattr(assay.store, "SYNC_BATCH", 3)
    st = Store(tmp_path / "store")
    synced = _spy(monkeypatch)
    with st.in_use(write_behind=True):
        keys = [st.put_json({"i": i}) for i in range(7)]
        assert len(synced) == 6  # two batches of 3, by the writers that filled them
    assert sorted(synced) == sorted(str(st._blob_path(k)) for k in keys)
