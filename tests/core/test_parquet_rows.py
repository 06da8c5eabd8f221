"""Rows written as a Parquet file as they are built (``ParquetRows``, issue 50) have the
checksum of the same rows held as a table: every column read back in its own type (Parquet
renames a list's item and a map's entries, and a type's name is hashed), on both string paths
and across row groups."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assay.rows import ParquetRows, Rows


def _rows(n: int, null_inside: bool = False) -> Rows:
    return Rows(pa.table({
        "task_id": [f"t{i // 4}" for i in range(n)],
        "prompt": [f"prompt {i // 4} é" for i in range(n)],
        "final_text": [str(i) for i in range(n)],
        "reward": [None if i % 9 == 0 else float(i % 2) for i in range(n)],
        "markers": pa.array([[("tokens", float(i))] if i % 3 else None for i in range(n)],
                            type=pa.map_(pa.string(), pa.float64())),
        "messages": pa.array(
            [None if null_inside and i == n - 1 else
             [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "ok"}]
             for i in range(n)],
            type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        "rollout_index": [i % 4 for i in range(n)],
    }))


@pytest.mark.parametrize("n,group,null_inside", [(7, 3, False), (3000, 500, False),
                                                (3000, 16384, False), (3000, 500, True)])
def test_the_checksum_of_the_file_is_that_of_the_table(n: int, group: int,
                                                       null_inside: bool) -> None:
    """(``null_inside``: the last row, in the last batch, without messages: the column's path,
    chosen over the whole column, changes)"""
    rows = _rows(n, null_inside)
    t = rows.to_arrow()
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, t.schema, compression="zstd") as w:
        for lo in range(0, n, 1000):  # written a batch at a time, as a build writes
            w.write_table(t.slice(lo, 1000), row_group_size=group)
    p = ParquetRows(buf.getvalue(), t.schema)
    assert len(p) == n
    assert p.checksum() == rows.checksum()
    assert p.to_rows().to_arrow().equals(t)
    # the renamed types are what a plain read gives: without the rows' schema the id differs
    plain = pq.ParquetFile(pa.BufferReader(buf.getvalue())).read()
    assert str(plain.schema.field("messages").type) != str(t.schema.field("messages").type)
