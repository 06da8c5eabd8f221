"""max_connections holds across a Dask cluster: two worker processes generating shards against
one server never have more requests in flight there than the spec allows (measured at the
server), and they do reach it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cluster import (
    assert_cap_shared,
    dask_cluster,
    gpu_turns,
    hold_gpu,
    write_served_study,
)
from tests.helpers.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_workers_share_one_max_connections(prefect_server: str, s3: object,
                                               tmp_path: Path) -> None:
    srv = OpenAIServer(["m"], latency=0.2).start()
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server}
        with dask_cluster(2, env, cwd=tmp_path, logs=tmp_path / "cluster",
                          nthreads=2) as address:
            spec = write_served_study(tmp_path, "slots", srv.base_url,
                                      f'{{runner: dask, address: "{address}", shard_rows: 24}}')
            run = subprocess.run([str(Path(sys.executable).with_name("assay")), "run", str(spec),
                                  "--store", s3.url("slots"),  # type: ignore[attr-defined]
                                  "--output", str(tmp_path / "out")],
                                 cwd=tmp_path, env=env, capture_output=True, text=True,
                                 timeout=400)
        assert_cap_shared(run, srv)
    finally:
        srv.stop()


@pytest.mark.slow
def test_the_gpu_slot_holds_across_workers(prefect_server: str, tmp_path: Path) -> None:
    from distributed import Client

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server}
    log = tmp_path / "slot.log"
    with dask_cluster(2, env, cwd=tmp_path, logs=tmp_path / "cluster") as address:
        with Client(address, timeout=60) as client:
            workers = sorted(client.scheduler_info()["workers"])
            futs = [client.submit(hold_gpu, str(log), f"t{i}", workers=[workers[i % 2]],
                                  pure=False) for i in range(4)]
            client.gather(futs)
    assert gpu_turns(log) == ["enter", "exit"] * 4, log.read_text()
