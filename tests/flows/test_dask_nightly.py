"""The nightly runs on the runner its spec names (issue 38): with ``runner: dask`` the night's
grading runs on a real LocalCluster, whose nanny workers are daemonic processes, and every
verifier kind works there: ``kind: function`` (forked grading workers) and ``code_exec``
(sandboxes); the graded rows equal a local run's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PLUGIN = '''
import os

# in the module, not the environment: a warm grading worker forked before the test set a
# variable would not see it
CALLS_DIR = {calls!r}

def close_enough(completion, reference):
    # records which process graded it: its parent is the process that ran the grade node
    with open(os.path.join(CALLS_DIR, f"{{os.getppid()}}-{{os.getpid()}}"), "a") as f:
        f.write("x")
    return float(completion.strip() == reference.strip())
'''

SPEC = """
name: dasknight
sources:
  - name: fn
    kind: file
    path: d.jsonl
    fields: {{prompt: q, completion: c, reference: gold, task_id: id}}
    verifier: {{kind: function, function: "daskplug:close_enough"}}
  - name: code
    kind: humaneval
    policy: {{k: 2, seed: 3, skill: 0.5}}
    verifier: {{kind: code_exec, params: {{timeout: 3}}}}
    steps: [{{op: slice, start: 30, stop: 34}}]
execution: {{runner: {runner}, workers: 2, shard_rows: 4{address}}}
"""


@pytest.mark.slow
def test_nightly_grades_function_and_code_exec_on_a_dask_cluster(
        prefect_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.flows.nightly import nightly
    from assay.rows import Rows

    calls = tmp_path / "calls"
    (tmp_path / "daskplug.py").write_text(PLUGIN.format(calls=str(calls)))
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"{i}+1", "c": str(i + 1 + (i % 3 == 0)),
                    "gold": str(i + 1)}) + "\n" for i in range(12)))
    calls.mkdir()
    # the cluster's worker processes import the plugin
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), str(Path(__file__).resolve().parents[2]),
         os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = {}
    for runner in ("dask", "local"):
        spec = tmp_path / f"{runner}.yaml"
        spec.write_text(SPEC.format(runner=runner, address=""))
        summary = nightly(specs=[str(spec)], root=str(tmp_path / runner), night="2026-12-01",
                          store_root=str(tmp_path / f"store-{runner}"))
        assert summary["regressions"] == [] and summary["partial"] == []
        out = Path(summary["studies"]["dasknight"]["output"])
        info = json.loads((out / "run.json").read_text())
        assert sum(s.startswith("grade[") for s in info["computed"]) >= 4, info["computed"]
        rows[runner] = {name: list(Rows.read_parquet(out / "rows" / f"{name}.parquet"))
                        for name in ("fn", "code")}
        parents = {int(p.name.split("-")[0]) for p in calls.iterdir()}
        if runner == "dask":  # graded under the cluster's worker processes, not here
            assert parents and os.getpid() not in parents, parents
            for p in calls.iterdir():
                p.unlink()
    for r in rows["dask"]["code"] + rows["local"]["code"]:
        r["judge_meta"].pop("seconds", None)  # a sandbox's wall time is not a result
    assert rows["dask"] == rows["local"]
    assert [r["reward"] for r in rows["dask"]["fn"]] == [
        float(i % 3 != 0) for i in range(12)]


@pytest.mark.slow
def test_function_verifier_on_dask_worker_processes(
        prefect_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on a cluster an operator starts: `dask scheduler` and `dask worker` (nanny
    workers, daemonic), reached by ``execution.address``."""
    from assay.flows.nightly import nightly

    calls = tmp_path / "calls"
    (tmp_path / "daskplug.py").write_text(PLUGIN.format(calls=str(calls)))
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"{i}+1", "c": str(i + 1), "gold": str(i + 1)}) + "\n"
        for i in range(8)))
    calls.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), str(Path(__file__).resolve().parents[2])])}
    bin_ = Path(sys.executable).parent
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([str(bin_ / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                               "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)]
    try:
        end = time.monotonic() + 60
        while not (sched_file.is_file() and sched_file.read_text().strip()):
            assert time.monotonic() < end, "the scheduler did not start"
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        procs.append(subprocess.Popen(
            [str(bin_ / "dask"), "worker", address, "--nworkers", "2", "--nthreads", "1",
             "--no-dashboard"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))
        monkeypatch.syspath_prepend(str(tmp_path))
        spec = tmp_path / "ext.yaml"
        spec.write_text(SPEC.format(runner="dask", address=f", address: '{address}'"))
        summary = nightly(specs=[str(spec)], root=str(tmp_path / "n"), night="2026-12-01",
                          store_root=str(tmp_path / "store"))
        assert summary["regressions"] == [] and summary["partial"] == []
        out = Path(summary["studies"]["dasknight"]["output"])
        from assay.rows import Rows

        rows = list(Rows.read_parquet(out / "rows" / "fn.parquet"))
        assert [r["reward"] for r in rows] == [1.0] * 8
        parents = {int(p.name.split("-")[0]) for p in calls.iterdir()}
        assert parents and os.getpid() not in parents, parents
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
