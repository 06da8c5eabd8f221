"""A full disk under a local store: the error names the store and the file, a journal line the
disk cut short stays a torn line of its own, and the rerun's journal verifies clean."""

from __future__ import annotations

import errno
import hashlib
import os
import warnings
from pathlib import Path

import pytest

from assay import upkeep
from assay.errors import StoreFullError
from assay.hashing import canonical_json
from assay.models import journal
from assay.models.journal import Journal
from assay.store import Store


def test_a_blob_write_on_a_full_disk_names_the_store_and_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")

    def full(fd: int) -> None:  # the kernel reports the lost write at fsync
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StoreFullError) as caught:
        st.put_json({"a": 1})
    msg = str(caught.value)
    sha = hashlib.sha256(canonical_json({"a": 1})).hexdigest()
    path = tmp_path / "store" / "blobs" / sha[:2] / f"{sha}.json"
    assert f"store {tmp_path / 'store'}: writing {path} failed" in msg
    assert "disk is full" in msg and caught.value.internal  # exit 1, not an input error
    monkeypatch.undo()
    assert not list((tmp_path / "store" / "blobs").rglob("*.tmp"))  # no temp file left


def test_a_journal_line_cut_by_a_full_disk_names_the_file_and_the_rerun_verifies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")
    j = Journal(st, "gshard:" + "ab" * 32)
    j.append({"key": "k1", "status": "ok", "completion": "one"})
    real = os.write

    def filling(fd: int, data: bytes) -> int:
        if fd != j._fd:
            return real(fd, data)
        if len(data) > 10:
            return real(fd, bytes(data[:10]))  # the disk takes ten bytes, then is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", filling)
    with pytest.raises(StoreFullError) as caught:
        j.append({"key": "k2", "status": "ok", "completion": "two"})
    monkeypatch.undo()
    j.close()
    assert str(j.path) in str(caught.value) and str(st.root) in str(caught.value)
    assert not j.path.read_bytes().endswith(b"\n")  # a torn line at the end
    # the rerun, with room again: its first line starts a new one
    again = Journal(st, "gshard:" + "ab" * 32)
    again.append({"key": "k2", "status": "ok", "completion": "two"})
    again.append({"key": "k3", "status": "ok", "completion": "three"})
    again.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the torn line is skipped, with a warning
        assert sorted(Journal(st, "gshard:" + "ab" * 32).load()) == ["k1", "k2", "k3"]
    v = upkeep.verify(st)
    assert v.corrupt == [] and [t["lines"] for t in v.torn] == ["1"]


def test_a_short_write_is_finished_not_dropped(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    st = Store(tmp_path / "store")
    j = Journal(st, "gshard:" + "ef" * 32)
    real = os.write

    def short(fd: int, data: bytes) -> int:  # the kernel may take part of a write
        return real(fd, bytes(data[:7])) if fd == j._fd else real(fd, data)

    monkeypatch.setattr(journal.os, "write", short)
    j.append({"key": "k1", "status": "ok", "completion": "one"})
    monkeypatch.undo()
    j.close()
    assert list(Journal(st, "gshard:" + "ef" * 32).load()) == ["k1"]
