"""Deploy deployments/prefect.yaml to a real `prefect server start`, run it through a process
worker, and wait for completion (select with `-m server`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

SPEC = """
name: served
sources:
  - name: model
    kind: file
    path: answers.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
measure:
  pass_at: {k: 2}
"""


def _prefect(*args: str, cwd: Path, env: dict[str, str]) -> str:
    p = subprocess.run([str(BIN / "prefect"), "--no-prompt", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"prefect {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.mark.server
@pytest.mark.slow
def test_nightly_deploys_runs_and_completes(prefect_server: str, tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.deployments import run_deployment

    # A project dir in tmp holding only a copy of the deployment file, so nothing is written into
    # the repository: its entrypoints are module paths the worker imports from the installed
    # package, not files beside it.
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(ROOT / "deployments" / "prefect.yaml", proj / "prefect.yaml")
    (proj / "answers.jsonl").write_text("".join(
        f'{{"id": "t{i}", "q": "q{i}", "c": "c{j}", "r": {int((i + j) % 3 > 0)}}}\n'
        for i in range(12) for j in range(2)))
    (proj / "served.yaml").write_text(SPEC)
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "ASSAY_STORE": str(tmp_path / "store")}

    _prefect("work-pool", "create", "assay-local", "--type", "process", cwd=proj, env=env)
    _prefect("deploy", "--all", "--prefect-file", "prefect.yaml", cwd=proj, env=env)

    cfg = yaml.safe_load((proj / "prefect.yaml").read_text())["deployments"][0]
    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("assay-nightly/nightly")
        assert dep.global_concurrency_limit is not None and dep.global_concurrency_limit.limit == 1
        (sched,) = dep.schedules
        assert sched.schedule.cron == cfg["schedules"][0]["cron"]
        assert sched.schedule.timezone == cfg["schedules"][0]["timezone"]
        assert dep.work_pool_name == "assay-local"

    def night(date: str) -> Any:
        return run_deployment("assay-nightly/nightly", timeout=0, parameters={
            "specs": ["served.yaml"], "root": str(tmp_path / "nights"), "night": date})

    def wait_final(run_id: Any) -> Any:
        deadline = time.monotonic() + 180
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                state = client.read_flow_run(run_id).state
                if state is not None and state.is_final():
                    return state
                time.sleep(1)
        return state

    run = night("2026-11-30")
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", "assay-local", "--type", "process",
             "--prefetch-seconds", "5"],
            cwd=proj, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        state = wait_final(run.id)
        assert state is not None and state.type == StateType.COMPLETED, (
            f"flow run ended {state}; worker log:\n{(tmp_path / 'worker.log').read_text()[-3000:]}")
        # the next night every answer is wrong: an expected regression, Failed with its
        # message, and in the worker's output one line, not a traceback
        (proj / "answers.jsonl").write_text("".join(
            f'{{"id": "t{i}", "q": "q{i}", "c": "c{j}", "r": 0}}\n'
            for i in range(12) for j in range(2)))
        state = wait_final(night("2026-12-01").id)
        assert state.type == StateType.FAILED, f"ended {state}"
        assert "gated metric regressed: served/model/pass@1" in (state.message or "")
        # the engine logs the outcome after the state is set: wait for its line (bounded)
        line = ("the flow run ends Failed: night 2026-12-01: gated metric regressed: "
                "served/model/pass@1")
        end = time.monotonic() + 60
        while line not in (wlog := (tmp_path / "worker.log").read_text()):
            assert time.monotonic() < end, wlog[-5000:]
            time.sleep(0.5)
        assert "Traceback" not in wlog, wlog[-5000:]
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    out = tmp_path / "nights" / "served" / "2026-11-30"
    assert (out / "report.md").is_file() and (out / "nightly.md").is_file()
    assert "No previous night" in (out / "nightly.md").read_text()
