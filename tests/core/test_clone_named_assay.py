"""A clone in a folder named ``assay``, imported from its parent folder, loads the package and
says so, instead of importing the folder as an empty namespace package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_clone_folder_loads_the_package_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "assay").symlink_to(ROOT)  # a clone named assay, seen from its parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import assay, assay.measure; r = assay.rows(['q'], ['a'], [1]); "
            "print(assay.measure.pass_at(r).value, assay.rows.__module__)")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1.0", "assay.builder"]
    assert "'import assay' found the clone's folder" in p.stderr
    assert f"cd into {tmp_path / 'assay'}" in p.stderr
