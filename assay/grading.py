"""Grading: apply a verifier or judge to rows and return new graded rows.

Sequential reference implementation of the contract; parallel workers build on it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from assay.judging import Judge, as_judge
from assay.rows import MARKERS_TYPE, Rows, _to_json, as_table, table_to_records


def grade(rows: Any, verifier: Any, *, workers: int | None = None, argument: str = "verifier") -> Rows:
    """Grade ``rows`` with ``verifier`` (or any judge callable); returns new :class:`Rows`.

    The input is never mutated. Each graded row records ``judge_name``, ``judge_status``,
    ``reason`` and ``judge_meta``; markers a judge returns are merged into the row's markers.

    Example:
        >>> import assay
        >>> r = assay.rows(["2+3?"], [["5", "6"]], references=["5"])
        >>> g = grade(r, lambda p, c, ref: c == ref)
        >>> [x["reward"] for x in g]
        [1.0, 0.0]
    """
    judge: Judge = as_judge(verifier, argument=argument)
    table = as_table(rows, require=("prompt", "final_text"))
    records = table_to_records(table)
    verdicts = [judge.judge(r) for r in records]
    return Rows(_with_verdicts(table, judge.name, verdicts))


def _with_verdicts(table: pa.Table, name: str, verdicts: list[Any]) -> pa.Table:
    markers = table.column("markers").to_pylist()
    merged = [dict(m or []) | dict(v.markers) if v.markers else dict(m or []) for m, v in zip(markers, verdicts)]
    cols = {
        "reward": pa.array([v.reward for v in verdicts], type=pa.float64()),
        "judge_name": pa.array([name] * len(verdicts), type=pa.string()),
        "judge_status": pa.array([v.status for v in verdicts], type=pa.string()),
        "reason": pa.array([v.reason for v in verdicts], type=pa.string()),
        "judge_meta": pa.array([_to_json(v.meta, f"row {i} judge_meta") for i, v in enumerate(verdicts)], type=pa.string()),
        "markers": pa.array([list(m.items()) for m in merged], type=MARKERS_TYPE),
    }
    for name_, arr in cols.items():
        i = table.schema.get_field_index(name_)
        table = table.set_column(i, table.schema.field(name_), arr)
    return table
