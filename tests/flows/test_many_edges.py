"""A node reading every shard of a big study (measure over 15,625 grading shards at 4M rows)
failed its task run: each upstream task run was a task input in each of its state events, and
Prefect refuses an event over its maximum size (EventTooLarge). Past ``max_edges`` the node's
inputs go to Prefect quoted, without ``wait_for``: the run completes, the edges are not drawn.
Checked against a real Prefect server with the event size lowered to what 60 shards exceed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.specs import exact_match_study

SPEC = exact_match_study("edges", k=1, execution="shard_rows: 1, view: false")


def test_a_node_with_more_inputs_than_an_event_holds_runs(prefect_server: str,
                                                          tmp_path: Path) -> None:
    from prefect.settings import PREFECT_SERVER_EVENTS_MAXIMUM_SIZE_BYTES, temporary_settings

    from assay.flows import study

    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(60):  # 60 tasks, one row each: 60 grading shards
            f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "c": str(i % 2), "gold": "1"}) + "\n")
    (tmp_path / "spec.yaml").write_text(SPEC)
    with temporary_settings(updates={PREFECT_SERVER_EVENTS_MAXIMUM_SIZE_BYTES: 6000}):
        assert study.max_edges() == 10  # 60 grading shards are over it
        info = study.run_spec(str(tmp_path / "spec.yaml"), str(tmp_path / "out"),
                              str(tmp_path / "store"), view=False)
    assert len([s for s in info["computed"] if s.startswith("grade[")]) == 60
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    pass1 = next(e for m in report["measurements"] if m["kind"] == "pass_at"
                 for e in m["estimates"] if e["name"].startswith("pass@1"))
    assert pass1["value"] == pytest.approx(0.5) and pass1["n"] == 60
