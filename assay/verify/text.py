"""ExactMatch: the answer equals the reference after a documented, sign-safe normalization.

Normalization never deletes a sign or a decimal point: "-5" is not "5", "3.14" is not "314".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from assay.errors import VerifierError
from assay.judging import Verifier
from assay.verify.registry import VERIFIERS

_ARTICLES = re.compile(r"\b(?:a|an|the)\b", re.I)
_SPACE = re.compile(r"\s+")


def _strip_punctuation(text: str) -> str:
    """Drop Unicode punctuation except what carries a number's meaning: a sign before a digit
    ("-5", "+3"), a decimal point before a digit ("3.14", ".5"), a thousands comma between
    digits ("1,234"), and "%"."""
    out = []
    n = len(text)
    for i, ch in enumerate(text):
        if unicodedata.category(ch).startswith("P") or ch in "+$^`~|<>=":
            nxt = text[i + 1] if i + 1 < n else ""
            prv = text[i - 1] if i else ""
            keep = (
                (ch in "-+\u2212" and nxt.isdigit() and not prv.isalnum())
                or (ch == "." and nxt.isdigit())
                or (ch == "," and prv.isdigit() and nxt.isdigit())
                or ch == "%"
            )
            out.append(ch if keep else " ")
        else:
            out.append(ch)
    return "".join(out)


def normalize(text: str, *, casefold: bool = True, articles: bool = False,
              punctuation: bool = False, whitespace: bool = True) -> str:
    """The ExactMatch normalization: Unicode NFC always, then optionally ``casefold``, remove
    ``punctuation`` (sign-, decimal- and thousands-safe, see above), remove the English
    ``articles`` a/an/the, and collapse ``whitespace`` (also strips the ends).

    Example:
        >>> normalize("  The  Answer: -3.14! ", articles=True, punctuation=True)
        'answer -3.14'
    """
    text = unicodedata.normalize("NFC", text)
    if casefold:
        text = text.casefold()
    if punctuation:
        text = _strip_punctuation(text)
    if articles:
        text = _ARTICLES.sub(" ", text)
    if whitespace:
        text = _SPACE.sub(" ", text).strip()
    return text


@VERIFIERS.register("exact_match")
class ExactMatch(Verifier):
    """1 when the normalized answer equals a normalized reference (a string, or a list of
    accepted strings), else 0. Defaults: NFC + casefold + collapsed whitespace; punctuation and
    article removal are opt-in (:func:`normalize`).

    Example:
        >>> ExactMatch().check("Paris ", "paris", {})[0], ExactMatch().check("-5", "5", {})[0]
        (1.0, 0.0)
    """

    def __init__(self, *, casefold: bool = True, articles: bool = False, punctuation: bool = False,
                 whitespace: bool = True, name: str = "ExactMatch") -> None:
        for arg, v in (("casefold", casefold), ("articles", articles), ("punctuation", punctuation),
                       ("whitespace", whitespace)):
            if not isinstance(v, bool):
                raise VerifierError(f"ExactMatch({arg}={v!r}): must be True or False")
        self.options = {"casefold": casefold, "articles": articles, "punctuation": punctuation,
                        "whitespace": whitespace}
        self.name = name

    def __repr__(self) -> str:
        return "ExactMatch(" + ", ".join(f"{k}={v}" for k, v in self.options.items()) + ")"

    def check(self, candidate: str, reference: Any, row: Mapping[str, Any]) -> Any:
        if isinstance(reference, str):
            refs = [reference]
        elif isinstance(reference, Sequence) and reference and all(isinstance(r, str) for r in reference):
            refs = list(reference)
        else:
            raise VerifierError(f"ExactMatch: reference must be a string or a non-empty list of strings, "
                                f"got {type(reference).__name__} {reference!r:.60}")
        got = normalize(candidate, **self.options)
        for r in refs:
            if got == normalize(r, **self.options):
                return 1.0, "exact match"
        return 0.0, f"no match: {got[:60]!r}"
