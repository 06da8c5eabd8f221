"""Which shard nodes get a Prefect task run: those that worked, not cache hits (issue 50).

A task run costs more than a cached shard's lookup; a rerun whose head start served its
shards from the store records its source and study nodes as task runs, not its shards.
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
    # the first run computed every node, each on its own task run: a shard per 8 rows
    assert runs1.count("grade") == sum(x.startswith("grade[") for x in first["computed"]) == 4
    assert len(runs1) == len(first["computed"])
    # the rerun: every node cached; the shard nodes with no task run, the others with one
    assert second["computed"] == [] and sorted(second["cached"]) == sorted(first["computed"])
    assert runs2 == [n for n in runs1 if n != "grade"]
    for f in ("report.md", "report.json", "rows/a.parquet", "rows/b.parquet"):
        assert (tmp_path / "run1" / f).read_bytes() == (tmp_path / "run2" / f).read_bytes(), f
