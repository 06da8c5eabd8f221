"""MathEqual on the set, interval and degree notations users write (issue 19): each pair is
checked against the verdict a mathematician gives, including the empty-set spellings
math-verify alone reads as "not equal"."""

from __future__ import annotations

import pytest

from assay.verify import MathEqual
from assay.verify.symbolic import same_notation

EMPTY = ["$\\varnothing$", "$\\emptyset$", "$\\{\\}$", "$\\{ \\}$", "$\\boxed{\\varnothing}$",
         "$\u2205$"]


@pytest.mark.parametrize("cand", EMPTY)
@pytest.mark.parametrize("ref", ["\\emptyset", "\\varnothing", "\\{\\}", "\u2205"])
def test_every_empty_set_spelling_is_the_empty_set(cand: str, ref: str) -> None:
    assert MathEqual().check(cand, ref, {}).reward == 1.0


@pytest.mark.parametrize("cand", EMPTY)
def test_the_empty_set_is_not_a_nonempty_set(cand: str) -> None:
    assert MathEqual().check(cand, "\\{1\\}", {}).reward == 0.0
    assert MathEqual().check(cand, "0", {}).reward == 0.0


@pytest.mark.parametrize("cand,ref,want", [
    # sets: order and spacing do not matter, members do
    ("$\\{1,2,3\\}$", "\\{3,2,1\\}", 1.0),
    ("$\\{1, 2\\}$", "\\{1,3\\}", 0.0),
    # intervals: endpoints and their closedness both matter
    ("$(0,1]$", "(0,1]", 1.0),
    ("$[0,1)$", "(0,1]", 0.0),
    ("$[2, 5)$", "[2,5)", 1.0),
    ("$(-\\infty, 2)$", "(-\\infty,2)", 1.0),
    ("$x \\in (0,1)$", "(0,1)", 1.0),
    ("$(-\\infty,0)\\cup(1,\\infty)$", "(-\\infty,0)\\cup(1,\\infty)", 1.0),
    ("$(-\\infty,0)\\cup(1,\\infty)$", "(-\\infty,0)\\cup[1,\\infty)", 0.0),
    ("$\\mathbb{R}$", "(-\\infty,\\infty)", 1.0),
    # degrees: the sign is dropped, the number compared
    ("$45^\\circ$", "45", 1.0),
    ("$45^{\\circ}$", "45^\\circ", 1.0),
    ("$x=30^{\\circ}$", "30", 1.0),
    ("$45\u00b0$", "45", 1.0),
    ("45 degrees", "45", 1.0),
    ("$46^\\circ$", "45^\\circ", 0.0),
])
def test_sets_intervals_degrees(cand: str, ref: str, want: float) -> None:
    assert MathEqual().check(cand, ref, {}).reward == want


def test_rewrite_keeps_other_commands() -> None:
    # \varnothingx is not \varnothing; a set with members is not emptied
    assert same_notation("$\\varnothingx$") == "$\\varnothingx$"
    assert same_notation("$\\{ 1 \\}$") == "$\\{ 1 \\}$"
