"""An unchanged rerun rewrites nothing in its run directory (issue 50): the rows Parquet, the
report files and the view's page stay the same files, no rows are loaded for them, and a file
that was deleted or edited, or results that changed, are written again byte for byte."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from assay import stages
from assay.spec import load_spec
from assay.stages import finish
from assay.store import Store
from assay.view import write_view

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "flows"))

from test_study_flow import SPEC, write_study  # noqa: E402


def files_of(d: Path) -> dict[str, tuple[int, bytes]]:
    """``{relative name: (inode, bytes)}`` of every file but run.json (it holds times): a
    rewritten file, even with the same bytes, gets a new inode (atomic_write renames a temp)."""
    return {p.relative_to(d).as_posix(): (p.stat().st_ino, p.read_bytes())
            for p in sorted(d.rglob("*")) if p.is_file() and p.name != "run.json"}


def finished(tmp: Path, spec_text: str = SPEC) -> tuple[Store, object, object]:
    spec_path = tmp / "spec.yaml"
    if not spec_path.exists():
        write_study(tmp, spec_text)
    else:
        spec_path.write_text(spec_text)
    spec = load_spec(spec_path)
    store = Store(tmp / "store")
    return store, spec, stages.run_study(spec, store, progress=None)


def test_an_unchanged_rerun_loads_no_rows_and_rewrites_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, spec, run = finished(tmp_path)
    out = tmp_path / "out"
    first = finish.finish_run(store, spec, run, out, started=1.0)  # type: ignore[arg-type]
    page = write_view(out)
    before = files_of(out)
    assert {"rows/a.parquet", "rows/b.parquet", "rows/selected-a.parquet", "report.md",
            "view/index.html", "view/data/meta.js"} <= set(before)

    def no_rows(*a: object, **k: object) -> None:
        raise AssertionError("rows loaded for a run directory that already holds them")

    monkeypatch.setattr(finish, "load_rows", no_rows)
    again = finish.finish_run(store, spec, run, out, started=1.0)  # type: ignore[arg-type]
    assert write_view(out) == page
    assert again == first  # run.json's facts (failed samples, ...) kept with the files
    assert files_of(out) == before  # same bytes, same inodes: not one file written again


def test_a_deleted_or_edited_output_is_written_again(tmp_path: Path) -> None:
    store, spec, run = finished(tmp_path)
    out = tmp_path / "out"
    finish.finish_run(store, spec, run, out, started=1.0)  # type: ignore[arg-type]
    write_view(out)
    before = files_of(out)
    (out / "rows" / "a.parquet").unlink()
    (out / "report.md").write_text("edited\n")
    chunk = out / "view" / "data" / "s0-rows-0.js"
    chunk.write_bytes(chunk.read_bytes()[:-3] + b"xx;")  # same size, other bytes
    (out / "view" / "data" / "stale.js").write_text("x")  # a stray file: the page is rebuilt
    finish.finish_run(store, spec, run, out, started=1.0)  # type: ignore[arg-type]
    write_view(out)
    after = files_of(out)
    assert {k: v[1] for k, v in after.items()} == {k: v[1] for k, v in before.items()}
    assert after["rows/b.parquet"][0] == before["rows/b.parquet"][0]  # untouched: not rewritten
    assert after["report.json"][0] == before["report.json"][0]


def test_changed_results_in_the_same_directory_are_written(tmp_path: Path) -> None:
    store, spec, run = finished(tmp_path)
    out = tmp_path / "out"
    finish.finish_run(store, spec, run, out, started=1.0)  # type: ignore[arg-type]
    write_view(out)
    before = files_of(out)
    # fewer rows of a: its rows, the report and the page change; b's rows do not
    store, spec2, run2 = finished(tmp_path, SPEC.replace("stop: 10", "stop: 7"))
    info = finish.finish_run(store, spec2, run2, out, started=1.0)  # type: ignore[arg-type]
    write_view(out)
    fresh = tmp_path / "fresh"  # the same results written into an empty folder
    assert finish.finish_run(store, spec2, run2, fresh, started=1.0) == info  # type: ignore[arg-type]
    write_view(fresh)
    after, want = files_of(out), files_of(fresh)
    assert {k: v[1] for k, v in after.items()} == {k: v[1] for k, v in want.items()}
    assert after["rows/a.parquet"][1] != before["rows/a.parquet"][1]
    assert after["view/data/meta.js"][1] != before["view/data/meta.js"][1]
    assert after["rows/b.parquet"][0] == before["rows/b.parquet"][0]
    assert json.loads((out / "run.json").read_text())["spec_checksum"] == run2.spec_checksum
