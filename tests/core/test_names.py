"""One naming rule for result classes (no suffix, the old suffixed names gone), and the
``py.typed`` marker the package data declares."""

from __future__ import annotations

import importlib
import inspect
import tomllib
import warnings
from pathlib import Path

import pytest

from assay.results import Result

ROOT = Path(__file__).resolve().parents[2]

OLD_NAMES = [
    ("assay.decontam", "ContaminationReport", "Contamination"),
    ("assay.decontam", "FilterReport", "Decontamination"),
    ("assay.decontam.results", "ContaminationReport", "Contamination"),
    ("assay.decontam.results", "FilterReport", "Decontamination"),
    ("assay.reward", "AuditResult", "Audit"),
    ("assay.reward", "InvarianceReport", "Invariance"),
    ("assay.reward.auditing", "AuditResult", "Audit"),
    ("assay.reward.hf", "InvarianceReport", "Invariance"),
    ("assay.data", "HodgeResult", "HodgeRanking"),
    ("assay.data", "InteractionResult", "Interaction"),
    ("assay.data", "LengthBaselineResult", "LengthBaseline"),
    ("assay.data.hodge", "HodgeResult", "HodgeRanking"),
    ("assay.data.interaction", "InteractionResult", "Interaction"),
    ("assay.data.builtin.diagnostic", "LengthBaselineResult", "LengthBaseline"),
]


@pytest.mark.parametrize("module,old,new", OLD_NAMES)
def test_the_pre_release_result_names_are_gone(module, old, new):
    mod = importlib.import_module(module)
    assert not hasattr(mod, old)  # 0.1.0 had no outside users: no deprecation aliases
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(mod, new)


def test_no_result_class_carries_a_suffix():
    found = {}
    for path in sorted((ROOT / "src" / "assay").rglob("*.py")):
        parts = list(path.relative_to(ROOT / "src").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mod = importlib.import_module(".".join(parts))
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, Result) and obj is not Result \
                    and obj.__module__ == mod.__name__:
                found[f"{mod.__name__}.{name}"] = name
    assert len(found) >= 15  # the walk saw the result classes of every package
    bad = sorted(q for q, n in found.items() if n.endswith(("Report", "Result")))
    assert not bad, f"result classes named with a suffix: {bad}"


def test_py_typed_is_shipped():
    assert (ROOT / "src" / "assay" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in data["tool"]["setuptools"]["package-data"]["assay"]
