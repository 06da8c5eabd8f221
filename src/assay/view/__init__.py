"""The sample viewer: ``RUN/view/index.html``, a page that opens from the file system and shows a
run's numbers (from report.json), every task with its samples, and what changed since another run.

Plain HTML, CSS and JavaScript shipped with the package (``assay/view/static``); the data are
``.js`` files loaded by ``<script>`` tags, so no server is needed; row text is only ever
inserted as text.

Example:
    >>> import tempfile, assay
    >>> from assay.report import build_report, write_run_dir
    >>> d = Path(tempfile.mkdtemp())
    >>> rows = assay.rows(["2+2?"], [["4", "5"]], [[1.0, 0.0]], task_ids=["t1"])
    >>> files = build_report({"name": "demo", "checksum": "spec:0"}, [], [], [], [])
    >>> _ = write_run_dir(d, files, {"m": rows}, {"study": "demo"})
    >>> page = write_view(d)
    >>> page.relative_to(d).as_posix(), sorted(p.name for p in (page.parent / "data").iterdir())
    ('view/index.html', ['meta.js', 's0-rows-0.js', 's0-tasks.js'])
"""

from __future__ import annotations

import json
import os
import shutil
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.view.compare import (
    MAX_SHOWN,
    baseline_dir,
    headline,
    latest_night,
    moved_tasks,
    night_doc,
)
from assay.view.data import (
    CHUNK_ROWS,
    ViewError,
    js_call,
    read_rows,
    task_docs,
    write_source,
    write_source_file,
)
from assay.written import MANIFEST, Manifest, sha256_file

if TYPE_CHECKING:
    import pyarrow as pa

    from assay.view.data import TaskDoc

__all__ = ["ViewError", "resolve_run", "write_view"]

#: Files of the page itself, copied from the package.
STATIC = ("index.html", "app.js", "app.css")

#: Rows files that are not a source's graded rows (the training export and its graded copy).
_SKIP_PREFIX = "selected-"


def resolve_run(path: str | os.PathLike[str]) -> Path:
    """The run directory ``path`` names: a finished run (has report.json), or a nightly root for
    one study (its newest finished night). ViewError naming what is missing otherwise."""
    p = Path(path)
    if p.name in ("report.md", "report.json", "index.html") and p.is_file():
        p = p.parent.parent if p.name == "index.html" else p.parent
    if (p / "report.json").is_file():
        return p
    if p.is_dir():
        night = latest_night(p)
        if night is not None:
            return night
    raise ViewError(f"{p}: not a finished run directory (no report.json) nor a nightly root "
                    "with a finished night; give the folder `assay run` or `assay nightly` wrote")


def resolve_against(run: Path, against: str | os.PathLike[str]) -> Path:
    """The run ``--against`` names: a path (a run or a nightly root), or a night date
    YYYY-MM-DD: that night of the same study (a sibling of the night ``run``)."""
    import datetime as dt

    text = str(against)
    if not Path(text).exists():
        try:
            dt.date.fromisoformat(text)
        except ValueError:
            pass
        else:
            night = run.parent / text
            if (night / "report.json").is_file():
                return night
            nights = sorted(p.name for p in run.parent.iterdir()
                            if p.is_dir() and (p / "report.json").is_file() and p != run)
            raise ViewError(f"--against {text}: no finished night {text} beside {run.name} in "
                            f"{run.parent}; nights there: {nights or 'none'}")
    return resolve_run(against)


def _source_files(run: Path) -> list[Path]:
    rows_dir = run / "rows"
    if not rows_dir.is_dir():
        return []
    return [p for p in sorted(rows_dir.glob("*.parquet")) if not p.stem.startswith(_SKIP_PREFIX)]


def _source_tables(run: Path) -> list[tuple[str, pa.Table]]:
    return [(p.stem, read_rows(p)) for p in _source_files(run)]


def _report(run: Path) -> dict[str, Any]:
    return json.loads((run / "report.json").read_text(encoding="utf-8"))


