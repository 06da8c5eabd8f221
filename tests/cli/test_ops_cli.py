"""`assay nightly`, `history` and `store`: usage and spec errors exit 2 before any server starts
or Prefect is imported; store upkeep never imports Prefect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from assay.cli import main
rc = main(sys.argv[1:])
assert not any(m == "prefect" or m.startswith("prefect.") for m in sys.modules), "prefect imported"
sys.exit(rc)
"""


def _probe(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


def test_nightly_usage_and_spec_errors_exit_2(tmp_path: Path) -> None:
    p = _probe("nightly", "spec.yaml", "--night", "11/03/2026", cwd=tmp_path)
    assert p.returncode == 2 and "--night '11/03/2026': give a date YYYY-MM-DD" in p.stderr
    p = _probe("nightly", "nope.yaml", cwd=tmp_path)
    assert p.returncode == 2 and "spec file not found: nope.yaml" in p.stderr
    (tmp_path / "s.yaml").write_text(
        "name: x\nsources:\n  - {name: a, kind: file, path: a.jsonl, fields: {reward: r}}\n"
        "nightly: {must_not_regress: [pass@1], baseline: yesterday}\n")
    p = _probe("nightly", "s.yaml", cwd=tmp_path)
    assert p.returncode == 2 and "s.yaml:4: nightly.baseline: baseline must be" in p.stderr
    (tmp_path / "s.yaml").write_text(
        "name: x\nsources:\n  - {name: a, kind: file, path: a.jsonl, fields: {reward: r}}\n")
    p = _probe("nightly", "s.yaml", cwd=tmp_path)
    assert p.returncode == 2 and "sources[0].path: file not found" in p.stderr
    # overrides are checked with the spec, before any server starts
    p = _probe("nightly", "s.yaml", "--model", "ckpt-2", cwd=tmp_path)
    assert p.returncode == 2
    assert "--model 'ckpt-2': no source of this spec has a generate:" in p.stderr
    p = _probe("nightly", "s.yaml", "--set", "nightly.baselin=best", cwd=tmp_path)
    assert p.returncode == 2 and "nightly.baselin: unknown field" in p.stderr
    assert "(the spec as overridden by ['nightly.baselin=best'])" in p.stderr
    p = _probe("nightly", "s.yaml", "--set", "nightly", cwd=tmp_path)
    assert p.returncode == 2 and "--set 'nightly': give PATH=VALUE" in p.stderr
    assert not (tmp_path / ".prefect").exists() or not any((tmp_path / ".prefect").iterdir())


def test_store_and_history_errors_exit_2(tmp_path: Path) -> None:
    p = _probe("store", "du", "--store", str(tmp_path / "none"))
    assert p.returncode == 2 and "no store there" in p.stderr
    (tmp_path / "st").mkdir()
    p = _probe("store", "gc", "--store", str(tmp_path / "st"), "--keep-nights", "3")
    assert p.returncode == 2 and "store gc needs --runs DIR" in p.stderr
    p = _probe("store", "gc", "--store", str(tmp_path / "st"), "--runs", str(tmp_path))
    assert p.returncode == 2 and "gc needs --keep-nights N or --older-than DAYS" in p.stderr
    p = _probe("store", "verify", "--store", str(tmp_path / "st"))
    assert p.returncode == 0 and "verified 0 blobs, 0 refs and 0 journals: all intact" in p.stdout
    p = _probe("history", str(tmp_path))
    assert p.returncode == 2 and "no nights" in p.stderr
