"""A stop ends a night run by a Prefect process worker on time against a frozen model server.

The shipped deployment (deployments/prefect.yaml) on a real `prefect server start`, a
`prefect worker start` subprocess, and the loopback OpenAI server in its own process,
SIGSTOPped mid-generation (its kernel still accepts connections; nothing answers). The spec's
``stall_after`` decides; the flow run must end Failed with the stop's message, the webhook get
one alert, the worker's flow-run process exit, and the rerun of the night ask only the rest.
A run stuck on the frozen server with no watchdog is cancelled from Prefect the same way.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.helpers.openai_server import hung_study, served_in_child
from tests.helpers.webhook_receiver import webhook_receiver

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POOL, DEPLOYMENT = "assay-stop-pool", "assay-nightly/nightly-stop"
N_SAMPLES = 80  # 40 tasks, k=2
#: what the stop must beat by far: without it each request waits out timeout_s (300 s) and
#: its retries; generous for a loaded two-core machine
BOUND_S = 30.0


def until(cond: Callable[[], Any], bound: float, what: str, log: Path | None = None) -> Any:
    end = time.monotonic() + bound
    while not (got := cond()):
        if time.monotonic() > end:
            tail = log.read_text()[-4000:] if log is not None and log.is_file() else ""
            raise AssertionError(f"not within {bound} s: {what}\n{tail}")
        time.sleep(0.05)
    return got


def _prefect(*args: str, cwd: Path, env: dict[str, str]) -> None:
    p = subprocess.run([str(BIN / "prefect"), "--no-prompt", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"prefect {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}"


@pytest.fixture(scope="module")
def project(prefect_server: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Any]]:
    """The shipped deployment (its own pool and name, so other tests' workers never take its
    runs) deployed from a project folder in tmp, and a process worker serving it."""
    tmp_path = tmp_path_factory.mktemp("deployed")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "flows").symlink_to(ROOT / "flows")
    cfg = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    (dep,) = [d for d in cfg["deployments"] if d["entrypoint"] == "assay.flows.nightly.nightly"]
    dep["name"] = DEPLOYMENT.split("/")[1]
    dep["work_pool"]["name"] = POOL
    dep["schedules"] = []  # the test triggers its runs
    cfg["deployments"] = [dep]
    (proj / "prefect.yaml").write_text(yaml.safe_dump(cfg))
    # the worker asks for runs every second (default 10 s): the test triggers them
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "PREFECT_WORKER_QUERY_SECONDS": "1"}
    _prefect("work-pool", "create", POOL, "--type", "process", "--overwrite", cwd=proj, env=env)
    _prefect("deploy", "--all", "--prefect-file", "prefect.yaml", cwd=proj, env=env)
    log = tmp_path / "worker.log"
    with open(log, "wb") as fh:
        worker = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--type", "process"],
            cwd=proj, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield {"dir": proj, "worker": worker, "log": log, "env": env}
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def _journalled(store: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (store / "journals").glob("*.jsonl"))


def _flow_run_process(worker: subprocess.Popen[bytes]) -> psutil.Process | None:
    """The worker's child that runs the flow run (`python -m prefect.engine`)."""
    for p in psutil.Process(worker.pid).children(recursive=True):
        try:
            if "prefect.engine" in " ".join(p.cmdline()):
                return p
        except psutil.NoSuchProcess:
            continue
    return None


def _trigger(params: dict[str, Any]) -> Any:
    """A run of the deployment, scheduled now (the worker takes it)."""
    from prefect.deployments import run_deployment

    return run_deployment(DEPLOYMENT, timeout=0, parameters=params)


def _frozen_mid_night(project: dict[str, Any], server: dict[str, Any],
                      params: dict[str, Any]) -> tuple[Any, psutil.Process]:
    """A run of the deployment with ``params``, its model server frozen once some completions
    are journalled (many still to ask); with the worker's flow-run process."""
    store, log = Path(params["store_root"]), project["log"]
    run = _trigger(params)
    until(lambda: (store / "journals").is_dir() and _journalled(store) >= 8, 180,
          "generation under way", log)
    server["proc"].send_signal(signal.SIGSTOP)
    child = _flow_run_process(project["worker"])
    assert child is not None, log.read_text()[-4000:]
    return run, child


def _final_state(run_id: Any, bound: float, log: Path) -> Any:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return until(lambda: (s := client.read_flow_run(run_id).state) is not None
                     and s.is_final() and s, bound, f"flow run {run_id} final", log)


