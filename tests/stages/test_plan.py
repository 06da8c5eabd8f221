"""The study's nodes (assay/stages/plan.py): which ready node takes a free place under
max_parallel. Proven with events, never with timings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from assay import stages
from assay.progress import UnitState, listen
from assay.spec import load_spec
from assay.store import Store

BOUND = 60  # seconds a held generation waits before it fails the run (a bound, not a margin)

SPEC = """
name: priority
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {prompt: q, reference: gold, task_id: id}
    generate:
      model: {kind: function, callable: "g_held:answer"}
      k: 1
      api: completions
    verifier: {kind: exact_match}
execution: {shard_rows: 1, max_parallel: 2, workers: 1}
"""

HELD = '''

graded = threading.Event()  # set by the test when a grade shard starts


def answer(prompts):
    out = []
    for p in prompts:
        # the first prompt's shard answers at once; every other waits until some shard is graded
        if "fast" not in p and not graded.wait({bound}):
            raise RuntimeError("no grade shard started while generate shards waited")
        out.append(p.split()[-1])
    return out
'''


def test_a_generated_shard_is_graded_before_more_generate_shards_start(tmp_path: Path) -> None:
    # Generate shards beyond what the server serves at once only wait on its connections, yet
    # each holds one of max_parallel's places. Ranked in the chain's order (every generate shard
    # of a source before its first grade), a finished shard's place went to the next generate
    # shard, and grading waited for the last of them to start: here both places end up held by
    # shards that wait for a grade, and the run fails after BOUND (it did before the fix).
    rows = [{"id": "t0", "q": "fast: say 0", "gold": "0"}] + [
        {"id": f"t{i}", "q": f"held: say {i}", "gold": str(i)} for i in range(1, 5)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "g_held.py").write_text(HELD.format(bound=BOUND))
    (tmp_path / "spec.yaml").write_text(SPEC)
    sys.path.insert(0, str(tmp_path))
    import g_held  # the module the function backend loads: the same Event

    def on_state(state: UnitState) -> None:
        if state.stage == "grade":
            g_held.graded.set()

    unlisten = listen(on_state)
    try:
        run = stages.run_study(load_spec(tmp_path / "spec.yaml"), Store(tmp_path / "store"),
                               progress=None)
    finally:
        unlisten()
        sys.path.remove(str(tmp_path))
        sys.modules.pop("g_held", None)
    grades = [r for r in run.results if r.stage == "grade"]
    assert len(grades) == 5
    assert sum(r.summary["rows"] for r in grades) == 5
    measured = json.loads(stages.report_files(Store(tmp_path / "store"), run.report)
                          ["report.json"])
    (src,) = measured["sources"]
    assert (src["rows"], src["tasks"], src["generation"]["errors"]) == (5, 5, 0)
