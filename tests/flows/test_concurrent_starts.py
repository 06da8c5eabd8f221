"""Runs started at once on a fresh machine (issue 24, item 8): no Prefect database yet, one
store. Every run succeeds with identical results; before the fix one server died creating the
database ("table ... already exists") and its run failed 90 s later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

SPEC = """name: {name}
sources:
  - name: m
    kind: file
    path: d.jsonl
    fields: {{reward: r}}
"""


@pytest.mark.slow
def test_runs_and_a_nightly_started_at_once_in_a_clean_folder(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": "x", "r": i % 2}) + "\n" for i in range(6)))
    for n in ("a", "b", "c"):
        (tmp_path / f"{n}.yaml").write_text(SPEC.format(name=n))
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    assert not (tmp_path / ".prefect").exists()
    cmds = [[str(BIN / "assay"), "run", f"{n}.yaml", "--output", f"out-{n}"] for n in "abc"]
    cmds.append([str(BIN / "assay"), "nightly", "a.yaml", "--root", "nights",
                 "--night", "2026-12-01"])
    procs = [subprocess.Popen(c, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    results = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs]
    for (rc, err), cmd in zip(results, cmds):
        assert rc == 0, f"{cmd}: rc {rc}\n{err}"
    reports = [json.loads((tmp_path / f"out-{n}" / "report.json").read_text()) for n in "abc"]
    assert [r["measurements"] for r in reports[1:]] == [reports[0]["measurements"]] * 2
    assert (tmp_path / "nights" / "a" / "2026-12-01" / "nightly.json").is_file()
