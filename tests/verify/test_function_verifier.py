"""``verifier: {kind: function}``: a user grading function named in a spec runs in the grading
worker pool, through the judge contract (errors, NaN and out-of-range never pass), and its
source (or declared version) keys the cached grades."""

from __future__ import annotations

import json
import os
import textwrap
import uuid
from pathlib import Path

import pytest

from assay import stages
from assay.errors import SpecError
from assay.spec import check_files, parse_spec
from assay.store import Store


def _module(tmp_path: Path, body: str) -> str:
    """A grader module next to the spec (a fresh name: sys.modules outlives a test)."""
    name = f"graders_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    return name


GRADER = """
import math, os

def grade(completion, reference, row, bonus=0.0):
    if completion == "boom":
        raise ValueError("cannot parse 'boom'")
    if completion == "nan":
        return math.nan
    if completion == "big":
        return 1.5
    return {"reward": float(completion == reference), "reason": "compared",
            "meta": {"pid": os.getpid(), "bonus": bonus, "task": row["task_id"]}}
"""


def _data(tmp_path: Path, n_tasks: int = 12) -> None:
    with open(tmp_path / "answers.jsonl", "w") as f:
        for i in range(n_tasks):
            for c in (str(i), str(i + 1),
                      "boom" if i == 0 else "nan" if i == 1 else "big" if i == 2 else str(i)):
                f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": c, "gold": str(i)}) + "\n")


def _spec(tmp_path: Path, module: str, extra: str = "") -> str:
    return f"""
name: own-grader
sources:
  - name: m
    kind: file
    path: answers.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: function, function: "{module}:grade", params: {{bonus: 0.5}}{extra}}}
measure: {{pass_at: {{k: 3}}}}
execution: {{workers: 2}}
"""


def test_the_grader_runs_in_worker_processes_and_its_errors_never_pass(tmp_path: Path) -> None:
    mod = _module(tmp_path, GRADER)
    _data(tmp_path)
    spec = parse_spec(_spec(tmp_path, mod), base_dir=str(tmp_path))
    assert check_files(spec) == []
    run = stages.run_study(spec, Store(tmp_path / "store"), progress=None, workers=2)
    rows = stages.concat_rows(Store(tmp_path / "store"), run.graded["m"])
    assert len(rows) == 36
    by = {(r["task_id"], r["rollout_index"]): r for r in rows}
    boom, nan, big = by[("t0", 2)], by[("t1", 2)], by[("t2", 2)]
    assert (boom["reward"], boom["judge_status"], boom["reason"]) == \
        (None, "error", "ValueError: cannot parse 'boom'")
    assert (nan["reward"], nan["judge_status"], nan["reason"]) == \
        (None, "invalid_result", "judge returned NaN")
    assert (big["reward"], big["judge_status"]) == (None, "invalid_result") \
        and "outside [0, 1]" in big["reason"]
    ok = [r for r in rows if r["judge_status"] == "ok"]
    assert [r["reward"] for r in ok] == [float(r["final_text"] == r["privileged"]["reference"])
                                         for r in ok]
    assert len(ok) == 33 and {r["judge_meta"]["bonus"] for r in ok} == {0.5}
    # graded in worker processes, not in this one (the verifier crossed as its reference)
    pids = {r["judge_meta"]["pid"] for r in ok}
    assert os.getpid() not in pids and len(pids) >= 1
    assert {r["judge_name"] for r in rows} == {f"{mod}:grade"}


