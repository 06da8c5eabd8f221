"""Flow runs of a SIGKILLed run do not stay Running: the next start of the study (or night)
marks them Crashed, naming the dead process, a night's study subflow included; a dead night is
alerted as crashed, and its rerun completes (on a real `prefect server`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.webhook_receiver import webhook_receiver

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# the grader blocks until the test lets it go: the run is killed mid-study, whatever the speed
GATE = '''
import os, time
from pathlib import Path

def grade(completion, reference):
    Path(os.environ["GATE_STARTED"]).touch()
    deadline = time.monotonic() + 300
    while not os.path.exists(os.environ["GATE_OPEN"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return completion == reference
'''

SPEC = """
name: NAME
sources:
  - name: m
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: a, reference: gold, task_id: id}
    verifier: {kind: function, function: "gate_NAME:grade"}
measure: {pass_at: {k: 2}}
nightly: {must_not_regress: [pass@1], notify: NOTIFY}
"""


def _study(tmp_path: Path, name: str, server: str, notify: str = "") -> tuple[Path, dict]:
    (tmp_path / f"gate_{name}.py").write_text(GATE)
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(6):
            for c in (str(i), f"x{i}"):
                f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": c, "gold": str(i)}) + "\n")
    spec = SPEC.replace("NAME", name)
    spec = spec.replace("NOTIFY", notify) if notify else spec.replace(", notify: NOTIFY", "")
    (tmp_path / "s.yaml").write_text(spec)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PREFECT_API_URL": server,
           "GATE_STARTED": str(tmp_path / "started"), "GATE_OPEN": str(tmp_path / "open"),
           "ASSAY_STORE": str(tmp_path / "st")}
    return tmp_path / "s.yaml", env


def _runs(flow: str, key: str, value: str) -> list[Any]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow])))
    return [r for r in runs if r.parameters.get(key) == value]


def _kill_while_running(cmd: list[str], tmp_path: Path, env: dict, expect: list[tuple]) -> int:
    """Start ``cmd``, wait until its grader runs and the flow runs ``expect`` (flow, param,
    value) are Running with its process's tag, SIGKILL it; its pid."""
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                         stderr=open(tmp_path / "killed.err", "wb"))
    deadline = time.monotonic() + 240
    try:
        while True:
            assert p.poll() is None, (tmp_path / "killed.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the run never reached its grader"
            if (tmp_path / "started").exists() and all(
                    any(r.state.is_running() and f"assay-proc:{p.pid}@" in " ".join(r.tags)
                        for r in _runs(*e)) for e in expect):
                break
            time.sleep(0.2)
    finally:
        p.send_signal(signal.SIGKILL)  # no final state reaches Prefect
        p.wait(timeout=60)
    (tmp_path / "open").touch()
    return p.pid


@pytest.mark.server
@pytest.mark.slow
def test_a_killed_run_is_crashed_by_the_next_start(prefect_server: str, tmp_path: Path) -> None:
    spec, env = _study(tmp_path, "killedrun", prefect_server)
    out = str(tmp_path / "out")
    cmd = [str(BIN / "assay"), "run", str(spec), "--output", out, "--no-view"]
    pid = _kill_while_running(cmd, tmp_path, env, [("assay-study", "spec", str(spec))])
    (old,) = _runs("assay-study", "spec", str(spec))
    assert old.state.is_running()  # the bug: without a next start it stays Running for good
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = {r.id: r for r in _runs("assay-study", "spec", str(spec))}
    assert runs[old.id].state.is_crashed(), runs[old.id].state
    assert f"pid {pid} " in runs[old.id].state.message
    (new,) = [r for r in runs.values() if r.id != old.id]
    assert new.state.is_completed()
    assert (tmp_path / "out" / "report.json").is_file()


@pytest.mark.server
@pytest.mark.slow
def test_a_killed_night_and_its_subflow_are_crashed_alerted_and_resumed(
        prefect_server: str, tmp_path: Path) -> None:
    root = str(tmp_path / "nights")
    with webhook_receiver() as hook:
        spec, env = _study(tmp_path, "killednight", prefect_server, notify=hook["url"])
        out = str(Path(root) / "killednight" / "2026-11-05")
        cmd = [str(BIN / "assay"), "nightly", str(spec), "--night", "2026-11-05", "--root", root]
        pid = _kill_while_running(cmd, tmp_path, env, [("assay-nightly", "root", root),
                                                       ("assay-study", "output", out)])
        (night,) = _runs("assay-nightly", "root", root)
        (sub,) = _runs("assay-study", "output", out)
        assert night.state.is_running() and sub.state.is_running()
        p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        messages = list(hook["messages"])
    nights = {r.id: r for r in _runs("assay-nightly", "root", root)}
    subs = {r.id: r for r in _runs("assay-study", "output", out)}
    for runs, old in ((nights, night), (subs, sub)):
        assert runs[old.id].state.is_crashed(), runs[old.id].state
        assert f"pid {pid} " in runs[old.id].state.message
        (new,) = [r for r in runs.values() if r.id != old.id]
        assert new.state.is_completed()
    # the alert says what happened to the night, not `SystemExit: 1`
    (alert,) = [m for m in messages if "crashed" in m]
    assert alert["crashed"]["night"] == "2026-11-05" and f"pid {pid} " in \
        alert["crashed"]["message"]
    assert (Path(out) / "nightly.json").is_file()
