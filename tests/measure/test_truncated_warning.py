"""A pass rate over mostly truncated rows carries a warning on its own line (str() and the
report), not only in the Generation table."""

from __future__ import annotations

import assay
from assay.measure import pass_at
from assay.report import result_doc


def _rows(truncated_of):
    return assay.rows([f"q{i}" for i in range(12)], [["a", "b"]] * 12, [[0, 0]] * 12,
                      markers=[[{"truncated": truncated_of(i, j)} for j in range(2)]
                               for i in range(12)])


def test_mostly_truncated_rows_warn_on_the_line() -> None:
    res = pass_at(_rows(lambda i, j: 1.0))
    line = str(res).split(" (1 warning")[0]
    assert line.startswith("pass@1 0.000 [")
    assert "[warning: 100% of these rows were truncated (finish 'length')]" in line
    doc = result_doc("pass_at", "pass_at[m]", res)
    assert "[warning: 100% of these rows were truncated" in doc["text"]
    assert doc["report"].splitlines()[0] == doc["text"]
    assert res.truncated_share == 1.0


def test_a_few_truncated_rows_or_none_do_not_warn() -> None:
    some = pass_at(_rows(lambda i, j: float(i == 0)))
    assert some.truncated_share == round(2 / 24, 4) and "truncated" not in str(some)
    plain = pass_at(assay.rows(["q"] * 2, ["a", "b"], [1, 0]))
    assert plain.truncated_share is None and "truncated" not in plain.report()
