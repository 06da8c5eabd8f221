"""assay.grade: the contract (new rows, statuses, no coercion) in-process and in worker
processes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import assay
from assay.errors import RowsError, RowsTypeError
from assay.judging import Verifier
from assay.verify import All, Any, ExactMatch, MathEqual, Numeric, Weighted


class Quirky(Verifier):
    """Returns a different kind of bad verdict per candidate; parallel so it can run in workers."""

    name, parallel, needs_reference = "Quirky", True, False

    def check(self, candidate, reference, row):
        return {
            "nan": float("nan"), "two": 2.0, "neg": -0.1, "str": "1", "none": None,
            "tuple": (1, "fine"), "np": np.float32(0.5), "bool": True, "inf": math.inf,
            "dict": {"reward": 1, "reason": "r", "markers": {"len": 3}, "meta": {"k": 1}},
        }.get(candidate) if candidate != "raise" else 1 / 0


CANDS = ["nan", "two", "neg", "str", "none", "tuple", "np", "bool", "inf", "dict", "raise"]
WANT = [(None, "invalid_result"), (None, "invalid_result"), (None, "invalid_result"),
        (None, "invalid_result"), (None, "no_verdict"), (1.0, "ok"), (0.5, "ok"), (1.0, "ok"),
        (None, "invalid_result"), (1.0, "ok"), (None, "error")]


@pytest.mark.parametrize("workers", [None, 1, 2])
def test_bad_verdicts_never_pass_in_any_mode(workers):
    rows = assay.rows(["p"] * len(CANDS), CANDS, Quirky(), workers=workers)
    assert [(r["reward"], r["judge_status"]) for r in rows] == WANT
    assert all(r["judge_name"] == "Quirky" for r in rows)
    assert "NaN" in rows[0]["reason"] and "ZeroDivisionError" in rows[-1]["reason"]
    assert rows[9]["markers"] == {"len": 3.0} and rows[9]["judge_meta"] == {"k": 1}


def test_parallel_equals_sequential_and_input_is_untouched():
    cands = [[f"\\boxed{{{i}}}", str(i + 1), f"the answer is {i}"] for i in range(40)]
    base = assay.rows([f"q{i}" for i in range(40)], cands, references=[str(i) for i in range(40)])
    before = base.to_arrow()
    par = assay.grade(base, MathEqual(), workers=2)
    seq = assay.grade(base, Numeric())
    assert base.to_arrow().equals(before) and base[0]["reward"] is None
    assert [r["reward"] for r in par] == [1.0, 0.0, 1.0] * 40
    assert [r["reward"] for r in seq] == [1.0, 0.0, 1.0] * 40
    assert par[0]["judge_name"] == "MathEqual" and par[0]["reason"] == "math-verify: equal"
    regraded = assay.grade(par, ExactMatch())  # re-grading replaces every judge field
    assert regraded[0]["judge_name"] == "ExactMatch" and regraded[0]["reward"] == 0.0


def test_workers_validated():
    r = assay.rows(["p"], ["x"])
    with pytest.raises(RowsError, match="workers"):
        assay.grade(r, ExactMatch(), workers=0)
    with pytest.raises(RowsTypeError, match="workers"):
        assay.grade(r, ExactMatch(), workers=1.5)


def test_no_reference_is_reported_not_judged():
    r = assay.rows(["a", "b"], ["1", "2"])
    g = assay.grade(r, MathEqual(), workers=2)
    assert [x["judge_status"] for x in g] == ["no_reference"] * 2 and g[0]["reward"] is None


def test_combinators():
    refs = ["42", "42", "42", "forty-two"]
    cands = ["42", "42.0", "41", "42"]
    rows = assay.rows(["q"] * 4, cands, All([Numeric(), ExactMatch()]),
                      task_ids=[f"t{i}" for i in range(4)], references=refs)
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.0, 0.0]  # ExactMatch's 0 decides row 3
    rows = assay.rows(["q"] * 4, cands, Any([Numeric(), ExactMatch()]),
                      task_ids=[f"t{i}" for i in range(4)], references=refs)
    assert [r["reward"] for r in rows] == [1.0, 1.0, 0.0, None]
    assert rows[3]["judge_status"] == "no_verdict" \
        and "Numeric could not judge" in rows[3]["reason"]
    rows = assay.rows(["q"] * 4, cands, Weighted([(Numeric(), 3), (ExactMatch(), 1)]),
                      task_ids=[f"t{i}" for i in range(4)], references=refs)
    assert [r["reward"] for r in rows] == [1.0, 0.75, 0.0, None]
    # a plain callable as a child, and a child that raises: unjudged, never a pass
    rows = assay.rows(["q"], ["42"], All([Numeric(), lambda p, c: 1 / 0]), references=["42"])
    assert rows[0]["reward"] is None and rows[0]["judge_status"] == "error"
    rows = assay.rows(["q"], ["41"], All([Numeric(), lambda p, c: 1 / 0]), references=["42"])
    assert rows[0]["reward"] == 0.0  # one certain fail decides All
    with pytest.raises(ValueError, match="weight"):
        Weighted([(Numeric(), 0)])
    with pytest.raises(ValueError, match="non-empty"):
        All([])
    # parallel children inside a combinator run in worker processes too
    rows = assay.rows(["q"] * 20, ["\\boxed{1/2}"] * 20, Any([MathEqual(), ExactMatch()]),
                      references=["0.5"] * 20, task_ids=[f"t{i}" for i in range(20)], workers=2)
    assert {r["reward"] for r in rows} == {1.0}


def test_plain_callable_judges():
    r = assay.rows(["2+3?"], [["5", "6"]], lambda p, c, ref: c == ref, references=["5"])
    assert [x["reward"] for x in r] == [1.0, 0.0]
    r = assay.rows(["2+3?"], [["5"]], lambda row: {"reward": float("nan")})
    assert r[0]["reward"] is None and r[0]["judge_status"] == "invalid_result"


def test_a_finished_runs_stop_does_not_cancel_the_next_grade_call():
    """A stop left by an earlier run (Ctrl-C in a notebook, a stopped study) is that run's:
    the next parallel grade call starts a run of its own and grades every row."""
    from assay import stop

    stop.trigger("an earlier run was stopped")
    try:
        r = assay.rows([f"{i}+{i}?" for i in range(40)], [[str(2 * i)] for i in range(40)],
                       references=[str(2 * i) for i in range(40)])
        g = assay.grade(r, MathEqual(), workers=2)
        assert [x["reward"] for x in g] == [1.0] * 40
    finally:
        stop.clear()
