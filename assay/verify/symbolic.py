"""MathEqual: symbolic answer equality decided by math-verify, with a timeout that really fires.

math-verify's clock is ``signal.alarm``; :func:`assay.grade` runs this verifier in worker processes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from assay.errors import VerifierError
from assay.judging import Verifier


class MathEqual(Verifier):
    """1 when the answer's final expression equals the reference, decided by math-verify
    (Kydlicek et al., HuggingFace Math-Verify): LaTeX and plain expressions, ``\\boxed{}``,
    fractions, sets, intervals, percentages ("50\\%" = 0.5), matrices; else 0.

    ``timeout`` (whole seconds) bounds parsing and comparison each; it is math-verify's own
    ``signal.alarm`` clock, which only works on a main thread, so :func:`assay.grade` runs
    MathEqual in worker processes (each on its own main thread) and kills a worker that still
    runs past ``hard_timeout``. A timeout gives ``judge_status == "timeout"`` (reward None),
    never a silent 0. Called directly off the main thread, ``check`` raises instead of running
    without a clock.

    A reference that math-verify cannot parse cannot be judged (reward None).

    Example:
        >>> MathEqual().check("so the result is $\\\\boxed{\\\\frac{1}{2}}$", "0.5", {})
        (1.0, 'math-verify: equal')
    """

    parallel = True

    def __init__(self, timeout: int = 5, *, float_rounding: int = 6, name: str = "MathEqual") -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
            raise VerifierError(f"MathEqual(timeout={timeout!r}): whole seconds >= 1 (signal.alarm's unit)")
        import math_verify  # noqa: F401  (fail at construction, and load before worker processes fork)

        self.timeout = timeout
        self.float_rounding = float_rounding
        self.hard_timeout = 3 * timeout + 5
        self.name = name
        self._gold: dict[str, Any] = {}  # parsed references: k samples of a task share one

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_gold": {}}

    def __repr__(self) -> str:
        return f"MathEqual(timeout={self.timeout})"

    def check(self, candidate: str, reference: Any, row: Mapping[str, Any]) -> Any:
        from math_verify import parse, verify
        from math_verify.errors import TimeoutException

        if threading.current_thread() is not threading.main_thread():
            raise VerifierError("MathEqual needs the main thread for its timeout (signal.alarm); "
                                "grade with assay.grade(), which runs it in worker processes")
        if isinstance(reference, bool) or not isinstance(reference, (str, int, float)):
            raise VerifierError(f"MathEqual: reference must be a string or a number, got {type(reference).__name__}")
        ref = str(reference)
        if "$" not in ref and "\\boxed" not in ref:
            ref = f"${ref}$"
        gold = self._gold.get(ref)
        if gold is None:
            try:
                gold = parse(ref, parsing_timeout=self.timeout, raise_on_error=True)
            except TimeoutException:
                raise TimeoutError(f"math-verify took over {self.timeout}s parsing the reference") from None
            except Exception as e:
                return None, f"reference {reference!r:.60} does not parse: {type(e).__name__}"
            if len(self._gold) >= 4096:
                self._gold.clear()
            self._gold[ref] = gold
        if not gold:
            return None, f"reference {reference!r:.60} is not a math expression math-verify can read"
        try:
            got = parse(candidate, parsing_timeout=self.timeout, raise_on_error=True)
        except TimeoutException:
            raise TimeoutError(f"math-verify took over {self.timeout}s parsing the answer") from None
        except Exception as e:
            return 0.0, f"answer does not parse: {type(e).__name__}"
        if not got:
            return 0.0, "no answer found"
        try:
            ok = verify(gold, got, float_rounding=self.float_rounding, timeout_seconds=self.timeout,
                        raise_on_error=True)
        except TimeoutException:
            raise TimeoutError(f"math-verify took over {self.timeout}s comparing") from None
        except Exception as e:  # math-verify's own default: a failed comparison is "not equal"
            return 0.0, f"math-verify could not compare ({type(e).__name__}): not equal"
        return (1.0 if ok else 0.0), f"math-verify: {'equal' if ok else 'not equal'}"
