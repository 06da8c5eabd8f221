"""Numeric: read the final number out of an answer and compare it with the reference's number.

Answer-span extraction keeps signs, decimals, thousands separators, fractions and percentages.
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from assay.errors import VerifierError
from assay.judging import Verdict, Verifier
from assay.verify.registry import VERIFIERS

# A number: optional sign (ASCII or Unicode minus) not glued to a preceding word or digit,
# strict thousands groups (1,234,567) or plain digits, optional decimals and exponent.
_NUM = (r"(?<![\w.])(?P<sign>[-+\u2212])?(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?P<dec>\.\d+)?"
        r"(?:[eE](?P<exp>[-+]?\d+))?")
_NUMBER = re.compile(
    r"(?:\\[dt]?frac\{\s*(?P<fn>[-+\u2212]?\d+)\s*\}\{\s*(?P<fd>\d+)\s*\})"  # \frac{a}{b}
    r"|(?<![\w./])(?P<rn>[-+\u2212]?\d+)\s*/\s*(?P<rd>\d+)(?![\d.])"       # a/b
    r"|" + _NUM + r"(?P<pct>\s?(?:%|\\%|\s?percent\b))?"
)
_ANSWER_IS = re.compile(
    r"(?:final\s+answer|answer|result)\s*(?:is|=|:|equals)\s*:?\s*(?P<span>[^\n]*)", re.I)


@dataclass(frozen=True)
class ParsedNumber:
    """A number read from text: its value, whether it was written as a percentage, and the text."""

    value: float
    percent: bool
    text: str


def _boxed(text: str) -> str | None:
    """The body of the last ``\\boxed{...}`` (balanced braces), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += (text[j] == "{") - (text[j] == "}")
        if depth == 0:
            return text[i + 1: j]
    return None


def _numbers(text: str) -> list[ParsedNumber]:
    out = []
    for m in _NUMBER.finditer(text):
        g = m.groupdict()
        if g["fn"] is not None or g["rn"] is not None:
            num, den = (g["fn"], g["fd"]) if g["fn"] is not None else (g["rn"], g["rd"])
            num = num.replace("\u2212", "-")
            if int(den) == 0:
                continue
            out.append(ParsedNumber(float(Fraction(int(num), int(den))), False, m.group(0)))
            continue
        if g["int"] is None and g["dec"] is None:
            continue
        s = (g["int"] or "0").replace(",", "") + (g["dec"] or "")
        if g["exp"]:
            s += "e" + g["exp"]
        v = float(s)
        if g["sign"] in ("-", "\u2212"):
            v = -v
        out.append(ParsedNumber(v, bool(g["pct"]), m.group(0).strip()))
    return out


def extract_number(text: str) -> ParsedNumber | None:
    """The answer's number: the last one in ``\\boxed{}``, else in the span after "the answer
    is" (or "answer:", "result ="), else the last number in the text.

    Keeps decimals ("3.5"), signs ("-5", "\u22125"), thousands separators ("1,234"), fractions
    ("3/4", "\\frac{3}{4}") and percentages ("50%"). A comma not followed by exactly three digits
    separates numbers; European decimal commas are not read.

    Example:
        >>> extract_number("The answer is 3.5.").value
        3.5
        >>> extract_number("So we get -1,234.5 apples").value
        -1234.5
        >>> extract_number("\\\\boxed{\\\\frac{3}{4}}").value
        0.75
        >>> extract_number("It rose by 12%").percent
        True
    """
    text = unicodedata.normalize("NFKC", text).replace("$", " ")
    boxed = _boxed(text)
    if boxed is not None:
        nums = _numbers(boxed)
        return nums[-1] if nums else None
    spans = list(_ANSWER_IS.finditer(text))
    if spans:
        nums = _numbers(spans[-1].group("span"))
        if nums:
            return nums[0]
    nums = _numbers(text)
    return nums[-1] if nums else None


def _reference_number(reference: object) -> ParsedNumber | None:
    if isinstance(reference, bool):
        raise VerifierError(f"Numeric: reference {reference!r} is a bool, not a number")
    if isinstance(reference, numbers.Real):
        v = float(reference)
        if not math.isfinite(v):
            raise VerifierError(f"Numeric: reference {reference!r} is not a finite number")
        return ParsedNumber(v, False, repr(reference))
    if isinstance(reference, str):
        return extract_number(reference)
    raise VerifierError(f"Numeric: reference must be a number or a string, "
                        f"got {type(reference).__name__}")


@VERIFIERS.register("numeric")
class Numeric(Verifier):
    """1 when the answer's number equals the reference number within tolerance, else 0.

    Extraction: :func:`extract_number`. Tolerance: ``|got - want| <= tol``, or, with ``rel``,
    ``<= max(tol, rel * |want|)``. Percentages: "50%" is compared both as written (50) and as a
    fraction (0.5), so it matches a reference of "50", "50%" or "0.5"; the reason says which.
    A reference without a number cannot be judged (reward None).

    Example:
        >>> v = Numeric().check("The answer is 3.5", "3.5", {})
        >>> v.reward, v.reason
        (1.0, 'got 3.5, want 3.5')
        >>> Numeric().check("-5", "5", {}).reason
        'got -5.0, want 5.0'
    """

    def __init__(self, tol: float = 1e-6, rel: float | None = None, *,
                 name: str = "Numeric") -> None:
        for arg, value in (("tol", tol), ("rel", rel)):
            if value is None and arg == "rel":
                continue
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not (value >= 0 and math.isfinite(value))):
                raise VerifierError(f"Numeric({arg}={value!r}): must be a finite number >= 0")
        self.tol = float(tol)
        self.rel = None if rel is None else float(rel)
        self.name = name

    def __repr__(self) -> str:
        return f"Numeric(tol={self.tol}, rel={self.rel})"

    def _close(self, got: float, want: float) -> bool:
        bound = self.tol if self.rel is None else max(self.tol, self.rel * abs(want))
        return abs(got - want) <= bound

    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> Verdict:
        want = _reference_number(reference)
        if want is None:
            return Verdict(None, reason=f"reference {reference!r:.60} contains no number")
        got = extract_number(candidate)
        if got is None:
            return Verdict(0.0, reason="no number in the answer")
        readings = [(got.value, want.value)]
        if got.percent != want.percent:
            if got.percent:
                readings.append((got.value / 100.0, want.value))
            else:
                readings.append((got.value, want.value / 100.0))
        for g, w in readings:
            if self._close(g, w):
                note = "" if (g, w) == readings[0] else " (percent read as a fraction)"
                return Verdict(1.0, reason=f"got {got.value!r}{'%' if got.percent else ''}, "
                                           f"want {want.value!r}{'%' if want.percent else ''}"
                                           f"{note}")
        return Verdict(0.0, reason=f"got {got.value!r}{'%' if got.percent else ''}, "
                                   f"want {want.value!r}{'%' if want.percent else ''}")
