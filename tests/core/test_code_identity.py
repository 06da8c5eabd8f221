"""One identity rule for user code (assay.hashing.code_identity): a module's source plus the
helper modules it imports from its folder or the spec's; a declared version instead. Editing a
helper that a grader imports (``from grade_helpers import SLACK``) regrades, in this process
and in the grading workers; editing an unrelated file beside the spec does not."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from assay import stages
from assay.errors import SpecError
from assay.hashing import code_identity, helper_files
from assay.spec import parse_spec
from assay.store import Store


def _names() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]  # fresh module names: sys.modules outlives a test
    return f"my_graders_{tag}", f"grade_helpers_{tag}", f"deeper_{tag}"


def _write(d: Path, name: str, body: str) -> None:
    (d / f"{name}.py").write_text(textwrap.dedent(body))


SPEC = """
name: helpers
sources:
  - name: m
    kind: file
    path: answers.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: function, function: "{grader}:grade"}}
measure: {{pass_at: {{k: 2}}}}
"""


def _setup(d: Path) -> tuple[str, str, str]:
    grader, helpers, deeper = _names()
    _write(d, grader, f"""
        from {helpers} import SLACK

        def grade(completion, reference):
            return float(abs(int(completion) - int(reference)) <= SLACK)
        """)
    _write(d, helpers, f"from {deeper} import BASE\nSLACK = BASE + 0\n")
    _write(d, deeper, "BASE = 0\n")
    with open(d / "answers.jsonl", "w") as f:
        for i in range(6):
            for c in (i, i + 1):
                f.write(
                    json.dumps({"id": f"t{i}", "q": f"{i}?", "a": str(c), "gold": str(i)}) + "\n"
                )
    return grader, helpers, deeper


def _run(d: Path, grader: str, store: Store) -> tuple[list[str], list[float]]:
    spec = parse_spec(SPEC.format(grader=grader), base_dir=str(d))
    run = stages.run_study(spec, store, progress=None, workers=2)
    rewards = [r["reward"] for r in stages.concat_rows(store, run.graded["m"])]
    return [s for s in run.computed_stages if s.startswith("grade[")], rewards


def test_editing_a_helper_module_regrades_with_its_new_value(tmp_path: Path) -> None:
    grader, helpers, deeper = _setup(tmp_path)
    store = Store(tmp_path / "store")
    graded, first = _run(tmp_path, grader, store)
    assert graded and first == [1.0, 0.0] * 6
    # nothing changed: cached; an unrelated module beside the spec changes nothing either
    _write(tmp_path, f"unrelated_{uuid.uuid4().hex[:6]}", "X = 1\n")
    assert _run(tmp_path, grader, store) == ([], first)
    # issue #25's case: the grader's imported constant changes -> regraded with the new value
    _write(tmp_path, helpers, f"from {deeper} import BASE\nSLACK = BASE + 1\n")
    graded, second = _run(tmp_path, grader, store)
    assert graded and second == [1.0, 1.0] * 6
    # a helper of the helper counts too (transitive): BASE = -1 makes SLACK 0 again
    _write(tmp_path, deeper, "BASE = -1\n")
    graded, third = _run(tmp_path, grader, store)
    assert graded and third == first


def test_identity_names_the_helpers_and_a_version_replaces_them(tmp_path: Path) -> None:
    import importlib
    import sys

    grader, helpers, deeper = _setup(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        fn = importlib.import_module(grader).grade
    finally:
        sys.path.remove(str(tmp_path))
    ident = code_identity(fn, base_dir=tmp_path)
    assert sorted(ident) == ["code", "helpers"]
    assert sorted(ident["helpers"]) == [f"{deeper}.py", f"{helpers}.py"]
    assert helper_files(tmp_path / f"{grader}.py", [tmp_path]) == ident["helpers"]
    assert code_identity(fn, version="v3", base_dir=tmp_path) == {"version": "v3"}
    # a builtin has no source: the error asks for version
    with pytest.raises(SpecError, match="declare version"):
        code_identity(len)
