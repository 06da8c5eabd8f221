"""ExactMatch, MultipleChoice and Numeric: the edge cases the lessons list, each pinned."""

from __future__ import annotations

import pytest

import assay
from assay.errors import VerifierError
from assay.verify import (
    ExactMatch,
    MultipleChoice,
    Numeric,
    Verdict,
    extract_choice,
    extract_number,
    normalize,
)


# ExactMatch -----------------------------------------------------------------------------------
@pytest.mark.parametrize("cand,ref,want", [
    ("-5", "5", 0.0), ("3.14", "314", 0.0), ("+3", "3", 0.0), ("Paris", "paris", 1.0),
    ("  New   York ", "new york", 1.0), ("STRASSE", "straße", 1.0),  # casefold
    ("caf\u0065\u0301", "caf\u00e9", 1.0),  # NFC
])
def test_exact_match_default(cand, ref, want):
    assert ExactMatch().check(cand, ref, {}).reward == want


def test_exact_match_punctuation_keeps_signs_and_decimals():
    em = ExactMatch(punctuation=True)
    assert em.check("-5.", "-5", {}).reward == 1.0
    assert em.check("-5", "5", {}).reward == 0.0
    assert em.check("3.14!", "3.14", {}).reward == 1.0
    assert em.check("3.14", "314", {}).reward == 0.0
    assert em.check("1,234", "1234", {}).reward == 0.0  # a thousands comma is kept, not deleted
    assert em.check("\"yes,\" she said", "yes she said", {}).reward == 1.0
    assert normalize("well-known", punctuation=True) == "well known"
    assert normalize("x = -2", punctuation=True) == "x -2"


def test_exact_match_articles_opt_in_and_lists():
    assert ExactMatch().check("the cat", "cat", {}).reward == 0.0
    assert ExactMatch(articles=True).check("The cat", "a cat", {}).reward == 1.0
    assert ExactMatch(articles=True).check("theory", "ory", {}).reward == 0.0  # whole words only
    assert ExactMatch().check("NYC", ["New York", "nyc"], {}).reward == 1.0
    with pytest.raises(VerifierError):
        ExactMatch().check("x", 5, {})
    with pytest.raises(VerifierError):
        ExactMatch(casefold="yes")


# MultipleChoice -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,want", [
    ("A dog is not a cat.", None),               # article, not a choice
    ("I think so.", None),                        # pronoun, not a choice
    ("I'm sure it's fine", None),
    ("a", "A"),                                 # the whole answer is one letter
    ("a cat", None), ("I", None),
    ("I think the answer is (c).", "C"),
    ("The answer is B", "B"),
    ("Answer: d", "D"),
    ("I would pick B because A is wrong.", "B"),
    ("(A) is tempting, but (D) is right", "D"),
    ("C", "C"), (" (b) ", "B"), ("**A**", "A"),
    ("$\\boxed{C}$", "C"),
    ("Between A and B, I choose B.", "B"),
])
def test_extract_choice(text, want):
    assert extract_choice(text, "ABCD") == want


def test_multiple_choice_with_i_as_an_option():
    mc = MultipleChoice("ABCDEFGHIJ")
    assert mc.check("I believe it is J", "I", {}).reward == 0.0
    assert (mc.check("I believe it is J", "J", {}).reward,
            mc.check("I believe it is J", "J", {}).reason) == (1.0, "chose J, want J")
    assert mc.check("The answer is I.", "I", {}).reward == 1.0
    assert mc.check("I am not sure.", "I", {}).reason == "no choice found among ABCDEFGHIJ"
    assert MultipleChoice().check("B", 1, {}).reward == 1.0  # index references
    with pytest.raises(VerifierError):
        MultipleChoice().check("B", "E", {})
    with pytest.raises(VerifierError):
        MultipleChoice("AAB")


# Numeric --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,value,percent", [
    ("The answer is 3.5", 3.5, False),
    ("The answer is 3.5.", 3.5, False),
    ("so x = 1,234,567 in total", 1234567.0, False),
    ("-5", -5.0, False), ("\u22125", -5.0, False), ("It fell to -0.25", -0.25, False),
    ("3/4 of them", 0.75, False), ("\\frac{-3}{4}", -0.75, False),
    ("$\\boxed{\\dfrac{1}{8}}$", 0.125, False),
    ("a rise of 12.5%", 12.5, True), ("50 percent", 50.0, True),
    ("The answer is 42 and not 41", 42.0, False),
    ("first 10, then 20", 20.0, False),
    ("1e-3", 0.001, False),
    ("costs $1,234.50", 1234.5, False),
])
def test_extract_number(text, value, percent):
    got = extract_number(text)
    assert got is not None and got.value == pytest.approx(value) and got.percent is percent


