"""Store upkeep: gc keeps exactly what the kept nights reference, verify finds and quarantines a
corrupt blob (the next run recomputes it), du adds up, and gc never runs beside a study."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from assay import stages, upkeep
from assay.cli import main
from assay.errors import StoreError
from assay.spec import load_spec
from assay.store import Store

SPEC = """
name: s
sources:
  - name: model
    kind: file
    path: model.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
  - name: fixed
    kind: file
    path: fixed.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
measure:
  pass_at: {k: 2}
"""


def _write(p: Path, night: int) -> None:
    with open(p, "w") as f:
        for i in range(24):
            for j in range(3):
                f.write(json.dumps({"id": f"t{i}", "q": f"q{i}", "c": f"n{night} a{j}",
                                    "r": int((i * 7 + j + night) % 4 != 0)}) + "\n")


def run_night(tmp: Path, store: Store, night: int, root: Path) -> stages.StudyRun:
    """One night: the model's answers change, the fixed source does not; the run directory's
    run.json lists the stage keys as flows/study.py writes it."""
    _write(tmp / "model.jsonl", night)
    if not (tmp / "fixed.jsonl").exists():
        _write(tmp / "fixed.jsonl", 0)
    (tmp / "spec.yaml").write_text(SPEC)
    spec = load_spec(tmp / "spec.yaml")
    started = time.time()
    with store.in_use():
        run = stages.run_study(spec, store, progress=None, workers=1)
    out = root / "s" / f"2026-11-{night:02d}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps({
        "study": "s", "stage_keys": sorted({r.key for r in run.results}), "started": started,
        "store": str(store.root.resolve())}))
    return run


def _files(store: Store) -> dict[str, object]:
    """What a store holds: ref files (named by the stage key), the blobs that are stage outputs
    (named by content), the number of pointer documents (they record the stage's wall time,
    so their bytes differ between stores) and the total size."""
    refs = sorted(str(p.relative_to(store.root)) for p in store.ref_files())
    pointers = {json.loads(p.read_bytes())["blob"] for p in store.ref_files()}
    blobs = dict(store.blob_files())
    return {"refs": refs, "outputs": sorted(k for k in blobs if k not in pointers),
            "pointers": len(pointers & set(blobs)),
            "bytes": sum(p.stat().st_size for p in blobs.values())}


def test_gc_after_ten_nights_keeps_exactly_the_kept_nights(tmp_path: Path) -> None:
    store, root = Store(tmp_path / "store"), tmp_path / "nights"
    for n in range(1, 11):
        run_night(tmp_path, store, n, root)
    # the reference: a fresh store that only ever ran the three kept nights
    ref = Store(tmp_path / "ref")
    for n in (8, 9, 10):
        run_night(tmp_path, ref, n, tmp_path / "ref-nights")
    before, want = _files(store), _files(ref)
    assert before["bytes"] > 2 * want["bytes"]
    assert main(["store", "gc", "--store", str(store.root), "--runs", str(root),
                 "--keep-nights", "3", "--grace", "0"]) == 0
    after = _files(store)
    # the same entries: nothing of nights 1-7 is left, nothing the kept nights use is lost
    assert {k: after[k] for k in ("refs", "outputs", "pointers")} == \
        {k: want[k] for k in ("refs", "outputs", "pointers")}
    assert abs(after["bytes"] - want["bytes"]) <= 2 * want["pointers"]  # timing digits only
    # history still has every night's run directory; the latest night reruns fully cached
    assert len(list((root / "s").iterdir())) == 10
    rerun = run_night(tmp_path, store, 10, root)
    assert rerun.computed_stages == [] and _files(store) == after
    # an older night rerun recomputes only its own entries (the fixed source stays cached)
    old = run_night(tmp_path, store, 2, root)
    assert "build-rows[model]" in old.computed_stages
    assert "build-rows[fixed]" in old.cached_stages and "filter-rows[fixed]" in old.cached_stages


def test_gc_needs_stage_keys_grace_and_the_lock(tmp_path: Path) -> None:
    store, root = Store(tmp_path / "store"), tmp_path / "nights"
    run_night(tmp_path, store, 1, root)
    stray = store.put_json({"written by": "a study without the lock, just now"})
    res = upkeep.gc(store, upkeep.find_runs([root]), keep_nights=1)  # default grace 1 h
    assert res.removed_blobs == 0 and store.has(stray)
    old = time.time() - 7200
    os.utime(store._blob_path(stray), (old, old))
    tmp = store._blob_path(stray).parent / ".x.parquet.123.tmp"  # a killed writer's leftover
    tmp.write_bytes(b"half")
    os.utime(tmp, (old, old))
    res = upkeep.gc(store, upkeep.find_runs([root]), keep_nights=1)
    assert res.removed_blobs == 1 and not store.has(stray) \
        and res.removed_temp == 1 and not tmp.exists()
    # a run directory that does not say what it references stops gc
    blind = root / "s" / "2026-11-02"
    blind.mkdir()
    (blind / "run.json").write_text(json.dumps({"study": "s"}))
    with pytest.raises(StoreError,
                       match=r"1 kept run\(s\) do not list their stage keys.*2026-11-02"):
        upkeep.gc(store, upkeep.find_runs([root]), keep_nights=1)
    (blind / "run.json").unlink()
    blind.rmdir()
    # a running study (another process holding the store) blocks gc; gc blocks a study
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from assay.store import Store
        with Store({str(store.root)!r}).in_use():
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match="locked by a running study"):
            upkeep.gc(store, upkeep.find_runs([root]), keep_nights=1, wait=0.2)
    finally:
        holder.kill()
        holder.wait()
    upkeep.gc(store, upkeep.find_runs([root]), keep_nights=1, wait=5)  # the kernel freed the lock
    with store.exclusive():
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            from assay.store import Store
            with Store({str(store.root)!r}).in_use(wait=0.2):
                pass
            """)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert p.returncode != 0 and "locked by a store gc" in p.stderr


