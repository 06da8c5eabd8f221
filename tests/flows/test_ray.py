"""runner: ray runs the study graph on a local Ray cluster (prefect-ray) with the same rows and
report.json as the local runner, its store on S3 (what a Ray cluster without a shared disk
needs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]

SPEC = """
name: raytest
sources:
  - name: model
    kind: file
    path: data/own_completions.jsonl
    fields: {prompt: question, completion: response, reference: gold, task_id: id}
    verifier: {kind: numeric, params: {tol: 1.0e-6}}
measure:
  pass_at: {k: 4}
execution: {runner: ray, shard_rows: 40}
"""


@pytest.mark.slow
def test_ray_runner_matches_the_local_runner(prefect_server: str, s3: S3Server,
                                             tmp_path: Path) -> None:
    pytest.importorskip("prefect_ray")
    from assay import stages
    from assay.spec import load_spec
    from assay.stages.finish import finish_run
    from assay.store import Store

    (tmp_path / "data").mkdir()
    shutil.copy(ROOT / "configs" / "data" / "own_completions.jsonl", tmp_path / "data")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server,
           "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    run = subprocess.run([str(Path(sys.executable).with_name("assay")), "run", str(spec),
                          "--store", s3.url("ray"), "--output", str(tmp_path / "out")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "grade[model shard 4/4]" in run.stderr, run.stderr[-3000:]
    want = stages.run_study(load_spec(spec), Store(tmp_path / "local"), progress=None)
    files = stages.report_files(Store(tmp_path / "local"), want.report)
    assert (tmp_path / "out" / "report.json").read_bytes() == files["report.json"]
    finish_run(Store(tmp_path / "local"), load_spec(spec), want, tmp_path / "local-out", 0.0)
    assert ((tmp_path / "out" / "rows" / "model.parquet").read_bytes()
            == (tmp_path / "local-out" / "rows" / "model.parquet").read_bytes())
