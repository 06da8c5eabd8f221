"""The run directory is written one shard's table at a time (issue 50): the rows Parquet a row
group at most, byte for byte what one ``pq.write_table`` of every row writes, and run.json's
facts from each source's failed and unjudged rows only."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assay.rows import Rows
from assay.stages import finish
from assay.stages.cache import load_rows
from assay.unjudged import failed_samples

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_cached_outputs import finished  # noqa: E402


def test_rows_file_is_written_a_row_group_at_a_time(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store, spec, run = finished(tmp_path)
    whole = {n: pa.concat_tables([load_rows(store, p).to_arrow() for p in parts])
             for n, parts in run.graded.items()}  # type: ignore[attr-defined]
    assert max(len(parts) for parts in run.graded.values()) > 1  # type: ignore[attr-defined]
    monkeypatch.setattr(finish, "GROUP_ROWS", 3, raising=False)
    held: list[int] = []
    real = pq.ParquetWriter.write_table

    def spy(self: pq.ParquetWriter, table: pa.Table, row_group_size: int | None = None) -> None:
        held.append(table.num_rows)
        real(self, table, row_group_size)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", spy)
    handed: list[int] = []
    monkeypatch.setattr(finish, "failed_samples",
                        lambda rows: handed.extend(len(r) for r in rows.values())
                        or failed_samples(rows))
    out = tmp_path / "out"
    info = finish.finish_run(store, spec, run, out, started=1.0)  # type: ignore[arg-type]
    assert held and max(held) <= 3
    monkeypatch.setattr(pq.ParquetWriter, "write_table", real)
    for name, table in whole.items():
        want = io.BytesIO()
        pq.write_table(table, want, compression="zstd", row_group_size=3)
        assert (out / "rows" / f"{name}.parquet").read_bytes() == want.getvalue()
    # the facts read the failed and unjudged rows only (none here), and say what all rows say
    assert sum(handed) < sum(t.num_rows for t in whole.values())
    assert info.get("failed_samples", {}) == failed_samples({n: Rows(t) for n, t in whole.items()})


def test_write_rows_is_one_write_table_of_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    import assay

    t = assay.rows([f"q{i}" for i in range(40)], [["a", "b", "c"]] * 40,
                   [[1.0, 0.0, 1.0]] * 40).to_arrow()
    shards = [t.slice(i, 7) for i in range(0, t.num_rows, 7)]
    default = finish.GROUP_ROWS
    for group in (default, 10, 7, 1):  # groups cut inside a shard and on its edge
        monkeypatch.setattr(finish, "GROUP_ROWS", group)
        got, want = io.BytesIO(), io.BytesIO()
        finish.write_rows(iter(shards), got)
        pq.write_table(pa.concat_tables(shards), want, compression="zstd", row_group_size=group)
        assert got.getvalue() == want.getvalue(), group