def test_extract_number_none_and_ambiguity():
    assert extract_number("no digits here") is None
    assert extract_number("x1 y2") is None  # digits glued to words are not numbers
    assert extract_number("3,5").value == 5.0  # European decimal comma is not read (documented)


def test_numeric_tolerances_and_percent():
    assert Numeric().check("3.5000001", "3.5", {}).reward == 1.0
    assert Numeric().check("3.51", "3.5", {}).reward == 0.0
    assert Numeric(rel=0.01).check("101", "100", {}).reward == 1.0
    assert Numeric(rel=0.01).check("102", "100", {}).reward == 0.0
    assert Numeric().check("50%", "0.5", {}).reward == 1.0
    assert Numeric().check("50%", "50", {}).reward == 1.0
    assert Numeric().check("0.5", "50%", {}).reward == 1.0
    assert Numeric().check("5%", "50", {}).reward == 0.0
    assert Numeric().check("-5", "5", {}).reward == 0.0
    assert Numeric().check("The answer is 3.5", 3.5, {}).reward == 1.0
    assert Numeric().check("nothing", "4", {}) == Verdict(0.0, reason="no number in the answer")
    assert Numeric().check("4", "four", {}).reward is None
    with pytest.raises(VerifierError):
        Numeric(tol=-1)
    with pytest.raises(VerifierError):
        Numeric().check("1", True, {})


def test_numeric_through_rows_no_reference_status():
    r = assay.rows(["q", "q2"], [["The answer is 3.5"], ["7"]], Numeric(),
                   references=["3.5", "seven"])
    assert [x["reward"] for x in r] == [1.0, None]
    assert r[1]["judge_status"] == "no_verdict"
    r = assay.rows(["q"], [["3"]], Numeric())
    assert r[0]["judge_status"] == "no_reference" and r[0]["reward"] is None


# ExactMatch: trailing sentence punctuation is not part of the answer -----------------------------
@pytest.mark.parametrize("cand,ref,want", [
    ("Paris.", "paris", 1.0), ("Paris!", "Paris", 1.0), ("paris?!", "Paris", 1.0),
    ("Paris\u2026", "paris", 1.0), ("Paris. ", "paris", 1.0),
    ("\u5df4\u9ece\u3002", "\u5df4\u9ece", 1.0),
    ("The answer is 3.", "the answer is 3", 1.0), ("3.", "3", 1.0), ("-3.", "-3", 1.0),
    # signs, decimal points and inner punctuation still count
    ("-3", "3", 0.0), ("-3.", "3", 0.0), ("+3", "3", 0.0), ("3.5", "35", 0.0), ("3.5.", "35", 0.0),
    (".5", "5", 0.0), ("3.5", "3.5.", 1.0),
    ("e.g.", "e.g", 1.0), ("e.g", "eg", 0.0), ("e.g.", "eg", 0.0), ("i.e. Paris", "ie paris", 0.0),
    ("Paris, France.", "paris france", 0.0), ("Paris:", "paris", 0.0),  # only . ! ? end a sentence
])
def test_exact_match_trailing_sentence_punctuation(cand, ref, want):
    v = ExactMatch().check(cand, ref, {})
    assert v.reward == want, v.reason
    # and symmetric: the reference may carry the full stop instead
    assert ExactMatch().check(ref, cand, {}).reward == want


def test_exact_match_trailing_is_an_option():
    assert ExactMatch(trailing=False).check("Paris.", "paris", {}).reward == 0.0
    assert "trailing=False" in repr(ExactMatch(trailing=False))
    with pytest.raises(VerifierError, match="trailing"):
        ExactMatch(trailing="no")
    # with punctuation=True the stop is dropped anyway; signs and decimals stay
    assert ExactMatch(punctuation=True, trailing=False).check("Paris.", "paris", {}).reward == 1.0
    assert normalize("-3.5.", punctuation=True) == "-3.5"
