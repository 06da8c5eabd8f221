"""An exception raised inside a library during a node is exit 1 naming the node and run.log, never
"cannot read" a file that reads; a fault assay finds in the data itself is exit 2 naming the
file and the fix (issue 39), both through the real ``assay run``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import race_specs

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

# Loaded first by the run's interpreter (sitecustomize): datasets fails inside its own load.
FAULT = "from helpers import faulty_datasets\nfaulty_datasets.install()\n"


def _run(tmp: Path, *, fault: bool) -> subprocess.CompletedProcess[str]:
    paths = [str(ROOT)] + ([str(tmp / "fault"), str(ROOT / "tests")] if fault else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(BIN / "assay"), "run", str(tmp / "spec.yaml"), "--store",
                           str(tmp / "store"), "--output", str(tmp / "out")],
                          capture_output=True, text=True, timeout=300, cwd=tmp, env=env)


@pytest.fixture
def gsm(tmp_path: Path) -> Path:
    from helpers import gsm_fixture

    gsm_fixture.build(tmp_path, tasks_per_subject=2, k=1)
    (tmp_path / "spec.yaml").write_text("name: gsm-one\nsources:"
                                        + race_specs.SOURCES["hf_numeric"] + "\n")
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(FAULT)
    return tmp_path


def _errors(p: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]


@pytest.mark.slow
def test_a_library_failure_is_exit_1_and_a_broken_file_exit_2(prefect_server: str,
                                                               gsm: Path) -> None:
    foreign = _run(gsm, fault=True)
    assert foreign.returncode == 1, foreign.stderr
    (line,) = _errors(foreign)
    log = gsm / "out" / "run.log"
    assert line.startswith("error: build-rows (numeric) failed: AttributeError: type object "
                           "'tqdm' has no attribute '_lock'"), line
    assert str(log) in line and "cannot read" not in line, line
    assert "Traceback" not in foreign.stderr
    assert "Traceback" in log.read_text() and "load_from_disk" in log.read_text()

    # the same folder with one shard cut short: assay reads it itself and names it (exit 2)
    shard = next((gsm / "gsm" / "test").glob("*.arrow"))
    shard.write_bytes(shard.read_bytes()[:200])
    broken = _run(gsm, fault=False)
    assert broken.returncode == 2, broken.stderr
    (line,) = _errors(broken)
    assert line.startswith(f"error: source 'numeric' ({gsm / 'gsm'}): cannot read {shard}: "), line
    assert line.endswith("(fix or replace the file)"), line
    assert "Traceback" not in broken.stderr

    # and the readable folder runs (the fault was the library's, the data is fine)
    shard.unlink()
    from helpers import gsm_fixture

    gsm_fixture.build(gsm, tasks_per_subject=2, k=1)
    ok = _run(gsm, fault=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((gsm / "out" / "report.json").read_text())
