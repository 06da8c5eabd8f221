"""An object store's read of one small document retries a response cut mid-stream (another
process renewing or releasing a claim document while it is read: SeaweedFS cuts the body), so
two overlapping runs do not fail on it; a read that keeps failing is still the store's error."""

from __future__ import annotations

import io
from typing import Any

import pytest

from assay.errors import StoreError
from assay.store_files import READ_ATTEMPTS, ObjectFiles


class _Stream(io.BytesIO):
    def metadata(self) -> dict[bytes, bytes]:
        return {b"Last-Modified": b"2026-12-07T06:00:00Z"}


class _FS:
    """A filesystem whose reads follow a script: an exception to raise, or bytes to return."""

    def __init__(self, script: list[Any]) -> None:
        self.script, self.opened = list(script), 0

    def open_input_stream(self, path: str) -> _Stream:
        self.opened += 1
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return _Stream(step)


def _files(script: list[Any]) -> tuple[ObjectFiles, _FS]:
    f = ObjectFiles("s3://bucket/prefix", connect=False)
    fs = _FS(script)
    f._fs, f._base = fs, "bucket/prefix"
    return f, fs


def test_a_read_cut_mid_stream_is_read_again() -> None:
    cut = OSError("AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush "
                  "response stream")
    f, fs = _files([cut, b'{"kind": "claim"}'])
    assert f.read("claims/x/y.json") == b'{"kind": "claim"}' and fs.opened == 2


def test_a_document_removed_while_read_is_absent() -> None:
    f, fs = _files([OSError("cut"), FileNotFoundError("gone")])
    assert f.read("claims/x/y.json") is None and fs.opened == 2


def test_a_read_that_keeps_failing_is_the_stores_error() -> None:
    f, fs = _files([OSError("connection refused")] * READ_ATTEMPTS)
    with pytest.raises(StoreError, match="store s3://bucket/prefix: reading claims/x/y.json"):
        f.read("claims/x/y.json")
    assert fs.opened == READ_ATTEMPTS
