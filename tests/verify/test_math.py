"""MathEqual on math-verify: notation cases, and a timeout that really fires in parallel grading."""

from __future__ import annotations

import threading
import time

import pytest

import assay
from assay.errors import VerifierError
from assay.verify import MathEqual

# math-verify needs many seconds on these (a deep parse; a tower of powers compared with 2)
PATHOLOGICAL = ["$" + "(" * 3000 + "1" + ")" * 3000 + "$", "$\\boxed{9^{9^{9^{9^{9}}}}}$"]


@pytest.mark.parametrize("cand,ref,want", [
    ("The answer is $\\boxed{\\frac{1}{2}}$", "0.5", 1.0),
    ("$\\frac{2}{4}$", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\{2, 1\\}}", "\\{1,2\\}", 1.0),
    ("$50\\%$", "0.5", 1.0),
    ("so it is 42", "42", 1.0),
    ("$x^2 + 2x + 1$", "(x+1)^2", 1.0),
    ("-5", "5", 0.0),
    ("3.14", "314", 0.0),
    ("$\\boxed{3}$", "4", 0.0),
    ("I do not know", "4", 0.0),
])
def test_math_equal_cases(cand, ref, want):
    assert MathEqual().check(cand, ref, {}).reward == want


def test_math_equal_validates():
    with pytest.raises(VerifierError, match="whole seconds"):
        MathEqual(timeout=0.5)
    with pytest.raises(VerifierError):
        MathEqual().check("1", None, {})
    out = []
    t = threading.Thread(target=lambda: out.append(
        pytest.raises(VerifierError, MathEqual().check, "1", "1", {})))
    t.start()
    t.join()
    assert out  # off the main thread it refuses to run without a clock


def test_timeout_fires_in_worker_processes_from_a_thread():
    """Grading from a non-main thread (as a Prefect task would) still times out: the work runs
    in worker processes, on their main thread."""
    cands = PATHOLOGICAL + ["$\\boxed{2}$"] * 18
    out: list = []

    def run():
        start = time.monotonic()
        out.append(assay.rows(["p"], [cands], MathEqual(timeout=1), references=["2"], workers=2))
        out.append(time.monotonic() - start)

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert not t.is_alive()
    rows, elapsed = out
    assert [r["judge_status"] for r in rows[:2]] == ["timeout", "timeout"]
    assert all(r["reward"] is None for r in rows[:2])
    assert "math-verify took over 1s" in rows[0]["reason"]
    assert [r["reward"] for r in rows[2:]] == [1.0] * 18
    assert elapsed < 30


def test_hard_timeout_kills_a_stuck_worker():
    """A verifier stuck where no alarm reaches it is killed at its hard limit; other rows and
    the rest of its chunk still get graded."""

    class Stuck(assay.judging.Verifier):
        name, parallel, hard_timeout, needs_reference = "Stuck", True, 1.0, False

        def check(self, candidate, reference, row):
            if candidate == "hang":
                import signal
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
                time.sleep(3600)
            return 1.0

    start = time.monotonic()
    rows = assay.grade(assay.rows(["p"], [["ok"] * 10 + ["hang"] + ["ok"] * 10]), Stuck(),
                       workers=2)
    assert time.monotonic() - start < 20
    assert rows[10]["judge_status"] == "timeout" and rows[10]["reward"] is None
    assert [r["reward"] for i, r in enumerate(rows) if i != 10] == [1.0] * 20
