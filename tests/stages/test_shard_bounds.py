"""Cutting a source's filtered rows into grading shards reads their task_id column alone
(issue 50: a cached run decoded the whole table only to find the shard boundaries)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import assay
from assay.spec import parse_spec
from assay.stages.cache import _TABLES, StageResult
from assay.stages.declare import shard_bounds
from assay.stages.wiring import study_graph
from assay.store import Store

SPEC = ("{name: d, execution: {shard_rows: 3}, sources: [{name: b, kind: file, path: b.jsonl, "
        "fields: {prompt: q, reference: c}, verifier: {kind: exact_match}}]}")


def _rows() -> assay.Rows:
    # tasks of 1, 2 and 3 rows: a cut at 3 rows must not split one
    prompts = [f"p{i}" for i in range(7)]
    comps = [[f"c{i}{j}" for j in range(1 + i % 3)] for i in range(7)]
    rewards = [[float(j % 2) for j in range(1 + i % 3)] for i in range(7)]
    return assay.rows(prompts, comps, rewards)


def test_expansion_reads_only_task_id_and_cuts_the_same_shards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "store")
    rows = _rows()
    key = store.put_table(rows.to_arrow())
    filtered = StageResult("filter-rows", "b", "k", {"rows": key}, {"rows": rows.checksum()},
                           {"rows": len(rows)})
    _TABLES.clear()

    def whole(*a: object, **k: object) -> None:
        raise AssertionError("expansion decoded the whole filtered table")

    monkeypatch.setattr(Store, "get_table", whole)
    read = pq.ParquetFile.read
    asked: list[object] = []

    def spy(self: pq.ParquetFile, columns: object = None, **kw: object) -> object:
        asked.append(columns)
        return read(self, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read", spy)
    g = study_graph(parse_spec(SPEC), store, progress=None)
    expand = g.nodes["filter-rows[b]"].expand
    assert expand is not None
    nodes = expand(filtered)
    cuts = [n.args(lambda d: None)[0][2].bounds for n in nodes if n.stage == "grade"]
    assert cuts == shard_bounds(rows, 3)  # the whole rows' boundaries, cut from one column
    assert len(cuts) > 1 and cuts[-1][1] == len(rows)
    assert not _TABLES  # nothing memoized at full width either
    assert asked == [["task_id"]]  # one read, of one column


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
