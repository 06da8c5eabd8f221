"""Grading shards on several threads that want the same filtered table decode it once: the
others wait for it (issue 50: without the graph's expansion loading it first, each shard thread
decoded its own copy of the whole table at once)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import assay
from assay.stages.cache import _TABLES, StageResult, load_rows
from assay.store import Store


def test_threads_wanting_one_table_decode_it_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "s")
    rows = assay.rows(["a", "b"], [["x", "y"], ["z"]], [[1, 0], [1]])
    res = StageResult("filter-rows", "a", "k", {"rows": store.put_table(rows.to_arrow())},
                      {"rows": rows.checksum()})
    _TABLES.clear()
    calls: list[int] = []
    second = threading.Event()
    get_table = Store.get_table

    def slow(self: Store, key: str) -> Any:
        calls.append(1)
        if len(calls) == 1:
            # the first decode waits for a second caller (the bug) or, with none, lets go:
            # only how soon this test ends depends on the wait, never its verdict
            second.wait(2)
        else:
            second.set()
        return get_table(self, key)

    monkeypatch.setattr(Store, "get_table", slow)
    got: list[assay.Rows] = []
    threads = [threading.Thread(target=lambda: got.append(load_rows(store, res)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 4 and all(g == rows for g in got)
    _TABLES.clear()
