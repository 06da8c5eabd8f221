"""runner: dask on workers that share no disk with the driver (each sees an empty tmpfs over the
driver's folder): the store on S3 carries every stage's inputs and outputs, and the rows and
report.json equal a local run's; a local store is refused before any work, naming the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cluster import can_hide_folders, dask_cluster
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]
ASSAY = str(Path(sys.executable).with_name("assay"))

SPEC = """
name: nodisk
sources:
  - name: model
    kind: file
    path: data/own_completions.jsonl
    fields: {prompt: question, completion: response, reference: gold, task_id: id}
    verifier: {kind: numeric, params: {tol: 1.0e-6}}
measure:
  pass_at: {k: 4}
execution: {runner: dask, address: "ADDRESS", shard_rows: 40}
"""

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_hide_folders(),
                                 reason="needs root and unshare to hide the driver's folder")]


def _assay(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ASSAY, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=400)


def test_workers_without_the_drivers_disk_match_a_local_run(
        prefect_server: str, s3: S3Server, tmp_path: Path) -> None:
    from assay import stages
    from assay.spec import load_spec
    from assay.store import Store

    image = tmp_path / "image"  # what a worker image holds: the spec and its data
    (image / "data").mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "data" / "own_completions.jsonl", image / "data")
    driver = tmp_path / "driver"  # the driver's working folder: workers see it empty
    driver.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server}
    with dask_cluster(2, env, cwd=image, logs=tmp_path / "cluster", hide=driver) as address:
        spec = image / "spec.yaml"
        spec.write_text(SPEC.replace("ADDRESS", address))
        # a local store: each worker would write into its own copy of driver/.assay
        local = _assay(["run", str(spec), "--store", str(driver / ".assay"), "--output",
                        str(driver / "refused")], driver, env)
        assert local.returncode == 2, local.stderr[-3000:]
        assert f"workers do not see {driver / '.assay'}" in local.stderr, local.stderr[-3000:]
        assert "object-store URL" in local.stderr
        assert not (driver / ".assay" / "refs").exists()  # refused before any stage ran
        # the store on S3: the workers write every output there, the driver reads it
        url = s3.url("nodisk")
        run = _assay(["run", str(spec), "--store", url, "--output", str(driver / "out")],
                     driver, env)
        assert run.returncode == 0, run.stderr[-4000:]
        assert "grade[model shard 4/4]" in run.stderr, run.stderr[-3000:]
        again = _assay(["run", str(spec), "--store", url, "--output", str(driver / "again")],
                       driver, env)
        assert again.returncode == 0 and "0 computed" in again.stderr, again.stderr[-3000:]
    want = stages.run_study(load_spec(spec), Store(tmp_path / "local"), progress=None)
    files = stages.report_files(Store(tmp_path / "local"), want.report)
    for d in ("out", "again"):
        assert (driver / d / "report.json").read_bytes() == files["report.json"]
        got = (driver / d / "rows" / "model.parquet").read_bytes()
        assert got == _rows_file(tmp_path, want)


def _rows_file(tmp_path: Path, run: object) -> bytes:
    """The rows file a local-runner run writes for the same study."""
    from assay.spec import load_spec
    from assay.stages.finish import finish_run
    from assay.store import Store

    out = tmp_path / "local-out"
    finish_run(Store(tmp_path / "local"), load_spec(tmp_path / "image" / "spec.yaml"), run, out,
               0.0)
    return (out / "rows" / "model.parquet").read_bytes()