def test_editing_the_grader_recomputes_the_grades(tmp_path: Path) -> None:
    mod = _module(tmp_path, GRADER)
    _data(tmp_path)
    spec = parse_spec(_spec(tmp_path, mod), base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    first = stages.run_study(spec, store, progress=None, workers=2)
    again = stages.run_study(parse_spec(_spec(tmp_path, mod), base_dir=str(tmp_path)), store,
                             progress=None, workers=2)
    assert again.computed_stages == []
    # the user fixes the grader: a right answer now also passes with surrounding spaces, and
    # every reward is halved (an edit whose effect the test can see on every row)
    (tmp_path / f"{mod}.py").write_text(GRADER.replace(
        'float(completion == reference)', '0.5 * float(completion.strip() == reference)'))
    edited = stages.run_study(parse_spec(_spec(tmp_path, mod), base_dir=str(tmp_path)), store,
                              progress=None, workers=2)
    assert any(s.startswith("grade[") for s in edited.computed_stages)
    old = stages.concat_rows(store, first.graded["m"])
    new = stages.concat_rows(store, edited.graded["m"])
    assert {r["reward"] for r in new if r["judge_status"] == "ok"} == {0.0, 0.5}
    assert [r["reward"] / 2 if r["reward"] is not None else None for r in old] == \
        [r["reward"] for r in new]


def test_a_declared_version_keys_the_grades_instead_of_the_source(tmp_path: Path) -> None:
    mod = _module(tmp_path, GRADER)
    _data(tmp_path, 4)
    store = Store(tmp_path / "store")

    def run(version: str) -> stages.StudyRun:
        spec = parse_spec(_spec(tmp_path, mod, f", version: '{version}'"), base_dir=str(tmp_path))
        return stages.run_study(spec, store, progress=None)

    run("1")
    (tmp_path / f"{mod}.py").write_text(GRADER + "\n# a comment: behaviour unchanged\n")
    assert not any(s.startswith("grade[") for s in run("1").computed_stages)
    assert any(s.startswith("grade[") for s in run("2").computed_stages)


def test_the_spec_says_what_a_function_verifier_needs(tmp_path: Path) -> None:
    base = "name: x\nsources:\n  - {name: m, kind: file, path: a.jsonl, verifier: %s}\n"
    with pytest.raises(SpecError, match=r"sources\[0\]\.verifier: kind function needs function: "):
        parse_spec(base % "{kind: function}")
    with pytest.raises(SpecError,
                       match=r"sources\[0\]\.verifier: function is only for kind function"):
        parse_spec(base % "{kind: numeric, function: 'a:b'}")
    with pytest.raises(SpecError,
                       match=r"sources\[0\]\.verifier\.function: String should match pattern"):
        parse_spec(base % "{kind: function, function: 'no_colon'}")
    mod = _module(tmp_path, GRADER)
    (tmp_path / "a.jsonl").write_text('{"prompt": "1?", "completion": "1"}\n')
    bad = parse_spec(base % f"{{kind: function, function: '{mod}:grade', params: {{bonsu: 1}}}}",
                     base_dir=str(tmp_path))
    (problem,) = check_files(bad)
    assert problem.startswith("sources[0].verifier.function: verifier function") \
        and "bonsu" in problem
    missing = parse_spec(base % f"{{kind: function, function: '{mod}:grde'}}",
                         base_dir=str(tmp_path))
    assert check_files(missing) == [f"sources[0].verifier.function: verifier function "
                                    f"'{mod}:grde': module '{mod}' has no attribute 'grde'"]


def test_a_two_argument_grader_and_the_python_api(tmp_path: Path) -> None:
    import assay
    from assay.verify import FunctionVerifier

    mod = _module(tmp_path,
                  "def exact(completion, reference):\n    return completion == reference\n")
    v = FunctionVerifier(f"{mod}:exact", base_dir=str(tmp_path))
    r = assay.rows(["1?"] * 20, [str(i % 2) for i in range(20)], v, references=["1"] * 20,
                   workers=2)
    assert [x["reward"] for x in r] == [float(i % 2 == 1) for i in range(20)]
    with pytest.raises(SpecError, match=r"takes parameter .x., which assay does not pass"):
        FunctionVerifier(f"{_module(tmp_path, 'def one(x):  return 1')}:one",
                         base_dir=str(tmp_path))
