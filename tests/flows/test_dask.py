"""runner: dask grades shards on a LocalCluster (prefect-dask) and matches the local runner."""

from __future__ import annotations

from pathlib import Path

import pytest

SPEC = """
name: dasktest
sources:
  - name: base
    kind: humaneval
    policy: {k: 2, seed: 3, skill: 0.5}
    verifier: {kind: code_exec, params: {timeout: 3}}
    steps: [{op: slice, start: 30, stop: 38}]
measure:
  pass_at: {k: 2}
execution: {runner: dask, workers: 2, shard_rows: 4}
"""


@pytest.mark.slow
def test_dask_local_cluster_matches_local_runner(prefect_server: str, tmp_path: Path) -> None:
    from assay import stages
    from assay.flows.study import run_spec
    from assay.rows import Rows
    from assay.spec import load_spec
    from assay.store import Store

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    res = run_spec(str(spec), str(tmp_path / "out"), str(tmp_path / "store"), embedded=False,
                   publish=False)
    grades = [x for x in res["computed"] if x.startswith("grade[")]
    assert len(grades) == 4, res["computed"]  # 16 rows in shards of 4, graded on the cluster
    local = stages.run_study(load_spec(spec), Store(tmp_path / "local"), progress=None)
    got = list(Rows.read_parquet(tmp_path / "out" / "rows" / "base.parquet"))
    want = list(stages.concat_rows(Store(tmp_path / "local"), local.graded["base"]))
    for r in got + want:  # the sandbox records each candidate's wall time: not a result
        r["judge_meta"].pop("seconds", None)
    assert got == want and len(got) == 16
    files = stages.report_files(Store(tmp_path / "local"), local.report)
    assert (tmp_path / "out" / "report.json").read_bytes() == files["report.json"]
