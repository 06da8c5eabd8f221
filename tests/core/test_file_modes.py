"""Files assay writes (results, rows, run.json, store files) get the mode the umask gives an
ordinary file, not tempfile's 0600: a teammate who can read the page can read the report."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from assay.report import write_run_dir
from assay.store_files import atomic_write, open_files


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request: pytest.FixtureRequest):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_run_dir_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    import pyarrow as pa

    out = write_run_dir(tmp_path / "run", {"report.md": b"# r\n", "report.json": b"{}"},
                        {"qa": pa.table({"x": [1]})}, {"k": 1})
    files = [out / "report.md", out / "report.json", out / "run.json", out / "rows/qa.parquet"]
    assert {f.name: _mode(f) for f in files} == {f.name: 0o666 & ~umask for f in files}


def test_store_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    files = open_files(str(tmp_path / "st"))
    files.write("blobs/ab/x.json", [b"{}"])
    atomic_write(tmp_path / "plain.txt", b"x", durable=False)
    assert _mode(tmp_path / "st/blobs/ab/x.json") == 0o666 & ~umask
    assert _mode(tmp_path / "plain.txt") == 0o666 & ~umask
    # the temp file left nothing behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "st"]


class _Failing:
    def __iter__(self):
        yield b"a"
        raise RuntimeError("disk full")


def test_a_failed_write_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "f", _Failing())  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