def test_a_stall_on_a_frozen_server_fails_the_deployed_night_at_once(
        project: dict[str, Any], tmp_path: Path) -> None:
    from prefect.client.schemas.objects import StateType

    store, log = tmp_path / "st", project["log"]
    with served_in_child(tmp_path, 0.3) as server, webhook_receiver() as hook:
        spec = str(hung_study(tmp_path, server["url"], "3s", hook["url"]))
        params = {"specs": [spec], "root": str(tmp_path / "nights"), "night": "2026-12-01",
                  "store_root": str(store)}
        run, child = _frozen_mid_night(project, server, params)
        frozen = time.time()

        state = _final_state(run.id, BOUND_S + 60, log)
        msg = state.message or ""
        assert state.type == StateType.FAILED, f"ended {state}\n{log.read_text()[-4000:]}"
        assert "stopped by execution.stall_after (3s)" in msg, msg
        assert "in flight: [generate] a shard 1/1" in msg, msg
        # the decision: the last completion's journal write plus the idle time it names
        idle = re.search(r"no progress for ([\d.]+)s", msg)
        assert idle is not None, msg
        decided = max(p.stat().st_mtime for p in (store / "journals").glob("*.jsonl"))
        decided += float(idle.group(1))
        # Failed at the moment of the stop, not when the frozen requests time out (300 s)
        failed = state.timestamp.timestamp()
        assert failed - decided < BOUND_S, f"Failed {failed - decided:.1f} s after the stop"
        # nothing keeps running: the flow-run process exits without waiting for its requests
        until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
              BOUND_S, "the flow-run process exited", log)
        gone = time.time()
        # one alert, sent before the run ended Failed
        assert [m["subject"] for m in hook["messages"]] == [
            "assay nightly 2026-12-01: run stopped (hung)"], hook
        assert hook["messages"][0]["stopped"]["message"].startswith(
            "stopped by execution.stall_after (3s)"), hook
        # the worker's output says the stop in its own words, with no traceback
        wlog = log.read_text()
        assert "Traceback" not in wlog, wlog[-6000:]
        assert ("the flow run ends Failed: stopped by execution.stall_after (3s)" in wlog
                ), wlog[-6000:]
        answered = _journalled(store)
        assert answered < N_SAMPLES, "generation finished before the freeze: proves nothing"
        print(f"\ndeployment stop (stall_after 3s, frozen at +0): decided +{decided - frozen:.1f}"
              f" s, alert +{hook['times'][0] - frozen:.1f} s, flow run Failed "
              f"+{failed - frozen:.1f} s, flow-run process gone +{gone - frozen:.1f} s "
              f"({gone - decided:.1f} s after the decision); "
              f"{answered}/{N_SAMPLES} answered", file=sys.stderr)

        # the server comes back: the rerun of the night asks only what was not answered
        server["proc"].send_signal(signal.SIGCONT)
        state = _final_state(_trigger(params).id,
                             180, log)
        assert state.type == StateType.COMPLETED, f"ended {state}\n{log.read_text()[-4000:]}"
        doc = json.loads((tmp_path / "nights" / "hung" / "2026-12-01" / "nightly.json")
                         .read_text())
        rest = N_SAMPLES - answered
        # the stopped night's journalled requests are counted too (its run never reported them)
        assert doc["generation"].startswith(
            f"{rest} samples asked: {rest} completions, 0 failed; {rest + answered} HTTP requests "
            f"({answered} sent by an earlier run that was stopped or killed)"), doc
        assert len(hook["messages"]) == 1, hook  # a night that passed sends nothing
    assert "Traceback" not in log.read_text(), log.read_text()[-6000:]


def test_cancelling_a_deployed_night_stuck_on_a_frozen_server(
        project: dict[str, Any], tmp_path: Path) -> None:
    """No watchdog that would fire (stall_after 300 s): `prefect flow-run cancel` alone ends
    the run (the worker sends its process SIGTERM), in Prefect's Cancelled state, at once."""
    from prefect.client.schemas.objects import StateType

    store, log = tmp_path / "st", project["log"]
    with served_in_child(tmp_path, 0.3) as server, webhook_receiver() as hook:
        spec = str(hung_study(tmp_path, server["url"], "300s", hook["url"]))
        params = {"specs": [spec], "root": str(tmp_path / "nights"), "night": "2026-12-02",
                  "store_root": str(store)}
        run, child = _frozen_mid_night(project, server, params)
        time.sleep(1.0)  # requests now wait on the frozen server
        _prefect("flow-run", "cancel", str(run.id), cwd=project["dir"], env=project["env"])
        asked = time.monotonic()
        # the worker sends the flow-run process SIGTERM: it stops as `assay nightly` does
        until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
              BOUND_S, "the flow-run process exited", log)
        gone = time.monotonic() - asked
        state = _final_state(run.id, BOUND_S + 60, log)
        assert state.type == StateType.CANCELLED, f"ended {state}\n{log.read_text()[-4000:]}"
        assert [m["stopped"]["message"] for m in hook["messages"]] == [
            "terminated (SIGTERM)"], hook
        assert _journalled(store) < N_SAMPLES, "generation finished first: proves nothing"
        print(f"\ndeployment cancel: flow-run process gone {gone:.1f} s after "
              "`prefect flow-run cancel` returned", file=sys.stderr)