def write_view(run_dir: str | os.PathLike[str], against: str | os.PathLike[str] | None = None,
               *, chunk_rows: int = CHUNK_ROWS) -> Path:
    """Write ``RUN/view/`` (index.html, assets, data, plots) and return the index.html path.

    ``against``: another run (or nightly root) to compare with; for a night with a baseline
    the baseline is the default. The folder is replaced whole, so no stale chunk survives;
    when it already holds the page of exactly these inputs (its ``.written.json`` lists every
    file with its sha256), nothing is written.
    """
    run = resolve_run(run_dir)
    report = _report(run)
    other = resolve_against(run, against) if against is not None else baseline_dir(run)
    out = run / "view"
    # nothing here depends on where the run lies or when it ran (the page of identical results
    # is identical); the page names a plain run by its folder, read from its own address
    nightly = night_doc(run)
    identity = _page_identity(run, other, nightly, chunk_rows)
    if _page_kept(out, identity):  # the page of exactly these inputs is there, every file intact
        return out / "index.html"
    tmp = run / ".view.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "data").mkdir(parents=True)
    (tmp / "plots").mkdir()
    static = resources.files("assay.view") / "static"
    for name in STATIC:
        (tmp / name).write_bytes((static / name).read_bytes())
    plots = []
    for name in report.get("plots", []):
        src = run / str(name)
        if src.is_file() and "/" not in str(name):
            shutil.copyfile(src, tmp / "plots" / src.name)
            plots.append(src.name)
    from assay.view.data import categories_by

    sources: list[dict[str, object]] = []
    docs: dict[str, tuple[int, list[TaskDoc], str | None]] = {}
    for i, path in enumerate(_source_files(run)):
        name, by = path.stem, categories_by(report, path.stem)
        if other is None:  # one chunk of rows in memory at a time
            sources.append(write_source_file(tmp / "data", i, name, path, by, chunk_rows))
            continue
        # the comparison reads both runs' tasks whole (moved_tasks ranks every task)
        table = read_rows(path)
        tasks = task_docs(table, by)
        sources.append(write_source(tmp / "data", i, name, table, by, chunk_rows, tasks))
        docs[name] = (i, tasks, by)
        del table
    meta: dict[str, object] = {"run": nightly["night"] if nightly else None, "report": report,
                            "plots": plots, "sources": sources, "against": None,
                            "nightly": nightly}
    if other is not None:
        meta["against"] = _write_diff(tmp / "data", run, other, docs)
    (tmp / "data" / "meta.js").write_text(js_call("meta", meta), encoding="ascii")
    written = Manifest(tmp, {})
    for f in _page_files(tmp):
        written.files[f] = {"identity": identity, "sha256": sha256_file(tmp / f)}
    written.save(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out / "index.html"


def _page_identity(run: Path, other: Path | None, nightly: object, chunk_rows: int) -> str:
    """What the page is made from, as one sha256: this code and its static files, the run's
    report.json, plots and rows files (and the compared run's), the nightly section. Reading
    them costs a hash of each file, not a rebuild."""
    import hashlib

    from assay.hashing import code_checksum

    def run_files(r: Path) -> dict[str, str | None]:
        names = ["report.json", *(str(n) for n in _report(r).get("plots", []) if "/" not in
                                  str(n))]
        rows = r / "rows"
        if rows.is_dir():
            names += [f"rows/{p.name}" for p in sorted(rows.glob("*.parquet"))
                      if not p.stem.startswith(_SKIP_PREFIX)]
        return {n: sha256_file(r / n) for n in names}

    static = resources.files("assay.view") / "static"
    doc = {"version": 1, "code": [code_checksum(m) for m in (
               "assay.view", "assay.view.data", "assay.view.compare")],
           "static": [hashlib.sha256((static / n).read_bytes()).hexdigest() for n in STATIC],
           "chunk_rows": chunk_rows, "run": run_files(run), "nightly": nightly,
           "against": None if other is None else [other.name, run_files(other)]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _page_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name != MANIFEST)


def _page_kept(out: Path, identity: str) -> bool:
    """Whether ``out`` holds the page of ``identity``: exactly the files its manifest lists
    (no stale chunk beside them), each made from that identity and still those bytes."""
    written = Manifest.load(out)
    if not written.files or sorted(written.files) != _page_files(out):
        return False
    return all(e.get("identity") == identity and sha256_file(out / f) == e.get("sha256")
               for f, e in written.files.items())


def _write_diff(data: Path, run: Path, other: Path,
                docs: dict[str, tuple[int, list[TaskDoc], str | None]]) -> dict[str, object]:
    """``d<i>.js`` per source both runs have: the moved tasks with both runs' rows."""
    other_tables = dict(_source_tables(other))
    shown_sources: list[dict[str, object]] = []
    entry: dict[str, object] = {"run": other.name,
                                "headline": headline(_report(other)), "sources": shown_sources}
    for name, (i, after, by) in docs.items():
        if name not in other_tables:
            continue
        before = task_docs(other_tables[name], by)
        moved = moved_tasks(before, after)
        shown = {m["id"] for m in moved[:MAX_SHOWN]}
        b = {t["id"]: t for t in before if t["id"] in shown}
        a = {t["id"]: t for t in after if t["id"] in shown}
        fname = f"d{i}.js"
        pairs = {tid: {"messages": a[tid]["messages"], "before": b[tid]["rows"],
                       "after": a[tid]["rows"]} for tid in sorted(shown)}
        (data / fname).write_text(js_call(f"diff:{i}", {"moved": moved, "tasks": pairs}),
                                  encoding="ascii")
        common = len({t["id"] for t in before} & {t["id"] for t in after})
        shown_sources.append({"name": name, "index": i, "file": fname, "n_moved": len(moved),
                              "n_common": common, "shown": len(shown),
                              "flips": {f: sum(m["flip"] == f for m in moved)
                                        for f in ("pass->fail", "fail->pass")}})
    return entry
