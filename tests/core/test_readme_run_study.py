"""The README's run_study example runs as written: it makes the spec and the store itself
(issue 47: ``run_study(spec, store)`` never said how to make either)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    found = [b for b in blocks if "run_study(" in b]
    assert len(found) == 1, "the README has one run_study example"
    return found[0]


def test_the_readme_run_study_example_makes_its_spec_and_store(tmp_path: Path) -> None:
    code = _example()
    assert "load_spec(" in code and "Store(" in code
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # the example's path, from the repo root
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, "-c", "import assay\n" + code], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# Study `own-completions`")
    assert (tmp_path / ".assay").is_dir()
