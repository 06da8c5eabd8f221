"""A ``where`` step on a field that only grading writes is refused before the run (validate) and
at the start of filter-rows, with the fix, instead of "its steps keep no rows"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

SPEC = """
name: w
sources:
  - name: a
    kind: file
    path: data.jsonl
    fields: {prompt: q, completion: a, reference: gold}
    verifier: {kind: numeric}
    steps: [{op: where, field: %s, cmp: "==", value: 1}]
"""


def _write(tmp: Path, field: str) -> Path:
    (tmp / "data.jsonl").write_text("".join(json.dumps({"q": f"{i}+1?", "a": str(i + 1),
                                                        "gold": str(i + 1), "level": i % 2})
                                            + "\n" for i in range(4)))
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC % field)
    return spec


def test_validate_names_the_step_and_the_fix(tmp_path: Path) -> None:
    res = subprocess.run([str(BIN / "assay"), "validate", str(_write(tmp_path, "reward"))],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert ("spec.yaml:9: sources[0].steps[0].field: 'reward' exists only after grading"
            in res.stderr)
    assert "fix:" in res.stderr


def test_a_record_field_step_is_fine_and_the_graded_one_fails_early_at_run_time(
        tmp_path: Path) -> None:
    from assay import stages
    from assay.errors import SpecError
    from assay.spec import load_spec
    from assay.store import Store

    ok = stages.run_study(load_spec(_write(tmp_path, "level")), Store(tmp_path / "s"),
                          progress=None)
    assert len(stages.concat_rows(Store(tmp_path / "s"), ok.graded["a"])) == 2
    with pytest.raises(SpecError, match="exists only after grading, and steps run before grading"):
        stages.run_study(load_spec(_write(tmp_path, "judge_status")), Store(tmp_path / "s"),
                         progress=None)
