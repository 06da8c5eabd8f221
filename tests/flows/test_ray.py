"""runner: ray runs the study graph on a local Ray cluster (prefect-ray) with the same rows and
report.json as the local runner, its store on S3 (what a Ray cluster without a shared disk
needs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cluster import local_reference, write_study
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ray_runner_matches_the_local_runner(prefect_server: str, s3: S3Server,
                                             tmp_path: Path) -> None:
    pytest.importorskip("prefect_ray")
    spec = write_study(tmp_path, "raytest", "{runner: ray, shard_rows: 40}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server,
           "RAY_USAGE_STATS_ENABLED": "0"}
    run = subprocess.run([str(Path(sys.executable).with_name("assay")), "run", str(spec),
                          "--store", s3.url("ray"), "--output", str(tmp_path / "out")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "grade[model shard 4/4]" in run.stderr, run.stderr[-3000:]
    for f, data in local_reference(spec, tmp_path).items():
        assert (tmp_path / "out" / f).read_bytes() == data, f
