"""MathEqual: symbolic answer equality decided by math-verify, with a timeout that really fires.

math-verify's clock is ``signal.alarm``; :func:`assay.grade` runs this verifier in worker processes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from fractions import Fraction

from assay.errors import VerifierError
from assay.judging import Verdict, Verifier
from assay.verify.registry import VERIFIERS


@VERIFIERS.register("math_equal")
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

    Two shortcuts skip sympy work without changing a verdict (``tests/test_verify_math_fast.py``
    compares them with math-verify on a generated corpus): when math-verify has parsed both
    answers to plain numbers, they are compared exactly with math-verify's own rule (equal
    values; a float within ``float_rounding`` decimals) instead of through sympy's ``round`` and
    ``simplify``; and a bare numeric answer ("42", "-3.5", "1,000", "7/2") is read directly when
    the reference is a plain number. Whenever the outcome is not certain (values close but not
    equal, large magnitudes, any other notation) math-verify decides. Verdicts are memoized per
    (answer, reference) pair.

    Example:
        >>> v = MathEqual().check("so the result is $\\\\boxed{\\\\frac{1}{2}}$", "0.5", {})
        >>> v.reward, v.reason
        (1.0, 'math-verify: equal')
    """

    parallel = True
    #: imported before the study's nodes run side by side (assay.libguard): math-verify
    #: brings sympy and regex, which datasets' pickler reads once their names are loaded
    WARM_IMPORTS = ("math_verify",)

    def __init__(self, timeout: int = 5, *, float_rounding: int = 6,
                 name: str = "MathEqual") -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
            raise VerifierError(f"MathEqual(timeout={timeout!r}): whole seconds >= 1 "
                                "(signal.alarm's unit)")
        # fail at construction, and load before worker processes fork
        import math_verify  # noqa: F401

        self.timeout = timeout
        self.float_rounding = float_rounding
        self.hard_timeout = 3 * timeout + 5
        self.name = name
        self._gold: dict[str, list[object]] = {}  # parsed references: k samples of a task share one
        self._seen: dict[tuple[str, str], Verdict] = {}  # verdicts (deterministic)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_gold": {}, "_seen": {}}

    def __repr__(self) -> str:
        return f"MathEqual(timeout={self.timeout})"

    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> Verdict:
        from math_verify import parse
        from math_verify.errors import TimeoutException

        if threading.current_thread() is not threading.main_thread():
            raise VerifierError("MathEqual needs the main thread for its timeout (signal.alarm); "
                                "grade with assay.grade(), which runs it in worker processes")
        if isinstance(reference, bool) or not isinstance(reference, (str, int, float)):
            raise VerifierError(f"MathEqual: reference must be a string or a number, "
                                f"got {type(reference).__name__}")
        ref = same_notation(str(reference))
        if "$" not in ref and "\\boxed" not in ref:
            ref = f"${ref}$"
        gold = self._gold.get(ref)
        if gold is None:
            try:
                gold = parse(ref, parsing_timeout=self.timeout, raise_on_error=True)
            except TimeoutException:
                raise TimeoutError(
                    f"math-verify took over {self.timeout}s parsing the reference") from None
            except Exception as e:
                return Verdict(None, reason=f"reference {reference!r:.60} does not parse: "
                                            f"{type(e).__name__}")
            if len(self._gold) >= 4096:
                self._gold.clear()
            self._gold[ref] = gold
        if not gold:
            return Verdict(None, reason=f"reference {reference!r:.60} is not a math expression "
                                        "math-verify can read")
        if not isinstance(candidate, str):
            return self._judge(candidate, gold)
        candidate = same_notation(candidate)
        key = (candidate, ref)
        done = self._seen.get(key)
        if done is None:
            done = self._judge(candidate, gold)
            if len(self._seen) >= 65536:
                self._seen.clear()
            self._seen[key] = done
        return done

    def _judge(self, candidate: str, gold: Sequence[object]) -> Verdict:
        from math_verify import parse, verify
        from math_verify.errors import TimeoutException

        fast = bare_number_verdict(candidate, gold, self.float_rounding)
        if fast is not None:
            return Verdict(1.0 if fast else 0.0,
                           reason=f"numbers: {'equal' if fast else 'not equal'}")
        try:
            got = parse(candidate, parsing_timeout=self.timeout, raise_on_error=True)
        except TimeoutException:
            raise TimeoutError(
                f"math-verify took over {self.timeout}s parsing the answer") from None
        except Exception as e:
            return Verdict(0.0, reason=f"answer does not parse: {type(e).__name__}")
        if not got:
            return Verdict(0.0, reason="no answer found")
        ok = parsed_verdict(gold, got, self.float_rounding)
        if ok is not None:  # math-verify's parse, its comparison rule done exactly (see above)
            return Verdict(1.0 if ok else 0.0,
                           reason=f"math-verify: {'equal' if ok else 'not equal'}")
        try:
            ok = verify(gold, got, float_rounding=self.float_rounding, timeout_seconds=self.timeout,
                        raise_on_error=True)
        except TimeoutException:
            raise TimeoutError(f"math-verify took over {self.timeout}s comparing") from None
        except Exception as e:  # math-verify's own default: a failed comparison is "not equal"
            return Verdict(0.0, reason=f"math-verify could not compare ({type(e).__name__}): "
                                       "not equal")
        return Verdict(1.0 if ok else 0.0, reason=f"math-verify: {'equal' if ok else 'not equal'}")


