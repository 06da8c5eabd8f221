"""``assay run`` reports a broken line of a local data file as ``validate`` does, before Prefect
is imported or a flow starts (issue 47: it took 17-22 s, through the build-rows node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from assay.cli import main
rc = main(sys.argv[1:])
assert not any(m == "prefect" or m.startswith("prefect.") for m in sys.modules), "prefect imported"
sys.exit(rc)
"""

SPEC = """name: early
sources:
  - name: m
    kind: file
    path: d.jsonl
    fields: {prompt: q, completion: a, reference: gold}
    verifier: {kind: exact_match}
measure: {pass_at: {k: 1}}
"""


def _cli(tmp: Path, *args: str, probe: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-c", PROBE, *args] if probe else [sys.executable, "-m", "assay.cli",
                                                              *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp, env=env)


@pytest.mark.parametrize("bad", ['{"q": broken', '["a list"]', '{"q": "2?", "gold": "2"}'])
def test_run_names_the_bad_line_before_prefect(tmp_path: Path, bad: str) -> None:
    good = json.dumps({"q": "1?", "a": "1", "gold": "1"})
    (tmp_path / "d.jsonl").write_text(f"{good}\n{bad}\n{good}\n")
    (tmp_path / "s.yaml").write_text(SPEC)
    run = _cli(tmp_path, "run", "s.yaml", "--store", "st", "--output", "out",
               "--prefect-home", str(tmp_path / ".prefect"))
    validate = _cli(tmp_path, "validate", "s.yaml")
    assert run.returncode == 2 == validate.returncode, run.stderr
    # one error line (with its listed problems), the same as validate's
    assert run.stderr == validate.stderr
    assert run.stderr.startswith("error: s.yaml has 1 problem(s)")
    assert "d.jsonl:2" in run.stderr or "record 2" in run.stderr
    # nothing of a study: only run.log, saying why (as any failed run leaves it)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run.log"]
    assert "problem(s)" in (tmp_path / "out" / "run.log").read_text()