def test_verify_reports_and_quarantines_a_corrupt_blob_then_the_run_recomputes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, root = Store(tmp_path / "store"), tmp_path / "nights"
    run = run_night(tmp_path, store, 1, root)
    measured = next(r for r in run.results if r.stage == "measure")
    key = (measured.outputs["doc"] if "doc" in measured.outputs
           else next(iter(measured.outputs.values())))
    path = store._blob_path(key)
    data = path.read_bytes()
    path.write_bytes(data[:10] + bytes([data[10] ^ 0x20]) + data[11:])
    assert main(["store", "verify", "--store", str(store.root)]) == 3
    out = capsys.readouterr().out
    assert f"CORRUPT {key}  {path}" in out and "1 corrupt" in out
    assert not path.exists() \
        and (store.root / "quarantine" / path.relative_to(store.root)).is_file()
    rerun = run_night(tmp_path, store, 1, root)
    assert rerun.computed_stages == ["measure[model,fixed]"]  # that entry only
    assert not any(s.startswith(("build-rows", "filter-rows")) for s in rerun.computed_stages)
    assert store.get_bytes(key) == data  # recomputed to the same bytes
    assert main(["store", "verify", "--store", str(store.root)]) == 0
    # a torn ref is reported and moved aside too
    ref = next(store.ref_files())
    ref.write_bytes(b'{"name": "x", "bl')
    res = upkeep.verify(store)
    assert [c["path"] for c in res.corrupt] == [str(ref)] and not ref.exists()


def test_du_adds_up(tmp_path: Path) -> None:
    store, root = Store(tmp_path / "store"), tmp_path / "nights"
    for n in (1, 2):
        run_night(tmp_path, store, n, root)
    stray = store.put_bytes(b"x" * 1000)
    u = upkeep.du(store, upkeep.find_runs([root]))
    sizes = [p.stat().st_size for p in (store.root / "blobs").rglob("*") if p.is_file()]
    assert u.total_bytes == sum(sizes) and u.n_blobs == len(sizes)
    assert sum(u.by_stage.values()) + u.unreferenced_bytes == u.total_bytes
    assert u.unreferenced_bytes == 1000 and store.has(stray)
    assert set(u.by_stage) >= {"build-rows", "filter-rows", "measure", "report"}
    assert 0 < u.by_study["s"] <= u.total_bytes - 1000
