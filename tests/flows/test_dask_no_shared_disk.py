"""runner: dask on workers that share no disk with the driver (each sees an empty tmpfs over the
driver's folder): the store on S3 carries every stage's inputs and outputs, and the rows and
report.json equal a local run's; a local store is refused before any work, naming the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cluster import can_hide_folders, dask_cluster, local_reference, write_study
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]
ASSAY = str(Path(sys.executable).with_name("assay"))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_hide_folders(),
                                 reason="needs root and unshare to hide the driver's folder")]


def _assay(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ASSAY, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=400)


def test_workers_without_the_drivers_disk_match_a_local_run(
        prefect_server: str, s3: S3Server, tmp_path: Path) -> None:
    image = tmp_path / "image"  # what a worker image holds: the spec and its data
    driver = tmp_path / "driver"  # the driver's working folder: workers see it empty
    driver.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server}
    image.mkdir()
    with dask_cluster(2, env, cwd=image, logs=tmp_path / "cluster", hide=driver) as address:
        spec = write_study(image, "nodisk",
                           f'{{runner: dask, address: "{address}", shard_rows: 40}}')
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
    want = local_reference(spec, tmp_path)
    for d in ("out", "again"):
        for f, data in want.items():
            assert (driver / d / f).read_bytes() == data, (d, f)
