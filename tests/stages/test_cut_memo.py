"""A cached rerun names its shards without reading them (issue 50): the cut of a source's rows
and each shard's content checksum are remembered in the store under the rows' content key, so
a rerun's shard stages find their keys without decoding or hashing a row; what they remember
equals what reading and hashing each shard gives, and an edited record still re-grades only
its own shard."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from assay import stages
from assay.modes import shard_bounds
from assay.rows import Rows
from assay.spec import load_spec
from assay.stages import cache
from assay.stages.cache import StageResult, _store_output, cut_rows, load_slice
from assay.stages.declare import Shard
from assay.store import Store
from tests.helpers.specs import exact_match_study

SPEC = exact_match_study("cutmemo", k=2, execution="shard_rows: 8")


def _write(tmp: Path, wrong: int | None = None) -> Path:
    with open(tmp / "a.jsonl", "w") as f:
        for i in range(30):
            for j in range(2):
                gold = str(i * 3)
                c = gold if (i + j) % 2 or i == wrong else "x"
                f.write(json.dumps({"id": f"t{i}", "q": f"3 * {i}?", "c": c, "gold": gold})
                        + "\n")
    (tmp / "spec.yaml").write_text(SPEC)
    return tmp / "spec.yaml"


def _fresh_memos() -> None:
    cache._TABLES.clear()
    cache._FILES.clear()
    cache._GROUPS.clear()


def _stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, StageResult]:
    monkeypatch.setattr(cache, "ROW_GROUP_ROWS", 7)
    tasks = [f"t{i // 3}" for i in range(50)]
    rows = Rows(pa.table({"task_id": tasks, "prompt": [f"q{t}" for t in tasks],
                          "final_text": [str(i) for i in range(50)]}))
    store = Store(tmp_path / "store")
    key, checksum = _store_output(store, rows)
    _fresh_memos()
    return store, StageResult("filter-rows", "a", "k", {"rows": key}, {"rows": checksum})


def test_the_memo_holds_what_reading_and_hashing_each_shard_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, res = _stored(tmp_path, monkeypatch)
    bounds, sums = cut_rows(store, res, shard_bounds, 10)
    whole = cache.load_rows(store, res)
    assert bounds == shard_bounds(whole, 10)
    assert sums == [load_slice(store, res, lo, hi).checksum() for lo, hi in bounds]
    assert sums == [Rows(whole.to_arrow().slice(lo, hi - lo)).checksum() for lo, hi in bounds]
    assert len(set(sums)) == len(sums)

    def no_reading(*a: object, **k: object) -> None:
        raise AssertionError("the memo was not used: the rows were read")

    _fresh_memos()
    monkeypatch.setattr(cache, "load_columns", no_reading)
    monkeypatch.setattr(cache, "load_slice", no_reading)
    assert cut_rows(store, res, shard_bounds, 10) == (bounds, sums)
    # another shard size is another cut (read again, not the first one's memo)
    with pytest.raises(AssertionError, match="memo was not used"):
        cut_rows(store, res, shard_bounds, 5)


def test_a_damaged_memo_is_cut_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, res = _stored(tmp_path, monkeypatch)
    want = cut_rows(store, res, shard_bounds, 10)
    names = [json.loads(p.read_text())["name"] for p in (store.root / "refs").rglob("*.json")]
    (ref,) = [n for n in names if n.startswith("assay-cut/")]
    store.set_ref(ref, store.put_json({"bounds": [[0, 50]]}), {})  # no checksums
    _fresh_memos()
    assert cut_rows(store, res, shard_bounds, 10) == want


def test_a_rerun_reads_no_shard_and_an_edit_regrades_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "store")
    first = stages.run_study(load_spec(_write(tmp_path)), store, progress=None)
    grades = [r for r in first.results if r.stage == "grade"]
    assert len(grades) == 8 and not any(r.cached for r in grades)
    # the node ids a flow names a batch of shards by (flows/study.py) are the graph's
    assert [f"{r.stage}[{r.label}]" for r in grades] == [
        Shard(i, 8, (0, 0)).node_id("grade", "a") for i in range(8)]

    read: list[tuple[int, int]] = []
    real = cache.load_slice

    def counted(store: Store, res: StageResult, lo: int, hi: int, name: str = "rows") -> Rows:
        read.append((lo, hi))
        return real(store, res, lo, hi, name)

    monkeypatch.setattr(cache, "load_slice", counted)
    _fresh_memos()
    again = stages.run_study(load_spec(_write(tmp_path)), store, progress=None)
    assert all(r.cached for r in again.results)
    assert read == []  # before: every shard read and hashed its rows to find its key
    assert [r.key for r in again.results] == [r.key for r in first.results]

    _fresh_memos()  # one task's completions changed: a new cut of new rows, one shard graded
    edited = stages.run_study(load_spec(_write(tmp_path, wrong=9)), store, progress=None)
    fresh = [r.label for r in edited.results if r.stage == "grade" and not r.cached]
    assert fresh == ["a shard 3/8"]
    # the new rows' cut hashed each shard once, and the changed shard read its rows to grade them
    rows = next(r for r in edited.results if r.stage == "filter-rows")
    assert sorted(read) == sorted([*shard_bounds(cache.load_rows(store, rows), 8), (16, 24)])
