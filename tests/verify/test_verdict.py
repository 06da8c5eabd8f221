"""One verdict shape: every verifier's check() returns Verdict(reward, reason, meta), the Verdict
refuses what the row contract refuses, and user judges may still return the old shapes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import assay
from assay import judging
from assay.judging import JUDGE_STATUSES, normalize_verdict
from assay.verify import (
    All,
    Any,
    CodeExec,
    ExactMatch,
    MathEqual,
    MultipleChoice,
    Numeric,
    Verdict,
    Weighted,
)

ROW = {"final_text": "42", "prompt": "q", "privileged": {"reference": "42"}}


def test_verdict_is_one_public_frozen_class():
    assert Verdict is judging.Verdict is assay.Verdict
    v = Verdict(1.0, reason="ok")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.reward = 0.0  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(Verdict)][:4] == \
        ["reward", "status", "reason", "meta"]


@pytest.mark.parametrize("verifier,cand,ref,want", [
    (ExactMatch(), "Paris.", "paris", 1.0),
    (ExactMatch(), "Rome", "paris", 0.0),
    (Numeric(), "42.0", "42", 1.0),
    (Numeric(), "4", "four", None),
    (MultipleChoice(), "The answer is (B).", "B", 1.0),
    (MathEqual(), "\\frac{1}{2}", "0.5", 1.0),
    (MathEqual(), "3", "0.5", 0.0),
    (All([Numeric(), ExactMatch()]), "42", "42", 1.0),
    (Any([Numeric(), ExactMatch()]), "41", "42", 0.0),
    (Weighted([(Numeric(), 3), (ExactMatch(), 1)]), "42.0", "42", 0.75),
])
def test_every_verifier_returns_a_verdict(verifier, cand, ref, want):
    row = {**ROW, "final_text": cand, "privileged": {"reference": ref}}
    v = verifier.check(cand, ref, row)
    assert type(v) is Verdict
    assert v.reward == want and isinstance(v.reason, str) and v.reason
    assert v.status == ("ok" if want is not None else "no_verdict")


def test_code_exec_returns_a_verdict_with_meta():
    ref = {"test": "def check(f):\n    assert f(3) == 9\n", "entry_point": "sq"}
    ok = CodeExec(timeout=10).check("def sq(x):\n    return x * x\n", ref, {})
    bad = CodeExec(timeout=10).check("def sq(x):\n    return x + x\n", ref, {})
    assert type(ok) is Verdict and type(bad) is Verdict
    assert (ok.reward, ok.reason, ok.status) == (1.0, "all tests passed", "ok")
    assert bad.reward == 0.0 and bad.reason.startswith("failed")
    assert ok.meta["outcome"] == "passed" and bad.meta["outcome"] == "failed"


@pytest.mark.parametrize("kwargs,err", [
    ({"reward": float("nan")}, "outside"),
    ({"reward": 1.5}, "outside"),
    ({"reward": -0.1}, "outside"),
    ({"reward": "1"}, "must be a number"),
    ({"reward": 1.0, "status": "error"}, "a score goes with"),
    ({"reward": None, "status": "ok"}, "a score goes with"),
    ({"reward": 1.0, "status": "fine"}, "not one of"),
    ({"reward": 1.0, "reason": 3}, "reason must be a string"),
])
def test_verdict_refuses_what_the_row_contract_refuses(kwargs, err):
    with pytest.raises((ValueError, TypeError), match=err):
        Verdict(**kwargs)


def test_verdict_normalizes_numbers_and_derives_status():
    assert Verdict(True).reward == 1.0 and type(Verdict(np.float32(0.5)).reward) is float
    assert Verdict(None).status == "no_verdict" and Verdict(0).status == "ok"
    assert Verdict(None, "timeout", "slow").status == "timeout"  # the grading loop's form
    assert set(JUDGE_STATUSES) >= {"ok", "no_verdict", "error", "timeout"}


# the judge contract still takes every shape from a user's callable ---------------------------
@pytest.mark.parametrize("raw,want", [
    (1, (1.0, "ok", None)),
    (True, (1.0, "ok", None)),
    (np.float64(0.25), (0.25, "ok", None)),
    ((0.0, "wrong"), (0.0, "ok", "wrong")),
    ((None, "cannot tell"), (None, "no_verdict", "cannot tell")),
    ({"reward": 1, "reason": "r", "meta": {"x": 1}, "markers": {"len": 3}}, (1.0, "ok", "r")),
    ({"reward": None}, (None, "no_verdict", "judge returned reward None")),
    (None, (None, "no_verdict", "judge returned None (cannot judge)")),
    (Verdict(0.5, reason="half"), (0.5, "ok", "half")),
    (float("nan"), (None, "invalid_result", "judge returned NaN")),
    (1.5, (None, "invalid_result", "judge returned 1.5, outside [0, 1]")),
    ("1", (None, "invalid_result", "judge returned str '1', not a number in [0, 1]")),
    ({"score": 1}, (None, "invalid_result", "judge returned a dict without 'reward': ['score']")),
    ({"reward": 1, "reason": 7},
     (None, "invalid_result", "judge returned a 'reason' of type int, not a string")),
])
def test_normalize_verdict_accepts_the_old_shapes(raw, want):
    v = normalize_verdict(raw)
    assert type(v) is Verdict and (v.reward, v.status, v.reason) == want


def test_user_callables_of_every_shape_through_rows():
    shapes = {
        "number": lambda p, c, ref: float(c == ref),
        "tuple": lambda p, c, ref: (float(c == ref), "compared"),
        "dict": lambda p, c, ref: {"reward": float(c == ref), "reason": "d", "meta": {"k": 1},
                                   "markers": {"m": 2.0}},
        "verdict": lambda p, c, ref: Verdict(float(c == ref), reason="v", meta={"k": 2}),
    }
    for name, fn in shapes.items():
        r = assay.rows(["2+3?"], [["5", "4"]], fn, references=["5"])
        assert [x["reward"] for x in r] == [1.0, 0.0], name
        assert {x["judge_status"] for x in r} == {"ok"}, name
    r = assay.rows(["q"], [["a"]], shapes["dict"], references=["a"])
    assert r[0]["judge_meta"] == {"k": 1} and r[0]["markers"] == {"m": 2.0} \
        and r[0]["reason"] == "d"


def test_a_verifier_building_a_bad_verdict_fails_the_row_not_silently():
    class Broken(judging.Verifier):
        name = "broken"

        def check(self, candidate, reference, row):
            return Verdict(math.nan, reason="oops")

    r = assay.rows(["q"], [["a"]], Broken(), references=["a"])
    assert r[0]["reward"] is None and r[0]["judge_status"] == "error"
    assert "outside [0, 1]" in r[0]["reason"]
