"""The study's nodes (assay/stages/plan.py): which ready node takes a free place under
max_parallel. Proven with events, never with timings."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from assay import stages
from assay.progress import UnitState, listen
from assay.spec import load_spec
from assay.store import Store

BOUND = 60  # seconds a held generation waits before it fails the run (a bound, not a margin)

GENERATED = """
  - name: a
    kind: file
    path: a.jsonl
    fields: {prompt: q, reference: gold, task_id: id}
    generate:
      model: {kind: function, callable: "MODULE:answer"}
      k: 1
      api: completions
    verifier: {kind: exact_match}
"""

GIVEN = """
  - name: b
    kind: file
    path: b.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier: {kind: exact_match}
"""

HELD = '''
import threading

graded = threading.Event()  # set by the test when a grade shard starts


def answer(prompts):
    out = []
    for p in prompts:
        # a "fast" prompt's shard answers at once; every other waits until some shard is graded
        if "fast" not in p and not graded.wait({bound}):
            raise RuntimeError("no grade shard started while generate shards waited")
        out.append(p.split()[-1])
    return out
'''


@pytest.mark.parametrize("case", ["generated", "given"])
def test_rows_that_exist_are_graded_before_more_generate_shards_start(tmp_path: Path,
                                                                     case: str) -> None:
    # Generate shards beyond what the server serves at once only wait on its connections, yet
    # each holds one of max_parallel's places. Ranked in the chain's order (every generate shard
    # of a source before its grades, and before a later source's rows and grades), a free place
    # went to the next generate shard, and grading waited for the last of them to start. Here
    # every generate shard waits for a grade: "generated" (2 places), the first shard answers
    # at once and its grade must come before shards 2..5; "given" (1 place), no shard answers
    # until the second source's completions (given in its file) are built, filtered and graded.
    # Otherwise every place ends up held by a waiting shard and the run fails after BOUND (both
    # did before the fix).
    fast = "fast" if case == "generated" else "held"
    rows = [{"id": "t0", "q": f"{fast}: say 0", "gold": "0"}] + [
        {"id": f"t{i}", "q": f"held: say {i}", "gold": str(i)} for i in range(1, 5)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({**r, "c": r["gold"]}) + "\n"
                                              for r in rows))
    # a module of its own per case: a module or backend cached by an earlier case (its event
    # already set) would let this one pass whatever the order
    module = f"g_held_{case}"
    (tmp_path / f"{module}.py").write_text(HELD.format(bound=BOUND))
    sources = GENERATED.replace("MODULE", module) + (GIVEN if case == "given" else "")
    (tmp_path / "spec.yaml").write_text(
        f"name: priority\nsources:{sources}"
        f"execution: {{shard_rows: 1, max_parallel: {2 if case == 'generated' else 1}, "
        "workers: 1}\n")
    sys.path.insert(0, str(tmp_path))
    held = importlib.import_module(module)  # the module the function backend loads: its Event

    def on_state(state: UnitState) -> None:
        if state.stage == "grade":
            held.graded.set()

    unlisten = listen(on_state)
    store = Store(tmp_path / "store")
    try:
        run = stages.run_study(load_spec(tmp_path / "spec.yaml"), store, progress=None)
    finally:
        unlisten()
        sys.path.remove(str(tmp_path))
        sys.modules.pop(module, None)
    grades = [r for r in run.results if r.stage == "grade"]
    n_sources = 1 if case == "generated" else 2
    assert sum(r.summary["rows"] for r in grades) == 5 * n_sources
    report = json.loads(stages.report_files(store, run.report)["report.json"])
    for src in report["sources"]:
        assert (src["rows"], src["tasks"]) == (5, 5), src["name"]
    assert report["sources"][0]["generation"]["errors"] == 0
