"""A run whose model gave no completion for some samples finishes with EXIT_PARTIAL, says so
in its summary line and lists the failed samples in run.json (issue 25)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assay.errors import EXIT_PARTIAL

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

MODEL = """
import os
def flaky(prompts):
    # the answer, except for prompts mentioning 7 while FAIL is set: no completion (an error row)
    fail = os.environ.get("FAIL") == "1"
    return [None if fail and "7" in p else p.split("=")[0].strip() for p in prompts]
"""


def _run(tmp: Path, fail: bool) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp)]),
           "FAIL": "1" if fail else "0"}
    return subprocess.run([str(BIN / "assay"), "run", str(tmp / "s.yaml"), "--store",
                           str(tmp / "store"), "--output", str(tmp / "out")],
                          capture_output=True, text=True, timeout=300, cwd=tmp, env=env)


@pytest.mark.slow
def test_failed_samples_exit_partial_and_say_so(prefect_server: str, tmp_path: Path) -> None:
    (tmp_path / "flakymodel.py").write_text(MODEL)
    (tmp_path / "p.jsonl").write_text("".join(
        json.dumps({"q": f"{i} = ?", "gold": str(i)}) + "\n" for i in range(10)))
    (tmp_path / "s.yaml").write_text("""
name: partial
sources:
  - name: m
    kind: file
    path: p.jsonl
    fields: {prompt: q, reference: gold}
    generate: {model: {kind: function, callable: "flakymodel:flaky"}, api: completions, k: 2}
    verifier: {kind: exact_match}
measure: {pass_at: {k: 2}}
""")
    bad = _run(tmp_path, fail=True)
    assert bad.returncode == EXIT_PARTIAL, bad.stderr
    assert "\ndone with failed samples in " in bad.stderr and "\ndone in " not in bad.stderr
    assert "partial: the model gave no completion for m: 2 sample(s) of 1 task(s)" in bad.stderr
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert info["failed_samples"] == {"m": {"samples": 2, "tasks": 1}}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["sources"][0]["generation"]["errors"] == 2
