"""Every docstring example in assay runs: one doctest run per module under assay/, found on disk.

A new module is picked up without editing this file. A module whose examples cannot run offline
would be listed in ``CANNOT_RUN`` with the reason, never skipped silently; today there is none
(the torch/transformers examples build their tiny models locally).
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "src" / "assay"

#: module -> why its examples cannot run in the suite. Each entry is checked to still exist.
CANNOT_RUN: dict[str, str] = {}


def _modules() -> list[str]:
    out = []
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


MODULES = _modules()


def test_every_module_is_collected():
    assert len(MODULES) > 50 and "assay.rows" in MODULES and "assay.intervals" in MODULES
    assert set(CANNOT_RUN) <= set(MODULES), "CANNOT_RUN names a module that no longer exists"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in CANNOT_RUN:
        pytest.xfail(f"{name}: {CANNOT_RUN[name]}")  # reported in the summary, never silent
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures = []
    for test in finder.find(module, name):
        out: list[str] = []
        result = runner.run(test, out=out.append)
        if result.failed:
            failures.append("".join(out))
    assert not failures, "\n".join(failures)


def test_a_failing_example_fails(tmp_path, monkeypatch):
    # the runner above really reports a wrong expected value (the test can fail)
    (tmp_path / "stale_example_mod.py").write_text('"""\n>>> 1 + 1\n3\n"""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("stale_example_mod")
    runner = doctest.DocTestRunner()
    results = [runner.run(t, out=lambda s: None) for t in doctest.DocTestFinder().find(module)]
    assert sum(r.failed for r in results) == 1
