"""The nightly runs on the runner its spec names (issue 38): with ``runner: dask`` the night's
grading runs on a real LocalCluster, whose nanny workers are daemonic processes, and every
verifier kind works there: ``kind: function`` (forked grading workers) and ``code_exec``
(sandboxes); the graded rows equal a local run's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

PLUGIN = '''
import os

def close_enough(completion, reference):
    # records which process graded it: its parent is the process that ran the grade node
    with open(os.path.join(os.environ["CALLS_DIR"], f"{os.getppid()}-{os.getpid()}"), "a") as f:
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
execution: {{runner: {runner}, workers: 2, shard_rows: 4}}
"""


@pytest.mark.slow
def test_nightly_grades_function_and_code_exec_on_a_dask_cluster(
        prefect_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.rows import Rows
    from flows.nightly import nightly

    (tmp_path / "daskplug.py").write_text(PLUGIN)
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"{i}+1", "c": str(i + 1 + (i % 3 == 0)),
                    "gold": str(i + 1)}) + "\n" for i in range(12)))
    calls = tmp_path / "calls"
    calls.mkdir()
    # the cluster's worker processes import the plugin and find where to record calls
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), str(Path(__file__).resolve().parents[2]),
         os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("CALLS_DIR", str(calls))
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = {}
    for runner in ("dask", "local"):
        spec = tmp_path / f"{runner}.yaml"
        spec.write_text(SPEC.format(runner=runner))
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
