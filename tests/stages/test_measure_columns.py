"""The measure stage holds only the columns its measures read (issue 50): every shard's rows are
held for the whole stage, so the prompts and completions are not; the measurements are those
of the whole rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import assay.measure
from assay.stages import measure
from assay.stages.cache import load_doc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))

from test_cached_outputs import finished  # noqa: E402
from test_study_flow import SPEC  # noqa: E402

#: pass_at, compare and eval_variance: measures that read tasks, rewards and markers only
COLUMNS_SPEC = SPEC.replace("  select: {source: a}\n", "  eval_variance: {}\n")


def _measurements(tmp: Path) -> list[dict[str, object]]:
    tmp.mkdir()
    store, _, run = finished(tmp, COLUMNS_SPEC)
    res = next(r for r in run.results if r.stage == "measure")  # type: ignore[attr-defined]
    return load_doc(store, res, "measurements")  # type: ignore[no-any-return]


def test_measures_read_projected_rows_and_measure_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "select" in SPEC and "select" not in COLUMNS_SPEC
    seen: list[set[object]] = []
    real = assay.measure.pass_at

    def spy(rows: object, *a: object, **k: object) -> object:
        t = rows.to_arrow()  # type: ignore[attr-defined]
        seen.append({*t.column("prompt").to_pylist(), *t.column("final_text").to_pylist()})
        return real(rows, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(assay.measure, "pass_at", spy)
    projected = _measurements(tmp_path / "p")
    assert seen and all(not any(texts) for texts in seen)  # the texts were not read
    monkeypatch.setattr(measure, "measured_columns", lambda spec: None, raising=False)
    assert _measurements(tmp_path / "w") == projected  # every column: the same documents
    assert any(d["kind"] == "eval_variance" for d in projected)


def test_projected_shards_are_the_rows_the_full_check_makes_without_reading_the_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measure stage's rows: each shard's measured columns read alone (its text never
    decoded), the others filled as ``as_table`` fills a missing column, and not validated into
    Python again (that doubled the stage's memory at 400k rows)."""
    import pyarrow.parquet as pq

    from assay.rows import Rows
    from assay.stages import cache

    store, spec, run = finished(tmp_path, COLUMNS_SPEC)
    parts = run.graded["a"]  # type: ignore[attr-defined]
    cols = measure.measured_columns(spec)  # type: ignore[arg-type]
    assert cols is not None and len(parts) > 1
    whole = cache.concat_rows(store, parts)  # every column
    cache._TABLES.clear()
    asked: list[object] = []
    real_read = pq.ParquetFile.read

    def read(self, *a, **k):  # type: ignore[no-untyped-def]
        asked.append(k.get("columns"))
        return real_read(self, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "read", read)
    rows_mod = sys.modules["assay.rows"]
    slow: list[str] = []
    real_values = rows_mod._column_values
    monkeypatch.setattr(rows_mod, "_column_values",
                        lambda data, c: slow.append(c) or real_values(data, c))
    got = cache.concat_rows(store, parts, cols)
    assert asked and all(set(c) <= set(cols) for c in asked)  # type: ignore[arg-type]
    assert slow == []  # no value read into Python to be checked again
    monkeypatch.setattr(rows_mod, "_column_values", real_values)
    want = Rows(whole.to_arrow().select(list(cols)))  # what the stage made before
    assert got.to_arrow().equals(want.to_arrow())
