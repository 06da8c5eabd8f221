"""A failing or stopped run prints one `error:` line and nothing else of its failure: no Prefect
EventsWorker record (its events could not be sent) and no grading worker's traceback (the
worker was signalled with the run) reach the terminal before or after it; they go to run.log
or nowhere (issue 47)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

# A verifier that holds each grading worker (a forked process of the pool: `parallel`) on a
# row until the run is stopped; a file per worker says it is busy.
SLOW = """
import os, time
from pathlib import Path


def grade(completion, reference):
    Path(os.environ["BUSY_DIR"], str(os.getpid())).touch()
    time.sleep(600)
    return 1.0


grade.parallel = True
"""
RAISES = """
def grade(completion, reference):
    raise RuntimeError("grader exploded")
"""


def _study(tmp: Path, grader: str, rows: int) -> Path:
    (tmp / "g47.py").write_text(grader)
    with open(tmp / "a.jsonl", "w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": str(i), "gold": str(i)}) + "\n")
    p = tmp / "s.yaml"
    p.write_text("""name: one-line
sources:
  - name: m
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: a, reference: gold, task_id: id}
    verifier: {kind: function, function: "g47:grade"}
""")
    return p


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # embedded server
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(tmp)])
    env["BUSY_DIR"] = str(tmp / "busy")
    return env


def _noise(stderr: str) -> list[str]:
    """The lines that are neither the run's progress nor its one error line."""
    return [ln for ln in stderr.splitlines()
            if not (ln.startswith(("error: ", "store: ", "[prefect] embedded API server on "))
                    or (ln.startswith("[") and "] " in ln and "|" not in ln))]


@pytest.mark.slow
@pytest.mark.parametrize("sig,rc", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopped_while_grading_workers_run(tmp_path: Path, sig: int, rc: int) -> None:
    """The signal goes to the whole process group (a scheduler's stop, a terminal's Ctrl-C),
    grading workers included: they used to run `assay run`'s inherited handler and print a
    multiprocessing traceback each."""
    spec = _study(tmp_path, SLOW, 40)
    (tmp_path / "busy").mkdir()
    p = subprocess.Popen([str(BIN / "assay"), "run", str(spec), "--store",
                          str(tmp_path / "store"), "--output", str(tmp_path / "out")],
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(tmp_path),
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # a bound on start-up, not a margin the test reads
        while not any((tmp_path / "busy").iterdir()):
            assert p.poll() is None and time.monotonic() < deadline, "no worker started grading"
            time.sleep(0.1)
        os.killpg(p.pid, sig)
        err = p.stderr.read()
        assert p.wait(timeout=60) == rc, err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "rerun the same command to resume" in errors[0], err
    assert "Traceback" not in err and _noise(err) == [], err


@pytest.mark.slow
def test_stage_failure_on_the_embedded_server_is_one_line(tmp_path: Path) -> None:
    spec = _study(tmp_path, RAISES, 6)
    p = subprocess.run([str(BIN / "assay"), "run", str(spec), "--store", str(tmp_path / "store"),
                        "--output", str(tmp_path / "out")], capture_output=True, text=True,
                       cwd=tmp_path, env=_env(tmp_path), timeout=300)
    assert p.returncode == 2, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
    assert "verifier g47:grade failed on 6 of 6 rows" in line
    assert _noise(p.stderr) == [] and "EventsWorker" not in p.stderr, p.stderr
    assert "Traceback" in (tmp_path / "out" / "run.log").read_text()


# Prefect's EventsWorker after the run's block: the API is away (here a port nothing listens
# on), so sending the run's events fails when the worker drains, as it does at exit.
EVENTS = """
import logging, sys
from assay.flows.study import capture_logs
with capture_logs(sys.argv[1]):
    logging.getLogger("prefect.task_engine").error("a record of the run")
from prefect.events import emit_event
from prefect.events.worker import EventsWorker
emit_event(event="assay.test", resource={"prefect.resource.id": "assay.test"})
EventsWorker.drain_all(timeout=60)
print("drained")
"""


@pytest.mark.slow
def test_events_that_cannot_be_sent_go_to_run_log(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PREFECT_HOME": str(tmp_path / "home"),
           "PREFECT_API_URL": "http://127.0.0.1:9/api"}  # port 9 (discard): refused
    log = tmp_path / "run.log"
    p = subprocess.run([sys.executable, "-c", EVENTS, str(log)], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout == "drained\n", p.stderr
    assert p.stderr == ""
    text = log.read_text()
    assert "a record of the run" in text
    assert "EventsWorker" in text and "prefect.events.clients" in text, text
