"""assay's own rows read back with ``pd.read_parquet`` measure as the rows themselves: an
unjudged reward (NaN in pandas) is None where the row's judge_status says so, markers (pairs in
pandas) are a dict; a NaN beside a score status, or with no status, is still refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import assay
from assay.errors import RowsError
from assay.measure import compare, pass_at
from assay.report import write_run_dir


def _rows() -> assay.Rows:
    tasks = [f"q{i}" for i in range(12) for _ in range(3)]
    rewards = [None if j == 2 and i % 4 == 0 else float((i + j) % 2) for i in range(12)
               for j in range(3)]
    return assay.rows(tasks, [f"c{k}" for k in range(36)], rewards,
                      markers=[{"len": float(k % 5)} if k % 7 else {} for k in range(36)])


def test_pandas_readback_of_assays_rows_measures_the_same(tmp_path: Path) -> None:
    rows = _rows()
    write_run_dir(tmp_path, {}, {"m": rows}, {})
    df = pd.read_parquet(tmp_path / "rows" / "m.parquet")
    # what pandas makes of our own file
    assert df["reward"].isna().sum() == 3 and isinstance(df["markers"][1], list)
    assert str(pass_at(df, k=2)) == str(pass_at(rows, k=2))
    assert str(compare(df, df, metrics=["pass@1", "marker:len"])) == str(
        compare(rows, rows, metrics=["pass@1", "marker:len"]))


def test_a_real_nan_reward_is_still_refused(tmp_path: Path) -> None:
    rows = _rows()
    write_run_dir(tmp_path, {}, {"m": rows}, {})
    df = pd.read_parquet(tmp_path / "rows" / "m.parquet")
    df.loc[0, "reward"] = float("nan")  # beside judge_status "given": not an unjudged row
    with pytest.raises(RowsError, match=r"rows\[0\]: reward is NaN"):
        pass_at(df)
    own = pd.DataFrame({"task_id": ["a", "a"], "reward": [1.0, float("nan")]})  # no status
    with pytest.raises(RowsError, match=r"rows\[1\]: reward is NaN"):
        pass_at(own)
