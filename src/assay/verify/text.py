"""ExactMatch: the answer equals the reference after a documented, sign-safe normalization.

Normalization never deletes a sign or a decimal point: "-5" is not "5", "3.14" is not "314".
Sentence punctuation ending the answer is not part of it: "Paris." equals "paris".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence

from assay.errors import VerifierError
from assay.judging import Verdict, Verifier
from assay.verify.registry import VERIFIERS

_ARTICLES = re.compile(r"\b(?:a|an|the)\b", re.I)
_SPACE = re.compile(r"\s+")
# A run of sentence-final punctuation (. ! ? ellipsis, and their CJK full-width forms) at the end
# of the answer, trailing whitespace aside. A "." ending the text is never a decimal point
# (that needs a digit after it), so "3." is 3 while ".5", "3.5" and "e.g" keep their dots.
_TRAILING = re.compile(r"[.!?\u2026\u3002\uff01\uff1f]+(?=\s*$)")


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
              punctuation: bool = False, whitespace: bool = True, trailing: bool = True) -> str:
    """The ExactMatch normalization: Unicode NFC always, then optionally ``casefold``, remove
    ``punctuation`` (sign-, decimal- and thousands-safe, see above), remove the English
    ``articles`` a/an/the, collapse ``whitespace`` (also strips the ends), and drop the
    ``trailing`` sentence punctuation (". ! ?" and an ellipsis ending the answer).

    Example:
        >>> normalize("  The  Answer: -3.14! ", articles=True, punctuation=True)
        'answer -3.14'
        >>> (normalize("Paris."), normalize("e.g."), normalize("3.5"),
        ...  normalize("Paris.", trailing=False))
        ('paris', 'e.g', '3.5', 'paris.')
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
    if trailing:
        text = _TRAILING.sub("", text)
    return text


@VERIFIERS.register("exact_match")
class ExactMatch(Verifier):
    """1 when the normalized answer equals a normalized reference (a string, or a list of
    accepted strings), else 0. Defaults: NFC + casefold + collapsed whitespace + no trailing
    sentence punctuation ("Paris." is "paris"); signs, decimal points and inner punctuation
    count unless ``punctuation=True``; article removal is opt-in (:func:`normalize`).

    Example:
        >>> m = ExactMatch()
        >>> m.check("Paris.", "paris", {}).reward, m.check("-5", "5", {}).reward
        (1.0, 0.0)
    """

    def __init__(self, *, casefold: bool = True, articles: bool = False, punctuation: bool = False,
                 whitespace: bool = True, trailing: bool = True, name: str = "ExactMatch") -> None:
        for arg, v in (("casefold", casefold), ("articles", articles), ("punctuation", punctuation),
                       ("whitespace", whitespace), ("trailing", trailing)):
            if not isinstance(v, bool):
                raise VerifierError(f"ExactMatch({arg}={v!r}): must be True or False")
        self.options = {"casefold": casefold, "articles": articles, "punctuation": punctuation,
                        "whitespace": whitespace, "trailing": trailing}
        self.name = name

    def __repr__(self) -> str:
        return "ExactMatch(" + ", ".join(f"{k}={v}" for k, v in self.options.items()) + ")"

    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> Verdict:
        if isinstance(reference, str):
            refs = [reference]
        elif (isinstance(reference, Sequence) and reference
              and all(isinstance(r, str) for r in reference)):
            refs = list(reference)
        else:
            raise VerifierError(f"ExactMatch: reference must be a string or a non-empty list of "
                                f"strings, got {type(reference).__name__} {reference!r:.60}")
        got = normalize(candidate, **self.options)
        for r in refs:
            if got == normalize(r, **self.options):
                return Verdict(1.0, reason="exact match")
        return Verdict(0.0, reason=f"no match: {got[:60]!r}")
