"""MultipleChoice: read the chosen letter from an answer and compare it with the reference letter.

Never reads the article "a"/"A" or the pronoun "I" as a choice; explicit forms win.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from assay.errors import VerifierError
from assay.judging import Verdict, Verifier
from assay.verify.registry import VERIFIERS


def extract_choice(text: str, choices: str = "ABCD") -> str | None:
    """The letter an answer commits to, or None. In order of precedence (last match wins
    within a rule):

    1. an answer statement: "answer is (B)", "Answer: b", "correct option is C", "\\boxed{C}";
    2. a marked letter: "(B)", "[B]", "B)" or "**B**";
    3. the whole answer is one letter ("B", "b.", " (b) ");
    4. the last bare capital letter; "A" and "I" count only when not followed by a lowercase
       word or an apostrophe, so "A cat" and "I think" / "I'm" are never read as choices
       (lowercase bare letters never are).

    Example:
        >>> extract_choice("I think a good answer is (c).")
        'C'
        >>> extract_choice("A dog is not a cat.") is None
        True
    """
    letters = "".join(sorted(set(choices.upper())))
    cls = f"[{re.escape(letters)}{re.escape(letters.lower())}]"
    rules = [
        rf"(?:answer|option|choice)\s*(?:is|:|=)?\s*(?:option\s+|choice\s+)?"
        rf"[(\[*]*({cls})(?![\w'])",
        rf"\\boxed\{{\s*(?:\\text\{{)?\s*({cls})\s*\}}",
        rf"[(\[]({cls})[)\]]|(?<![\w'])({cls})\)|\*\*({cls})\*\*",
    ]
    for pattern in rules[:2]:
        hits = re.findall(pattern, text, re.I)
        if hits:
            return hits[-1].upper()
    hits = [h for tup in re.findall(rules[2], text) for h in tup if h]
    if hits:
        return hits[-1].upper()
    whole = re.fullmatch(rf"\s*[(\[]?\s*({cls})\s*[)\].:]?\s*", text)
    if whole:
        return whole.group(1).upper()
    bare = [m.group(1)
            for m in re.finditer(rf"(?<![\w'])([{re.escape(letters)}])(?![\w'’])", text)
            if m.group(1) not in "AI" or not re.match(r"\s+[a-z]", text[m.end():])]
    return bare[-1] if bare else None


@VERIFIERS.register("multiple_choice")
class MultipleChoice(Verifier):
    """1 when the extracted letter (:func:`extract_choice`) equals the reference letter, else 0.

    ``choices`` is the option letters ("ABCD"); the reference is a letter among them or a
    0-based option index.

    Example:
        >>> MultipleChoice().check("The answer is (B).", "B", {})
        Verdict(reward=1.0, status='ok', reason='chose B, want B', meta=None, markers={})
        >>> MultipleChoice("ABCDEFGHIJ").check("I am not sure.", "I", {}).reason
        'no choice found among ABCDEFGHIJ'
    """

    def __init__(self, choices: str = "ABCD", *, name: str = "MultipleChoice") -> None:
        if (not isinstance(choices, str) or not choices or not choices.isalpha()
                or not choices.isascii()):
            raise VerifierError(f"MultipleChoice(choices={choices!r}): give the option letters, "
                                "e.g. 'ABCD'")
        if len(set(choices.upper())) != len(choices):
            raise VerifierError(f"MultipleChoice(choices={choices!r}): letters repeat")
        self.choices = choices.upper()
        self.name = name

    def __repr__(self) -> str:
        return f"MultipleChoice({self.choices!r})"

    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> Verdict:
        if isinstance(reference, int) and not isinstance(reference, bool):
            if not 0 <= reference < len(self.choices):
                raise VerifierError(f"MultipleChoice: reference index {reference} is outside "
                                    f"0..{len(self.choices) - 1}")
            want = self.choices[reference]
        elif (isinstance(reference, str) and reference.strip().upper() in self.choices
              and len(reference.strip()) == 1):
            want = reference.strip().upper()
        else:
            raise VerifierError(f"MultipleChoice: reference {reference!r:.40} is not one of "
                                f"{list(self.choices)} or an option index")
        got = extract_choice(candidate, self.choices)
        if got is None:
            return Verdict(0.0, reason=f"no choice found among {self.choices}")
        return Verdict(1.0 if got == want else 0.0, reason=f"chose {got}, want {want}")
