"""`assay validate ... | head` (a reader gone before the output) prints no BrokenPipeError
traceback and exits as a command stopped by SIGPIPE does (141); a study (`assay run`, a night
run by a worker) whose reader goes away mid-run finishes and writes its results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_stdout_prints_no_traceback() -> None:
    # the reader leaves before the command writes (it takes a second to start): its write fails
    p = subprocess.Popen([str(BIN / "assay"), "validate",
                          str(ROOT / "configs" / "quickstart.yaml")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode()
    rc = p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert rc == 141


# A study that blocks in its grader until the test has closed the pipes: every line after that
# (stage lines, Prefect's log records, the final summary) meets a reader that is gone, whatever
# the machine's speed.
GATE = '''
import os, time
from pathlib import Path

def grade(completion, reference):
    Path(os.environ["GATE_STARTED"]).touch()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["GATE_OPEN"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return completion == reference
'''

SPEC = """
name: piped
sources:
  - name: m
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: a, reference: gold, task_id: id}
    verifier: {kind: function, function: "gate_piped:grade"}
measure: {pass_at: {k: 2}}
nightly: {must_not_regress: [pass@1]}
"""


def _study(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    import json
    import os

    (tmp_path / "gate_piped.py").write_text(GATE)
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(6):
            for c in (str(i), f"x{i}"):
                f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": c, "gold": str(i)}) + "\n")
    (tmp_path / "s.yaml").write_text(SPEC)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
           "GATE_STARTED": str(tmp_path / "started"), "GATE_OPEN": str(tmp_path / "open")}
    env.pop("ASSAY_STORE", None)
    return tmp_path / "s.yaml", env


def _close_when_grading(p: subprocess.Popen[bytes], tmp_path: Path) -> int:
    import time

    deadline = time.monotonic() + 240
    while not (tmp_path / "started").exists():
        assert p.poll() is None and time.monotonic() < deadline, "the grader never started"
        time.sleep(0.05)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader goes away mid-run (a killed worker, `| head`, a closed ssh)
    p.stderr.close()
    (tmp_path / "open").touch()
    return p.wait(timeout=300)


def test_a_run_whose_reader_left_mid_run_finishes_and_writes_its_results(tmp_path: Path) -> None:
    spec, env = _study(tmp_path)
    p = subprocess.Popen([str(BIN / "assay"), "run", str(spec), "--output", str(tmp_path / "out"),
                          "--store", str(tmp_path / "st"), "--no-view"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    assert _close_when_grading(p, tmp_path) == 0
    assert (tmp_path / "out" / "report.json").is_file()


NIGHT = """
import sys
from assay.flows.nightly import nightly
state = nightly(specs=[sys.argv[1]], root=sys.argv[2], night="2026-11-01", store_root=sys.argv[3],
                return_state=True)
open(sys.argv[4], "w").write(state.type.value)
"""


@pytest.mark.server
@pytest.mark.slow
def test_a_night_run_by_a_worker_that_went_away_completes(prefect_server: str,
                                                          tmp_path: Path) -> None:
    # as a Prefect process worker runs a deployed night: a child whose stdout/stderr are pipes
    # to the worker; the worker is killed (its ends close) while the night grades
    spec, env = _study(tmp_path)
    env["PREFECT_API_URL"] = prefect_server
    env["PREFECT_LOGGING_LEVEL"] = "INFO"  # the console handler writes records: rich's path
    p = subprocess.Popen([sys.executable, "-c", NIGHT, str(spec), str(tmp_path / "nights"),
                          str(tmp_path / "st"), str(tmp_path / "state")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    assert _close_when_grading(p, tmp_path) == 0
    assert (tmp_path / "state").read_text() == "COMPLETED"
    night = tmp_path / "nights" / "piped" / "2026-11-01"
    assert (night / "report.json").is_file() and (night / "nightly.json").is_file()
