"""A shard reads its own rows (issue 50): a stored rows table is cut into row groups, and
``load_slice`` decodes only the groups that hold a shard's rows; the rows, their chunks and
their checksum are those of slicing the whole table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from assay.rows import Rows
from assay.stages import cache
from assay.stages.cache import StageResult, _store_output, load_columns, load_rows, load_slice
from assay.store import Store


def _stored(tmp_path, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, StageResult, Rows]:
    monkeypatch.setattr(cache, "ROW_GROUP_ROWS", 10)
    tasks = [f"t{i // 3}" for i in range(n)]
    rows = Rows(pa.table({"task_id": tasks, "prompt": [f"q{t}" for t in tasks],
                          "final_text": [str(i) for i in range(n)],
                          "reward": [float(i % 2) for i in range(n)]}))
    store = Store(tmp_path / "store")
    key, checksum = _store_output(store, rows)
    res = StageResult("filter-rows", "a", "k", {"rows": key}, {"rows": checksum})
    cache._TABLES.clear()
    cache._FILES.clear()
    cache._GROUPS.clear()
    return store, res, rows


def test_a_slice_equals_the_whole_tables_slice_and_decodes_only_its_groups(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, res, rows = _stored(tmp_path, 95, monkeypatch)
    import pyarrow.parquet as pq

    decoded: list[int] = []
    real = pq.ParquetFile.read_row_group

    def counted(self, i, *a, **k):  # type: ignore[no-untyped-def]
        decoded.append(i)
        return real(self, i, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    whole = rows.to_arrow()
    for lo, hi in [(0, 9), (9, 21), (21, 30), (30, 95), (94, 95), (40, 40)]:
        got = load_slice(store, res, lo, hi).to_arrow()
        want = whole.slice(lo, hi - lo)
        assert got.equals(want), (lo, hi)
        assert all(c.num_chunks <= 1 for c in got.columns)  # one chunk, as a slice of one
        assert Rows(got).checksum() == Rows(want).checksum()
    assert max(decoded) == 9 and sorted(set(decoded)) == list(range(10))  # 10 groups of 10
    decoded.clear()
    load_slice(store, res, 92, 95)
    assert decoded == []  # its group is still decoded (neighbouring shards share it)
    load_slice(store, res, 0, 5)
    assert decoded == [0]  # one group, not the table


def test_the_cut_reads_only_task_ids(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, res, rows = _stored(tmp_path, 40, monkeypatch)
    import pyarrow.parquet as pq

    read: list[object] = []
    real = pq.ParquetFile.read

    def counted(self, *a, **k):  # type: ignore[no-untyped-def]
        read.append(k.get("columns"))
        return real(self, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "read", counted)
    got = load_columns(store, res, ["task_id"]).to_arrow()
    assert read == [["task_id"]]  # the other columns are not decoded
    assert got.column("task_id").to_pylist() == rows.to_arrow().column("task_id").to_pylist()
    # the whole table, when read, is the same rows whatever its groups
    assert load_rows(store, res).to_arrow().equals(rows.to_arrow())


def test_a_vanished_table_is_named(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.errors import StoreVanishedError

    store, res, _ = _stored(tmp_path, 20, monkeypatch)
    monkeypatch.setattr(Store, "get_bytes", lambda self, key: None)
    with pytest.raises(StoreVanishedError, match="vanished from"):
        load_slice(store, res, 0, 5)
