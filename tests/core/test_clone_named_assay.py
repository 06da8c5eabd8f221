"""A clone in a folder named ``assay``, imported from its parent folder, is the installed package,
not the clone's folder as an empty namespace package: the clone's root holds no ``__init__.py``
and no package of its own (src layout), so the regular package wins without any import patch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_assay_beside_a_clone_named_assay_gets_the_package(tmp_path: Path) -> None:
    (tmp_path / "assay").symlink_to(ROOT)  # a clone named assay, seen from its parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import assay, assay.measure; r = assay.rows(['q'], ['a'], [1]); "
            "print(assay.measure.pass_at(r).value, assay.rows.__module__, assay.__file__)")
    # this suite's interpreter: the development (editable) install of this checkout
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    value, module, where = p.stdout.split()
    assert (value, module) == ("1.0", "assay.builder")
    assert Path(where).resolve() == ROOT / "src" / "assay" / "__init__.py"
    assert not p.stderr
