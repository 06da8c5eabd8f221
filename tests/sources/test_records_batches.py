"""A file source's rows are built a batch of records at a time (issue 50: the whole file as
Python records held ~1.1 GB at 400k rows, twice with the data check before the run): the same
table, checksum and stored bytes as one build of every record, the same errors, and neither the
build nor the check reads the file whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assay.errors import SpecError
from assay.sources import records as rec_mod
from assay.sources.file import FileSource
from assay.spec import parse_spec
from assay.store import Store


def _records(n: int) -> list[dict[str, Any]]:
    # prompts repeat far apart (i % 7): a task's rollouts span batches, numbered on across them
    return [{"q": f"{i % 7}+1?", "a": str(i % 3), "gold": str((i % 7) + 1),
             "s": {"ms": i}, "lang": ["en", "de"][i % 2], "info.x": i % 5}
            for i in range(n)]


def _spec(tmp: Path, name: str, extra: str = "") -> Any:
    return parse_spec(
        "{name: d, sources: [{name: m, kind: file, path: " + name + ", fields: {prompt: q, "
        "completion: a, reference: gold, markers: {ms: s.ms, x: info.x}}, "
        "verifier: {kind: exact_match}" + extra + "}]}", base_dir=str(tmp))


def _write(tmp: Path, recs: list[dict[str, Any]], name: str = "r.jsonl") -> None:
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(recs), tmp / name)
    else:
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in recs))


def _whole(src: FileSource, paths: Any) -> Any:
    """The build before batches: every record read, then one build."""
    return src.rows_from(paths, src.read_source_records(paths), src._where(paths))


@pytest.mark.parametrize("name", ["r.jsonl", "r.parquet"])
def test_batches_build_the_same_table_checksum_and_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    _write(tmp_path, _records(103), name)
    spec = _spec(tmp_path, name)
    src = spec.sources[0]
    whole = _whole(src, spec.paths)
    monkeypatch.setattr(rec_mod, "BATCH_RECORDS", 10)  # 11 batches
    sizes: list[int] = []
    batches = rec_mod.record_batches

    def counted(*a: Any, **k: Any) -> Any:
        for b in batches(*a, **k):
            sizes.append(len(b))
            yield b

    monkeypatch.setattr("assay.sources.file.record_batches", counted)

    def whole_read(*a: Any) -> Any:
        raise AssertionError("the file was read whole")

    monkeypatch.setattr(FileSource, "read_source_records", whole_read)
    got = src.build_rows(spec.paths)
    assert max(sizes) == 10 and sum(sizes) == 103
    assert got == whole and got.checksum() == whole.checksum()
    assert [r["rollout_index"] for r in got] == [r["rollout_index"] for r in whole]
    assert max(r["rollout_index"] for r in got) == 14  # 103 records, 7 prompts
    store = Store(tmp_path / "s")
    assert store.put_table(got.to_arrow()) == store.put_table(whole.to_arrow())  # same Parquet
    # the data check before a run, and validate's field listing, do not read it whole either
    assert src.check(spec.paths) == ([], [])
    assert "meta.lang" in src.row_fields(spec.paths)


def test_a_conflict_across_batches_is_the_error_of_one_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _records(40)
    recs[33]["gold"] = "99"  # task "5+1?" first seen in record 6: batch 1 against batch 4
    _write(tmp_path, recs)
    spec = _spec(tmp_path, "r.jsonl")
    src = spec.sources[0]
    with pytest.raises(SpecError) as one:
        _whole(src, spec.paths)
    assert "record 6 and record 34" in str(one.value)
    # the batches find it themselves: record 6's batch is sealed by then (its prompt kept as a
    # digest), so they name both records but not the values ...
    with pytest.raises(SpecError) as batched:
        src.rows_in_batches(rec_mod.record_batches(tmp_path / "r.jsonl", "jsonl", 10),
                            src._where(spec.paths))
    assert "record 6 and record 34 have the same task id" in str(batched.value)
    # ... and what a user runs words it as one build does (the bad data read whole)
    monkeypatch.setattr(rec_mod, "BATCH_RECORDS", 10)
    for build in (src.build_rows, src.build_stored):
        with pytest.raises(SpecError) as told:
            build(spec.paths)
        assert str(told.value) == str(one.value)
    assert src.check(spec.paths)[0] == [f"fields: {one.value}"]  # the check before a run


@pytest.mark.parametrize("damage", ["bad_json", "missing_field", "bad_marker"])
def test_bad_data_reads_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  damage: str) -> None:
    lines = [json.dumps(r) for r in _records(40)]
    if damage == "bad_json":
        lines[27] = '{"q": "1+1?", '
    elif damage == "missing_field":
        lines[27] = json.dumps({k: v for k, v in _records(40)[27].items() if k != "a"})
    else:
        lines[27] = json.dumps({**_records(40)[27], "s": {"ms": "fast"}})
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    spec = _spec(tmp_path, "r.jsonl")
    src = spec.sources[0]
    monkeypatch.setattr(rec_mod, "BATCH_RECORDS", 10)
    with pytest.raises(SpecError) as built:
        src.build_rows(spec.paths)
    with pytest.raises(SpecError) as stored:  # what build-rows asks: written as it is built
        src.build_stored(spec.paths)
    with pytest.raises(SpecError) as one:
        _whole(src, spec.paths)
    assert str(built.value) == str(one.value) == str(stored.value)
    assert ":28:" in str(one.value) or "record 28" in str(one.value)
    problems, _ = src.check(spec.paths)
    assert problems and all("28" in p for p in problems)
    monkeypatch.setattr(rec_mod, "BATCH_RECORDS", 10_000)  # one batch: the old path's words
    assert src.check(spec.paths)[0] == problems


def test_the_build_frees_its_book_and_records_before_combining(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Combining the batches' columns is the build's peak: the task book (a Python string per
    task) and the last batch's records are gone by then (at 400k rows ~950k objects), and the
    table is the same."""
    import weakref

    from assay import builder

    books: list[weakref.ref[Any]] = []

    class Book(builder.TaskBook):
        def __init__(self) -> None:
            super().__init__()
            books.append(weakref.ref(self))

    alive: list[bool] = []
    real = rec_mod._one_chunk

    def combine(tables: list[pa.Table]) -> pa.Table:
        alive.append(books[0]() is not None)
        return real(tables)

    _write(tmp_path, _records(40))
    spec = _spec(tmp_path, "r.jsonl")
    src = spec.sources[0]
    want = _whole(src, spec.paths).to_arrow()
    monkeypatch.setattr(builder, "TaskBook", Book)
    monkeypatch.setattr(rec_mod, "_one_chunk", combine)
    got = src.rows_in_batches(rec_mod.record_batches(tmp_path / "r.jsonl", "jsonl", 10),
                              src._where(spec.paths))
    assert alive == [False]
    assert got is not None and got.to_arrow().equals(want)


