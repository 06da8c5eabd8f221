"""Rates below one a second read as such ("3.59 s/row"), never "0 rows/s" (issue 47)."""

from __future__ import annotations

import io

import pytest

from assay.rates import rate_text
from assay.stages.cache import StageResult, print_progress


@pytest.mark.parametrize(("n", "s", "text"), [
    (32, 114.8, "3.59 s/row"),        # the reward model of the issue: 0.28 rows/s
    (1, 250.0, "250 s/row"),
    (3, 2.0, "1.5 rows/s"),
    (99, 1.0, "99 rows/s"),
    (5000, 2.0, "2,500 rows/s"),
    (10, 10.0, "1 rows/s"),
    (0, 3.0, "0 rows/s"),
    (4, 0.0, "inf rows/s"),
])
def test_rate_text(n: float, s: float, text: str) -> None:
    assert rate_text(n, s) == text


def test_rate_text_names_its_unit() -> None:
    assert rate_text(2, 9.0, "pair") == "4.5 s/pair"
    assert rate_text(9, 2.0, "pair") == "4.5 pairs/s"
    assert rate_text(9, 2.0, "query", "queries") == "4.5 queries/s"


@pytest.mark.parametrize(("n", "s", "rate"), [(32, 114.8, "(3.59 s/row)"),
                                              (3, 2.0, "(1.5 rows/s)"),
                                              (9000, 3.0, "(3,000 rows/s)")])
def test_the_stage_line_never_reads_zero_rows_per_second(n: int, s: float, rate: str) -> None:
    out = io.StringIO()
    print_progress(StageResult("score-rows", "m rm:a shard 1/1", "k", {}, {}, {"rows": n},
                               seconds=s), out)
    assert out.getvalue() == f"[score-rows] m rm:a shard 1/1: {n} rows in {s:.1f} s {rate}\n"
