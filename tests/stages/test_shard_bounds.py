"""The shard cut (shard_bounds) finds task starts in Arrow: the same boundaries as the row-by-row
cut over Python strings it replaced (issue 50: a Python string per row stayed in the heap)."""

from __future__ import annotations

import pytest

import assay
from assay.stages.declare import shard_bounds


def _bounds_by_row(ids: list[str], shard_rows: int) -> list[tuple[int, int]]:
    """The cut a row at a time, as shard_bounds did over Python strings (the reference)."""
    bounds, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or (i - start >= shard_rows and ids[i] != ids[i - 1]):
            bounds.append((start, i))
            start = i
    return bounds


@pytest.mark.parametrize("seed", range(5))
def test_shard_bounds_equal_the_row_by_row_cut(seed: int) -> None:
    import random

    import pyarrow as pa

    rng = random.Random(seed)
    ids = [f"t{k}" for k in range(rng.randint(0, 60)) for _ in range(rng.randint(1, 9))]
    rows = assay.Rows(pa.table({"task_id": pa.array(ids, pa.string())}))
    for shard_rows in (1, 2, 5, 16, 1000):
        assert shard_bounds(rows, shard_rows) == _bounds_by_row(ids, shard_rows), shard_rows