@pytest.mark.parametrize("name", ["r.jsonl", "r.parquet"])
def test_the_stored_build_is_written_as_built_and_is_the_same_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """What build-rows stores: each batch's rows written into the Parquet file as they are
    built (no table of every row is ever made), the same rows and checksum as one build."""
    from assay.rows import ParquetRows

    recs = _records(103)
    recs[5]["s"] = {"ms": None}  # a marker value left out: in one batch only
    _write(tmp_path, recs, name)
    spec = _spec(tmp_path, name)
    src = spec.sources[0]
    whole = _whole(src, spec.paths)
    monkeypatch.setattr(rec_mod, "BATCH_RECORDS", 10)
    monkeypatch.setattr(rec_mod, "ROW_GROUP_ROWS", 10)

    def no_table(*a: Any) -> Any:
        raise AssertionError("a table of every row was made")

    monkeypatch.setattr(rec_mod, "_one_chunk", no_table)
    monkeypatch.setattr(FileSource, "read_source_records", no_table)
    got, info = src.build_stored(spec.paths)
    assert isinstance(got, ParquetRows) and info == {}
    assert len(got) == 103
    assert pq.ParquetFile(pa.BufferReader(got.data)).metadata.num_row_groups == 11
    assert got.checksum() == whole.checksum()
    assert got.to_rows().to_arrow().equals(whole.to_arrow())
    # the stage stores it as it is; the rows read back are the one build's
    from assay.stages.cache import _store_output

    store = Store(tmp_path / "s")
    key, checksum = _store_output(store, got)
    assert checksum == whole.checksum()
    assert store.get_table(key).equals(whole.to_arrow())



def test_the_book_keeps_a_digest_per_task_of_an_earlier_batch_not_its_prompt() -> None:
    """(issue 50: a task's prompt as Python objects, ~1 KB a task, held by the book for the
    whole build: ~1 GB at 1M tasks)"""
    import gc
    import tracemalloc

    from assay.builder import TaskBook, rows

    n = 3000
    book = TaskBook()
    rows(["warm"], ["a"])  # the first call's imports and caches are not the book's
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    r = rows([f"{i:05d} " + "long prompt " * 100 for i in range(n)], ["a"] * n, book=book)
    del r
    book.seal()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(book.sealed) == n and not book.first
    assert held / n < 400, held / n  # bytes a task (its 1.2 KB prompt is not among them)