#: Notations math-verify's LaTeX reader does not know, as ones it does: ``\varnothing``
#: (and the Unicode sign) is the empty set, which it reads only as ``\emptyset`` or ``\{\}``.
_SAME_NOTATION = (
    (re.compile(r"\\varnothing(?![A-Za-z])"), r"\\emptyset"),
    (re.compile("\u2205"), r"\\emptyset"),
    (re.compile(r"\\\{(?:\s|~|\\[ ,;!])+\\\}"), r"\\emptyset"),  # "\{ \}": read as no answer
)


def same_notation(text: str) -> str:
    """``text`` with notations math-verify misses rewritten to ones it reads (same meaning).

    Example:
        >>> same_notation(r"$x \\in \\varnothing$")
        '$x \\\\in \\\\emptyset$'
    """
    for pattern, repl in _SAME_NOTATION:
        text = pattern.sub(repl, text)
    return text


# ---------------------------------------------------------------------------------------------
# Exact shortcuts of math-verify's comparison for plain numbers. Each returns True/False only
# where math-verify's verdict is certain, else None (math-verify decides).

#: Largest magnitude decided without math-verify: sympy converts a rational to a 53-bit float
#: before subtracting it from a float, which is exact to far below 10**-6 only up to here.
_MAX_MAGNITUDE = 10**6


def _exact(x: object) -> tuple[Fraction, bool, bool] | None:
    """(exact value, is a float, is an atomic number) for a finite sympy Integer, Rational or
    Float, or an unevaluated integer quotient ``Mul(p, Pow(q, -1))`` (how math-verify reads a
    plain "p/q"); else None."""
    from sympy import Float, Integer, Mul, Pow, Rational

    if isinstance(x, Rational):  # Integer is a Rational
        return Fraction(int(x.p), int(x.q)), False, True
    if isinstance(x, Float):
        sign, man, exp, _ = x._mpf_
        if (man == 0 and exp != 0) or x._prec < 53:  # inf / nan, or a low-precision float
            return None
        v = Fraction(man) * (Fraction(2) ** exp)
        return (-v if sign else v), True, True
    if isinstance(x, Mul) and len(x.args) == 2:
        num, inv = x.args
        if (isinstance(num, Integer) and isinstance(inv, Pow) and isinstance(inv.args[0], Integer)
                and inv.args[1] == -1 and inv.args[0] != 0):
            return Fraction(int(num), int(inv.args[0])), False, False
    return None


def _numbers_equal(a: tuple[Fraction, bool, bool], b: tuple[Fraction, bool, bool],
                   digits: int) -> bool | None:
    """math-verify's ``sympy_expr_eq`` on two plain numbers given as ``_exact`` tuples, or None.

    Exactly equal values are equal. Two rationals (no float), one of them atomic, are equal only
    when exactly equal: math-verify's numeric check compares them exactly and ``simplify(a - b)``
    of distinct rationals is not zero (two quotients would go through a chopped ``evalf``).
    With a float: values more than ``10**-(digits-1)`` apart never round to the same
    ``digits`` decimals, and a float never equals an integer-valued rational after sympy's
    ``round`` (a Float is not an Integer there); other close pairs are left to math-verify."""
    (va, fa, ata), (vb, fb, atb) = a, b
    if va == vb:
        return True
    if not (ata or atb):
        return None
    if not (fa or fb):
        return False
    if max(abs(va), abs(vb)) >= _MAX_MAGNITUDE or digits < 1:
        return None
    if abs(va - vb) > Fraction(1, 10 ** (digits - 1)):
        return False
    if fa and fb:
        return None
    other = vb if fa else va
    return False if other.denominator == 1 else None


