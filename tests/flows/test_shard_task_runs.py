"""Which shard nodes get a Prefect task run: those that worked, not cache hits (issue 50).

A task run costs more than a cached shard's lookup; a rerun whose head start served its
shards from the store records its source and study nodes as task runs, not its shards. Shards
of a stage that asks no model, which the head start computed, are recorded 16 to a task run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.flows.test_study_flow import write_study


def run(spec: Path, out: Path, store: Path) -> dict[str, Any]:
    """As ``assay run`` does: the graph's head start first (here run to its end before the
    flow starts, so which nodes it served is settled), then the flow that records it."""
    from assay.flows.study import run_spec
    from assay.spec import load_spec
    from assay.stages.headstart import HeadStart, key_for, running
    from assay.store import Store

    st = Store(store)
    head = HeadStart(load_spec(str(spec)), st, key=key_for(str(spec), [], st))
    with running(head):
        head.wait()
        return run_spec(str(spec), str(out), str(store), embedded=True)


def test_a_cached_shard_gets_no_task_run_and_the_results_are_the_same(
        prefect_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect import Task

    # the task runs each run submits (the server records them later, from events)
    submitted: list[str] = []
    real = Task.submit

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        submitted.append(self.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Task, "submit", spy)
    spec = write_study(tmp_path)
    first = run(spec, tmp_path / "run1", tmp_path / "store")
    runs1, submitted[:] = sorted(submitted), []
    second = run(spec, tmp_path / "run2", tmp_path / "store")
    runs2 = sorted(submitted)
    # the first run computed every node: each on its own task run, but the grading shards
    # (a stage asking no model) recorded together, 16 to a task run: here 4, on one
    assert sum(x.startswith("grade[") for x in first["computed"]) == 4
    assert runs1.count("grade") == 0 and runs1.count("record-shards") == 1
    assert len(runs1) == len(first["computed"]) - 4 + 1
    # the rerun: every node cached; the shard nodes with no task run, the others with one
    assert second["computed"] == [] and sorted(second["cached"]) == sorted(first["computed"])
    assert runs2 == [n for n in runs1 if n != "record-shards"]
    for f in ("report.md", "report.json", "rows/a.parquet", "rows/b.parquet"):
        assert (tmp_path / "run1" / f).read_bytes() == (tmp_path / "run2" / f).read_bytes(), f


def test_shards_a_failed_head_start_never_ran_are_computed_by_the_flow(
        prefect_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the head start fails before running any node (not stopped: the flow goes on without it);
    # every node it never ran is computed by the flow, the recorded shards' included
    from assay.stages import headstart

    spec = write_study(tmp_path)
    want = run(spec, tmp_path / "clean", tmp_path / "clean-store")

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("the head start broke")

    monkeypatch.setattr(headstart, "run_study", broken)
    got = run(spec, tmp_path / "run", tmp_path / "store")
    assert sorted(got["computed"]) == sorted(want["computed"]) and got["cached"] == []
    for f in ("report.md", "report.json", "rows/a.parquet", "rows/b.parquet"):
        assert (tmp_path / "run" / f).read_bytes() == (tmp_path / "clean" / f).read_bytes(), f


def test_a_failing_recorded_shard_fails_the_run_naming_it(
        prefect_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from assay.stages import grade
    from assay.stages.declare import STAGES

    spec = write_study(tmp_path)

    def flaky(ctx: Any, rows: Any, shard: Any) -> Any:
        if shard.index == 2:
            raise RuntimeError("shard 3 broke")
        return grade.run_grade_shard(ctx, rows, shard)

    monkeypatch.setitem(STAGES, "grade", replace(STAGES["grade"], fn=flaky))
    with pytest.raises(Exception, match="shard 3 broke"):
        run(spec, tmp_path / "run", tmp_path / "store")
