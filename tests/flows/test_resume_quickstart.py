"""SIGKILL a (sliced) quickstart run part-way through its graph, resume it: only the nodes that
had not finished are computed, and report.json, report.md and the rows are byte-identical to an
uninterrupted chain run in a fresh store (no wall-clock time in results)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def _sliced_quickstart(tmp: Path) -> Path:
    doc = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    for s in doc["sources"]:
        s["steps"] = [{"op": "slice", "start": 0, "stop": 24}]
    doc["decontaminate"]["corpus"] = [str(ROOT / "configs" / "data" / "quickstart_corpus.jsonl")]
    doc["reward"]["data"]["dimensions"] = ["verbosity", "correctness"]
    doc["execution"]["shard_rows"] = 32
    doc.pop("output")
    spec = tmp / "quickstart.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    return spec


@pytest.mark.slow
def test_sigkilled_quickstart_resumes_to_identical_results(tmp_path: Path) -> None:
    spec = _sliced_quickstart(tmp_path)
    store, out = tmp_path / "store", tmp_path / "out"
    cmd = [str(BIN / "assay"), "run", str(spec), "--output", str(out), "--store", str(store),
           "--prefect-home", str(tmp_path / "ph")]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 300
        for line in proc.stderr:  # kill once the first shard of the second arm is stored
            seen.append(line)
            if (line.startswith("[grade] tuned shard 1/") and " rows in " in line) \
                    or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert any(x.startswith("[grade] tuned shard 1/") for x in seen), "".join(seen)
    assert not (out / "report.md").exists()
    # a node's "N rows in" / "done in" line is printed after its result is committed
    finished = {f"{m[1]}[{m[2]}]" for x in seen
                if (m := re.match(r"\[(\S+)\] (.+): (\d+ rows in|done in) ", x))}
    assert "grade[tuned shard 1/3]" in finished

    res = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr
    info = json.loads((out / "run.json").read_text())
    assert finished <= set(info["cached"]), finished - set(info["cached"])
    assert not finished & set(info["computed"])
    assert info["computed"], "the killed run cannot have finished every node"

    from assay import stages
    from assay.spec import load_spec
    from assay.store import Store

    ref_store = Store(tmp_path / "fresh")
    ref = stages.run_study(load_spec(spec), ref_store, progress=None, mode="chain")
    files = stages.report_files(ref_store, ref.report)
    assert (out / "report.json").read_bytes() == files["report.json"]
    assert (out / "report.md").read_bytes() == files["report.md"]
    assert b"reward-model audit" in files["report.json"]  # the block that carried a timing
    import assay

    for name in ("base", "tuned"):
        got = assay.Rows.read_parquet(out / "rows" / f"{name}.parquet")
        want = stages.concat_rows(ref_store, ref.graded[name])
        assert got.to_arrow().equals(want.to_arrow()), name
