"""The issue 39 repros through the real ``assay run`` (Prefect's thread runner, a fresh
interpreter each run): rc 0 at the default ``--max-parallel`` and the files of a
``--max-parallel 1`` run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import race_specs

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def _run(spec: Path, out: Path, *extra: str) -> dict[str, bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(out) + "-hf"}  # the JSON folder converted cold, each run
    p = subprocess.run([str(BIN / "assay"), "run", str(spec), "--store", str(out) + "-store",
                        "--output", str(out), "--no-view", *extra], capture_output=True,
                       text=True, timeout=300, cwd=spec.parent, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return {f.name: f.read_bytes() for f in sorted(out.rglob("*"))
            if f.suffix in (".parquet", ".json", ".md") and f.name != "run.json"}


@pytest.mark.slow
def test_both_repros_under_prefects_thread_runner(prefect_server: str, tmp_path: Path) -> None:
    data = race_specs.build(tmp_path / "data")
    parts = race_specs.REPROS["two_hf_datasets"] + race_specs.REPROS["hf_dataset_and_model"]
    spec = data / "spec.yaml"
    spec.write_text(race_specs.spec_text("prefect-race", parts, data))
    want = _run(spec, tmp_path / "serial", "--max-parallel", "1")
    assert "report.json" in want and "mmlu.parquet" in want, sorted(want)
    for i in range(2):
        assert _run(spec, tmp_path / f"run{i}") == want, f"run {i + 1}"
