"""``stored_columns`` fills the columns a projection left out exactly as ``as_table`` does, for
every subset of the optional columns, without its per-value check."""

from __future__ import annotations

import itertools
import sys

import assay

ROWS = sys.modules["assay.rows"]
OPTIONAL = ["reward", "markers", "judge_status", "reason", "judge_name", "meta", "privileged",
            "judge_meta", "prompt", "final_text", "messages"]


def test_every_projection_is_filled_as_the_full_check_fills_it() -> None:
    t = assay.rows(["q", "p"], [["a", "b"], ["c"]], [[1.0, None], [0.0]],
                   markers=[[{"tokens": 3}, {}], [{"tokens": 1}]]).to_arrow()
    for k in range(len(OPTIONAL) + 1):
        for cols in itertools.combinations(OPTIONAL, k):
            part = t.select(["task_id", "rollout_index", *cols])
            got = ROWS.stored_columns(part).to_arrow()
            assert got.equals(ROWS.as_table(part, require=())), cols
