"""The page's data written from a rows file one chunk at a time: byte for byte the files of the
whole-table writer, whatever the row order, categories, reward models and chunk size."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import assay
import assay.view.data as data
from assay.view.data import write_source, write_source_file


def _table(tasks: int, k: int, shuffle: bool, seed: int = 5) -> pa.Table:
    """``tasks`` tasks of 1..k rows, some scored by a reward model, a category in meta; rows
    shuffled (a task's rows apart) when ``shuffle``."""
    rng = random.Random(seed)
    prompts, comps, rewards, markers, metas = [], [], [], [], []
    for t in range(tasks):
        n = rng.randint(1, k)
        prompts.append(f"q{t} <b>&")
        comps.append([f"a{t}{j}" for j in range(n)])
        rewards.append([float(rng.random() < 0.5) for _ in range(n)])
        markers.append([{"rm:r1": rng.random()} if t % 3 == 0 else
                        {"truncated": 1.0} if t % 7 == 1 else {} for _ in range(n)])
        metas.append([{"level": f"L{t % 4}"} if t % 5 else {}] * n)
    rows = assay.rows(prompts, comps, rewards, task_ids=[f"t{i}" for i in range(tasks)],
                      markers=markers, meta=metas).to_arrow()
    if shuffle:
        order = list(range(rows.num_rows))
        rng.shuffle(order)
        rows = rows.take(pa.array(order))
    return rows


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("by", [None, "level"])
@pytest.mark.parametrize("chunk_rows", [1, 7, 2000])
def test_streamed_files_equal_whole_table_files(tmp_path: Path, shuffle: bool, by: str | None,
                                                chunk_rows: int) -> None:
    table = _table(60, 5, shuffle)
    path = tmp_path / "m.parquet"
    pq.write_table(table, path, row_group_size=50)  # batches that cut across tasks
    whole, streamed = tmp_path / "whole", tmp_path / "streamed"
    whole.mkdir()
    streamed.mkdir()
    want = write_source(whole, 0, "m", pq.ParquetFile(path).read(), by, chunk_rows)
    got = write_source_file(streamed, 0, "m", path, by, chunk_rows)
    assert got == want
    assert _files(streamed) == _files(whole)
    assert want["rm"] == ["r1"] and len(want["chunks"]) >= (1 if chunk_rows == 2000 else 9)
    if by:  # the categories reached the lines
        lines = json.loads(_files(whole)["s0-tasks.js"].decode()[len('assayData("tasks:0",'):-3])
        assert {ln[4] for ln in lines["lines"]} == {"L0", "L1", "L2", "L3", None}


def test_empty_rows_file(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    pq.write_table(_table(3, 2, False).slice(0, 0), path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    want = write_source(tmp_path / "a", 0, "m", pq.ParquetFile(path).read(), None)
    assert write_source_file(tmp_path / "b", 0, "m", path, None) == want
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_page_holds_one_chunk_of_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_view turns at most one chunk's rows (cut at task boundaries) into Python objects at
    a time, not the whole table (2-3 KB a row: 1.9 GB at 400k rows)."""
    from assay.report import build_report, write_run_dir
    from assay.view import write_view

    table = _table(400, 4, False)
    run = tmp_path / "run"
    files = build_report({"name": "s", "checksum": "c", "description": None},
                         [{"name": "m", "rows": table.num_rows, "tasks": 400,
                           "verifier": "exact_match"}], [], [], [])
    write_run_dir(run, files, {"m": assay.Rows(table)}, {})
    seen: list[int] = []
    real = data.task_docs

    def spy(t: pa.Table, by: str | None = None) -> list[dict[str, object]]:
        seen.append(t.num_rows)
        return real(t, by)

    monkeypatch.setattr(data, "task_docs", spy)
    monkeypatch.setattr("assay.view.task_docs", spy)
    write_view(run, chunk_rows=50)
    assert seen and max(seen) <= 50 + 3  # a chunk closes before a task would take it past 50
    assert len(seen) >= table.num_rows // 53
