"""SIGKILL a real `assay run` mid-grading, rerun: it resumes from the finished shards, the
results equal an uninterrupted run, no store entry is half-written, no process is orphaned."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

BIN = Path(sys.executable).parent

SPEC = """
name: resume
sources:
  - name: base
    kind: humaneval
    policy: {k: 2, seed: 5, skill: 0.5}
    verifier: {kind: code_exec, params: {timeout: 3}}
    steps: [{op: slice, start: 0, stop: 16}]
measure:
  pass_at: {k: 2}
execution: {shard_rows: 8}
"""


def _store_is_sound(root: Path) -> int:
    """Every blob's bytes match its name; every ref names a present blob. Returns #blobs."""
    import json

    n = 0
    for p in (root / "blobs").rglob("*"):
        if p.is_file() and not p.name.endswith(".tmp"):
            assert hashlib.sha256(p.read_bytes()).hexdigest() == p.stem, f"half-written blob {p}"
            n += 1
    for p in (root / "refs").rglob("*.json"):
        doc = json.loads(p.read_bytes())
        kind, hexd = doc["blob"].split(":")
        assert (root / "blobs" / hexd[:2] / f"{hexd}.json").is_file(), f"dangling ref {p}"
    return n


def _stored(line: str, shard: int) -> bool:
    """The progress line printed after grading shard ``shard`` was stored (not 'running')."""
    return line.startswith(f"[grade] base shard {shard}/4:") and " rows in " in line


@pytest.mark.slow
def test_sigkill_mid_grading_then_resume(prefect_server: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    store, out = tmp_path / "store", tmp_path / "out"
    # The killed run uses the embedded server (no PREFECT_API_URL), to check it dies with us.
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    cmd = [str(BIN / "assay"), "run", str(spec), "--output", str(out), "--store", str(store),
           "--prefect-home", str(tmp_path / "ph")]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen, family = [], []
    try:
        deadline = time.monotonic() + 200
        for line in proc.stderr:  # kill as soon as two of the four shards are stored
            seen.append(line)
            try:
                family = [proc.pid] + [
                    c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
            if _stored(line, 2) or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert any(_stored(x, 2) for x in seen), "".join(seen)
    assert not (out / "report.md").exists()
    # Nothing it started survives it (the embedded server dies with its parent).
    time.sleep(0.5)
    deadline = time.monotonic() + 15
    alive = [p for p in family if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive
                 if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert not alive, [psutil.Process(p).cmdline() for p in alive]
    assert _store_is_sound(store) > 0

    # Resume (against the shared server this time).
    res = subprocess.run(cmd, env={**os.environ, "PREFECT_API_URL": prefect_server}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "[grade] base shard 1/4: cached" in res.stderr
    assert "[grade] base shard 2/4: cached" in res.stderr
    assert "[grade] base shard 4/4: cached" not in res.stderr
    _store_is_sound(store)

    # Identical to an uninterrupted run in a fresh store (no Prefect needed for the reference).
    from assay import stages
    from assay.spec import load_spec
    from assay.store import Store

    ref_store = Store(tmp_path / "fresh")
    ref = stages.run_study(load_spec(spec), ref_store, progress=None)
    files = stages.report_files(ref_store, ref.report)
    assert (out / "report.json").read_bytes() == files["report.json"]
    assert (out / "report.md").read_bytes() == files["report.md"]
    import assay

    got = list(assay.Rows.read_parquet(out / "rows" / "base.parquet"))
    want = list(stages.concat_rows(ref_store, ref.graded["base"]))
    for r in got + want:  # the sandbox records each candidate's wall time: not a result
        r["judge_meta"].pop("seconds", None)
    assert got == want
