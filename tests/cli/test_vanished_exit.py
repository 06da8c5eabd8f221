"""A stage output gone from the store after its node computed it, or an object store failing a
write mid-run, is an internal failure: exit 1 naming the node and run.log, never exit 2 ("a
problem in the inputs") with "rerun"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.cli import main
from tests.helpers.seaweed import S3Server


def _study(folder: Path, name: str) -> Path:
    """A six-row study of given completions and rewards, its spec in ``folder``."""
    (folder / "d.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": "x", "r": i % 2}) + "\n" for i in range(6)))
    spec = folder / "s.yaml"
    spec.write_text(f"name: {name}\nsources:\n  - {{name: m, kind: file, path: d.jsonl, "
                    "fields: {reward: r}}\n")
    return spec


@pytest.mark.slow
def test_an_output_that_vanished_exits_1_naming_the_log(
        prefect_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from assay.store import Store

    spec = _study(tmp_path, "gone")
    # every table a stage wrote reads back as missing: what a worker writing into a store the
    # driver cannot see looked like
    monkeypatch.setattr(Store, "get_table", lambda self, key: None)
    rc = main(["run", str(spec), "--store", str(tmp_path / "store"), "--output",
               str(tmp_path / "out"), "--no-view"])
    err = capsys.readouterr().err
    assert rc == 1, err[-3000:]
    line = next(ln for ln in err.splitlines() if ln.startswith("error: "))
    assert "vanished from" in line and str(tmp_path / "out" / "run.log") in line, line
    assert "StoreVanishedError" in line


@pytest.mark.slow
def test_an_object_store_failing_mid_run_exits_1_naming_the_log(
        prefect_server: str, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from assay import store_files
    from assay.errors import StoreError

    spec = _study(tmp_path, "refused")
    real = store_files.ObjectFiles.write

    def refuse_tables(self, rel, parts, *, durable=True):  # type: ignore[no-untyped-def]
        if rel.endswith(".parquet"):  # the store answered the canary; a stage's PUT fails
            raise StoreError(f"store {self.location}: writing {rel} failed: 503 SlowDown")
        real(self, rel, parts, durable=durable)

    monkeypatch.setattr(store_files.ObjectFiles, "write", refuse_tables)
    rc = main(["run", str(spec), "--store", s3.url("refused"), "--output",
               str(tmp_path / "out"), "--no-view"])
    err = capsys.readouterr().err
    assert rc == 1, err[-3000:]  # not "a problem in the inputs"
    line = next(ln for ln in err.splitlines() if ln.startswith("error: "))
    assert "503 SlowDown" in line and str(tmp_path / "out" / "run.log") in line, line
