"""The study flow against a real Prefect server: full caching, downstream-only recompute, outputs.

Kill-and-resume with a real subprocess lives in test_flow_resume.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import assay
from assay.store import Store

SPEC = """
name: flowtest
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier: {kind: exact_match}
    steps: [{op: slice, start: 0, stop: 10}]
  - name: b
    kind: file
    path: b.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
measure:
  pass_at: {k: 2}
  compare: [{before: a, after: b}]
  select: {source: a}
execution: {shard_rows: 8}
"""


def write_study(tmp: Path, spec: str = SPEC) -> Path:
    with open(tmp / "a.jsonl", "w") as f, open(tmp / "b.jsonl", "w") as g:
        for i in range(12):
            for j in range(3):
                gold = str(i * 7)
                c = gold if (i + j) % 3 else str(i * 7 + 1)
                f.write(json.dumps({"id": f"t{i}", "q": f"What is 7 * {i}?", "c": c, "gold": gold})
                        + "\n")
                g.write(json.dumps({"id": f"t{i}", "q": f"What is 7 * {i}?", "c": c,
                                    "r": int((i * j) % 4 != 1)}) + "\n")
    p = tmp / "spec.yaml"
    p.write_text(spec)
    return p


def run(spec: Path, out: Path, store: Path) -> dict:
    from assay.flows.study import run_spec

    return run_spec(str(spec), str(out), str(store), embedded=True)


def test_rerun_is_fully_cached_and_outputs_are_complete(prefect_server: str, tmp_path: Path,
                                                        capfd: pytest.CaptureFixture[str]) -> None:
    spec = write_study(tmp_path)
    first = run(spec, tmp_path / "run1", tmp_path / "store")
    err = capfd.readouterr().err
    assert first["cached"] == [] and "grade[a shard 1/4]" in first["computed"]
    assert "[grade] a shard 1/4:" in err and "rows/s" in err  # progress: stage, shard, rows/s
    second = run(spec, tmp_path / "run2", tmp_path / "store")
    err = capfd.readouterr().err
    assert second["computed"] == [], second["computed"]
    assert sorted(second["cached"]) == sorted(first["computed"])
    assert "computed (0): -" in err and "[measure] a,b: cached" in err
    for f in ("report.md", "report.json", "rows/a.parquet", "rows/b.parquet", "pass_rates.png",
              "rows/selected-a.parquet"):
        assert (tmp_path / "run1" / f).read_bytes() == (tmp_path / "run2" / f).read_bytes(), f
    # The RL training export carries only what a trainer may see; the graded rows keep the rest.
    import pyarrow.parquet as pq

    export = pq.read_table(tmp_path / "run1" / "rows" / "selected-a.parquet")
    assert export.column_names == ["task_id", "prompt", "messages", "final_text", "reward",
                                   "markers", "rollout_index"]
    full = pq.read_table(tmp_path / "run1" / "rows" / "selected-a.graded.parquet")
    assert "privileged" in full.column_names and full.num_rows == export.num_rows > 0
    assert "reference" not in export.to_pandas().to_string()
    # The rows written are the graded rows, and grading matches a direct call.
    graded = assay.Rows.read_parquet(tmp_path / "run1" / "rows" / "a.parquet")
    from assay.verify import ExactMatch

    direct = assay.grade(graded, ExactMatch())
    assert [r["reward"] for r in graded] == [r["reward"] for r in direct]
    assert len({r["task_id"] for r in graded}) == 10  # the slice kept 10 tasks
    md = (tmp_path / "run1" / "report.md").read_text()
    assert "pass_at[a]" in md and "compare[a -> b]" in md and "![pass@1 per source]" in md
    doc = json.loads((tmp_path / "run1" / "report.json").read_text())
    assert all(e["n"] > 0 for m in doc["measurements"] for e in m["estimates"])
    # Published as Prefect artifacts: the Markdown report and a table of every estimate.
    from prefect.artifacts import Artifact

    art = Artifact.get("flowtest-report")
    assert art is not None and art.type == "markdown" and art.data == md
    table = Artifact.get("flowtest-estimates")
    assert table is not None and table.type == "table" and "pass@1" in str(table.data)


def test_changing_one_filter_recomputes_only_downstream(prefect_server: str,
                                                        tmp_path: Path) -> None:
    spec = write_study(tmp_path)
    run(spec, tmp_path / "run1", tmp_path / "store")
    spec.write_text(SPEC.replace("stop: 10", "stop: 11"))
    res = run(spec, tmp_path / "run2", tmp_path / "store")
    computed, cached = set(res["computed"]), set(res["cached"])
    assert {"build-rows[a]", "build-rows[b]", "filter-rows[b]"} <= cached
    assert {"filter-rows[a]", "measure[a,b]", "report[flowtest]"} <= computed
    # Shards whose rows did not change are reused; only the shard holding the new task re-grades.
    graded = sorted(x for x in computed if x.startswith("grade["))
    assert graded == ["grade[a shard 4/4]"], graded
    assert {"grade[a shard 1/4]", "grade[a shard 2/4]", "grade[a shard 3/4]"} <= cached


def test_no_prefect_needed_for_the_chain(tmp_path: Path) -> None:
    """The same stages run without Prefect and give the same report bytes as the flow."""
    from assay import stages
    from assay.spec import load_spec

    spec = load_spec(write_study(tmp_path))
    a = stages.run_study(spec, Store(tmp_path / "s1"), progress=None)
    b = stages.run_study(spec, Store(tmp_path / "s2"), progress=None)
    assert stages.report_files(Store(tmp_path / "s1"), a.report) == \
        stages.report_files(Store(tmp_path / "s2"), b.report)
    assert not a.cached_stages and len(b.computed_stages) == len(a.computed_stages)


def test_corrupt_entry_is_recomputed_not_read(tmp_path: Path) -> None:
    from assay import stages
    from assay.spec import load_spec

    spec = load_spec(write_study(tmp_path))
    store = Store(tmp_path / "s")
    first = stages.run_study(spec, store, progress=None)
    shard = next(r for r in first.results if r.stage == "grade")
    path = store._blob_path(shard.outputs["rows"])
    path.write_bytes(path.read_bytes()[:100])  # truncate: as if a write had been cut short
    with pytest.warns(UserWarning, match="corrupt"):
        again = stages.run_study(spec, store, progress=None)
    assert again.computed_stages == [f"grade[{shard.label}]"]
    assert stages.report_files(store, again.report) == stages.report_files(store, first.report)


def test_gpu_slot_is_strict_and_only_on_cuda(prefect_server: str) -> None:
    """Scoring on CUDA holds one slot of the `gpu` limit (created if missing); CPU takes none."""
    import contextlib

    from prefect.client.orchestration import get_client

    from assay.tasks.stages import gpu_slot

    assert isinstance(gpu_slot("cpu"), contextlib.nullcontext)
    with gpu_slot("cuda:0"):
        with get_client(sync_client=True) as c:
            lim = c.read_global_concurrency_limit_by_name("gpu")
        assert lim.limit == 1 and lim.active_slots == 1
    with get_client(sync_client=True) as c:
        assert c.read_global_concurrency_limit_by_name("gpu").active_slots == 0


def test_reward_stage_scores_inside_the_device_slot(tmp_path: Path) -> None:
    """run_reward_audit holds ``device_slot(device)`` while the model scores; the Prefect task
    passes assay.tasks.stages.gpu_slot (strict on CUDA, a no-op on CPU)."""
    import contextlib

    from assay import stages
    from assay.spec import load_spec
    from assay.tasks.stages import TASKS, gpu_slot, stage_body

    (tmp_path / "spec.yaml").write_text(
        "name: slot\nreward:\n  models:\n    - {name: len, kind: function, "
        "function: 'assay.reward.function:length_rewards'}\n  data: {dataset: diagnostic_v3, "
        "dimensions: [verbosity]}\n")
    spec = load_spec(tmp_path / "spec.yaml")
    seen = []

    @contextlib.contextmanager
    def slot(device: str):
        seen.append(device)
        yield

    ctx = stages.RunContext(Store(tmp_path / "store"), spec, device_slot=slot)
    res = stages.run_reward_audit(ctx, "len")
    assert seen == ["cpu"] and res.stage == "score-reward-model"
    # the audit's and row scoring's tasks pass the gpu slot: the flow submits a node's call
    # to its stage's task, whose body runs the stage function with ctx.device_slot = gpu_slot
    given: list = []
    for name in ("score-reward-model", "score-rows"):
        stage = stages.STAGES[name]
        assert TASKS[name].name == name and stage.device
        given.clear()
        body = stage_body(replace(stage, fn=lambda c, *a: given.append(c.device_slot)))
        body(stages.RunContext(Store(tmp_path / "store"), spec), ())
        assert given == [gpu_slot], name
