"""runner: ray runs the study graph on a local Ray cluster (prefect-ray) with the same rows and
report.json as the local runner, its store on S3 (what a Ray cluster without a shared disk
needs); a model server's max_connections and the gpu slot hold across the Ray workers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.cluster import (
    assert_cap_shared,
    gpu_turns,
    local_reference,
    write_served_study,
)
from tests.helpers.openai_server import OpenAIServer
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]


def _assay_run_on_ray(spec: Path, store: str, prefect_server: str,
                      tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``assay run spec --store store`` as a user runs it (a local Ray cluster, bounded)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server,
           "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([str(Path(sys.executable).with_name("assay")), "run", str(spec),
                           "--store", store, "--output", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)


@pytest.mark.slow
def test_ray_runner_matches_the_local_runner_and_shares_max_connections(
        prefect_server: str, s3: S3Server, tmp_path: Path) -> None:
    """A served study on two Ray workers, its store on S3: max_connections holds across the
    worker processes (a named detached actor), measured at the server (never more than 4 in
    flight, and 4 reached), and the rows and report.json equal the local runner's byte for
    byte (one Ray cluster for both checks: each start costs the suite tens of seconds)."""
    pytest.importorskip("prefect_ray")
    srv = OpenAIServer(["m"], latency=0.2).start()
    try:
        spec = write_served_study(tmp_path, "rayslots", srv.base_url,
                                  "{runner: ray, workers: 2, shard_rows: 24}")
        run = _assay_run_on_ray(spec, s3.url("rayslots"), prefect_server, tmp_path)
        assert_cap_shared(run, srv)
        assert "grade[a shard 4/4]" in run.stderr, run.stderr[-3000:]
        want = local_reference(spec, tmp_path)  # asks the (deterministic) server again
        assert set(want) == {"report.json", "rows/a.parquet"}
        for f, data in want.items():
            assert (tmp_path / "out" / f).read_bytes() == data, f
    finally:
        srv.stop()


@pytest.mark.slow
def test_the_gpu_slot_holds_across_ray_workers(prefect_server: str, tmp_path: Path) -> None:
    """The ``gpu`` slot (a Prefect global concurrency limit) holds across two Ray worker
    processes: one holder at a time."""
    pytest.importorskip("ray")
    log = tmp_path / "slot.log"
    code = textwrap.dedent(f"""
        import os, ray
        from tests.helpers.cluster import hold_gpu
        ray.init(num_cpus=2, include_dashboard=False, runtime_env={{"env_vars": {{
            "PYTHONPATH": {str(ROOT)!r}, "PREFECT_API_URL": {prefect_server!r}}}}})
        hold = ray.remote(num_cpus=1)(lambda i: hold_gpu({str(log)!r}, f"t{{i}}-{{os.getpid()}}"))
        ray.get([hold.remote(i) for i in range(4)], timeout=240)
        ray.shutdown()
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server,
           "RAY_USAGE_STATS_ENABLED": "0"}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert gpu_turns(log) == ["enter", "exit"] * 4, log.read_text()
    holders = {w.split("-")[1] for w in log.read_text().split() if w.startswith("t")}
    assert len(holders) >= 2, log.read_text()  # worker processes took turns
