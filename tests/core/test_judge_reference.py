"""A judge callable gets the reference whenever it can take one, and a judge that cannot take
it is refused when references are given (issue 19: a defaulted reference scored every row 0)."""

from __future__ import annotations

from typing import Any

import pytest

import assay
from assay.errors import RowsTypeError

QS = ["2+3?", "7*6?"]
COMPS = [["5", "4"], ["42", "41"]]
REFS = ["5", "42"]
WANT = [1.0, 0.0, 1.0, 0.0]


def defaulted(prompt: str, completion: str, reference: Any = None) -> bool:
    return completion == reference


def keyword_only(prompt: str, completion: str, *, reference: Any = None) -> bool:
    return completion == reference


def var_keywords(prompt: str, completion: str, **kw: Any) -> bool:
    return completion == kw["reference"]


def var_positional(*args: Any) -> bool:
    return args[1] == args[2]


def required(prompt: str, completion: str, reference: Any) -> bool:
    return completion == reference


@pytest.mark.parametrize("judge", [defaulted, keyword_only, var_keywords, var_positional, required,
                                   lambda p, c, ref=None: c == ref])
def test_every_judge_that_can_take_the_reference_gets_it(judge: Any) -> None:
    r = assay.rows(QS, COMPS, judge, references=REFS)
    assert [x["reward"] for x in r] == WANT
    assert {x["judge_status"] for x in r} == {"ok"}


def test_a_defaulted_reference_stays_default_without_references() -> None:
    r = assay.rows(QS, COMPS, lambda p, c, ref="5": c == ref)
    assert [x["reward"] for x in r] == [1.0, 0.0, 0.0, 0.0]


def test_a_judge_that_cannot_take_the_reference_is_refused() -> None:
    def two(prompt: str, completion: str) -> bool:
        return completion == "5"

    with pytest.raises(RowsTypeError,
                       match=r"two takes \(prompt, completion\) but the rows have references"):
        assay.rows(QS, COMPS, two, references=REFS)
    assert [x["reward"] for x in assay.rows(QS, COMPS, two)] == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(RowsTypeError, match="but the rows have references"):
        assay.grade(assay.rows(QS, COMPS, references=REFS), two)


def test_row_judges_and_bad_shapes() -> None:
    r = assay.rows(QS, COMPS, lambda row: row["final_text"] == row["privileged"]["reference"],
                   references=REFS)
    assert [x["reward"] for x in r] == WANT
    with pytest.raises(RowsTypeError, match="required positional"):
        assay.rows(QS, COMPS, lambda a, b, c, d: 1)

    def kw_only_required(prompt: str, completion: str, *, gold: str) -> bool:
        return True

    with pytest.raises(RowsTypeError, match="kw_only_required"):
        assay.rows(QS, COMPS, kw_only_required)
