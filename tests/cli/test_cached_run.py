"""A fully cached `assay run` is served from the store without importing Prefect (no server,
no flow run, a note in run.json), with the same bytes; anything missing falls back to the flow
and the probe changes nothing in the store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assay import stages
from assay.rows import Rows
from assay.spec import load_spec
from assay.stages.plan import serve_cached
from assay.store import Store
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "flows"))

from test_study_flow import SPEC, write_study  # noqa: E402

PROBE = """
import sys
from assay.cli import main
rc = main(sys.argv[1:])
assert not any(m == "prefect" or m.startswith("prefect.") for m in sys.modules), "prefect imported"
sys.exit(rc)
"""


def test_fully_cached_run_needs_no_prefect_and_gives_the_same_bytes(tmp_path: Path) -> None:
    spec_path = write_study(tmp_path)
    store = Store(tmp_path / "store")
    ref = stages.run_study(load_spec(spec_path), store, progress=None)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-c", PROBE, "run", str(spec_path), "--store",
                        str(store.root), "--output", str(out), "--prefect-home",
                        str(tmp_path / "ph")], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert "[prefect] not started" in p.stderr and "computed (0): -" in p.stderr
    assert "[grade] a shard 1/4: cached" in p.stderr
    info = json.loads((out / "run.json").read_text())
    assert info["computed"] == [] and info["orchestration"].startswith("none: every stage")
    assert info["cached"] == ref.cached_stages + ref.computed_stages
    files = stages.report_files(store, ref.report)
    assert (out / "report.json").read_bytes() == files["report.json"]
    assert (out / "report.md").read_bytes() == files["report.md"]
    for name in ("a", "b"):
        got = Rows.read_parquet(out / "rows" / f"{name}.parquet").to_arrow()
        assert got.equals(stages.concat_rows(store, ref.graded[name]).to_arrow()), name
    assert (out / "rows" / "selected-a.parquet").is_file()
    assert not (tmp_path / "ph").exists()  # the embedded server never started


def test_anything_missing_is_not_served_and_the_probe_changes_nothing(tmp_path: Path) -> None:
    spec_path = write_study(tmp_path)
    store = Store(tmp_path / "store")
    stages.run_study(load_spec(spec_path), store, progress=None)
    changed = tmp_path / "changed.yaml"  # a new measurement: measure and report would compute
    changed.write_text(SPEC.replace("pass_at: {k: 2}", "pass_at: {k: 3}"))
    before = sorted(p.name for p in store.root.rglob("*"))
    assert serve_cached(load_spec(changed), store) is None
    assert sorted(p.name for p in store.root.rglob("*")) == before
    assert serve_cached(load_spec(spec_path), store, progress=None) is not None


def test_on_an_object_store_nodes_are_looked_up_side_by_side_and_still_compute_nothing(
        s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay import libguard
    from assay.stages import plan

    spec_path = write_study(tmp_path)
    spec = load_spec(spec_path)
    assert not libguard.spec_imports(spec)  # a spec the side-by-side path takes
    store = Store(s3.url("cached"))
    with store.in_use(write_behind=True):
        ref = stages.run_study(spec, store, progress=None)
    used: list[tuple[str, int]] = []
    real = plan.run_graph

    def spy(graph, executor, **kw):  # type: ignore[no-untyped-def]
        how = "threads in context" if getattr(executor, "in_context", False) else \
            type(executor).__name__
        used.append((how, kw["max_parallel"]))
        return real(graph, executor, **kw)

    monkeypatch.setattr(plan, "run_graph", spy)
    side = serve_cached(spec, store, progress=None)
    monkeypatch.setattr(plan, "CACHED_READERS", 1)  # one node at a time: the reference
    one = serve_cached(spec, store, progress=None)
    assert used == [("threads in context", 8), ("threads in context", 1)]
    assert side is not None and one is not None
    assert [(r.label, r.key, r.outputs) for r in side.results] == \
        [(r.label, r.key, r.outputs) for r in one.results] == \
        [(r.label, r.key, r.outputs) for r in ref.results]
    # a node on another thread still only reads: a changed measure is not computed there
    changed = tmp_path / "changed.yaml"
    changed.write_text(SPEC.replace("pass_at: {k: 2}", "pass_at: {k: 3}"))
    before = [e.rel for e in store.entries("")]
    monkeypatch.setattr(plan, "CACHED_READERS", 8)
    assert serve_cached(load_spec(changed), store, progress=None) is None
    assert [e.rel for e in store.entries("")] == before
    # a local store answers in microseconds: inline
    local = Store(tmp_path / "local")
    stages.run_study(spec, local, progress=None)
    used.clear()
    assert serve_cached(spec, local, progress=None) is not None
    assert used == [("InlineExecutor", 1)]