def parsed_verdict(gold: Sequence[object], got: Sequence[object], digits: int = 6) -> bool | None:
    """math-verify's ``verify(gold, got)`` for parse outputs whose expressions are plain
    numbers, or None. ``verify`` is true when any (gold, got) element pair compares equal: two
    expressions through ``sympy_expr_eq``, two strings when equal after strip, mixed never.

    Example:
        >>> from math_verify import parse
        >>> parsed_verdict(parse("$0.5$"), parse("so the answer is 1/2"))
        True
    """
    from sympy import Basic

    undecided = False
    for g in gold:
        for t in got:
            if isinstance(g, str) and isinstance(t, str):
                if g.strip() and g.strip() == t.strip():
                    return True
            elif isinstance(g, Basic) and isinstance(t, Basic):
                eg, et = _exact(g), _exact(t)
                if eg is None or et is None:
                    return None
                same = _numbers_equal(eg, et, digits)
                if same:
                    return True
                undecided |= same is None
            elif not isinstance(g, (str, Basic)) or not isinstance(t, (str, Basic)):
                return None  # a matrix or anything else: math-verify decides
    return None if undecided else False


# A bare answer as math-verify's plain-expression extraction reads it: an optional minus, an
# integer without leading zeros (thousands separated by commas in groups of three), optional
# decimals; or a simple fraction of such integers. No "+", no ".5", no "5.", no exponent: math-
# verify reads those differently (tests/test_verify_math_fast.py).
_INT = r"(?:0|[1-9]\d{0,5}|[1-9]\d{0,2}(?:,\d{3}){1,2})"
_BARE_DECIMAL = re.compile(rf"(-?)({_INT})(?:\.(\d{{1,6}}))?")
_BARE_FRACTION = re.compile(r"(-?)(0|[1-9]\d{0,5})/([1-9]\d{0,5})")


def _bare_value(text: str) -> tuple[Fraction, bool, bool, str] | None:
    """(value, is a float, is atomic, math-verify's extracted string) of a bare numeric answer,
    or None. math-verify reads "p/q" as an unevaluated quotient (not atomic)."""
    from sympy import Float

    m = _BARE_DECIMAL.fullmatch(text)
    if m:
        sign, whole, dec = m.groups()
        whole = whole.replace(",", "")
        if dec is None:
            return Fraction(int(whole)) * (-1 if sign else 1), False, True, f"{sign}{whole}"
        v = _exact(Float(f"{sign}{whole}.{dec}"))
        return (v[0], True, True, f"{sign}{whole}.{dec}") if v else None
    m = _BARE_FRACTION.fullmatch(text)
    if m:
        sign, num, den = m.groups()
        return Fraction(int(num), int(den)) * (-1 if sign else 1), False, False, text
    return None


def bare_number_verdict(candidate: str, gold: Sequence[object], digits: int = 6) -> bool | None:
    """math-verify's verdict for a candidate that is only a number ("42", "-3.5", "1,000",
    "7/2") against a parsed plain-number reference, without parsing the candidate; None when
    the candidate is anything else or the verdict is not certain.

    Example:
        >>> from math_verify import parse
        >>> (bare_number_verdict(" 1,000 ", parse("$1000$")),
        ...  bare_number_verdict("-0.5", parse("$1/2$")))
        (True, False)
    """
    if not isinstance(candidate, str) or len(candidate) > 40:
        return None
    got = _bare_value(candidate.strip())
    if got is None:
        return None
    value, is_float, atomic, text = got
    from sympy import Basic

    undecided = False
    for g in gold:
        if isinstance(g, str):
            if g.strip() and g.strip() == text:
                return True
        elif isinstance(g, Basic):
            eg = _exact(g)
            if eg is None:
                return None
            same = _numbers_equal(eg, (value, is_float, atomic), digits)
            if same:
                return True
            undecided |= same is None
        else:
            return None
    return None if undecided else False
