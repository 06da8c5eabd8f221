"""Stages declare themselves and the wiring is derived: the modes table covers every mode, the
declared versions are the cache's, and a stage added by its declaration alone runs in the
graph, in the one-slot order and as a Prefect task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from assay import stages
from assay.rows import Rows
from assay.sources.base import Mode
from assay.spec import load_spec
from assay.stages import STAGE_VERSIONS, STAGES, RunContext, Shard, Stage, declare
from assay.stages.cache import cached_stage, load_rows
from assay.stages.modes import MODE_STAGES
from assay.stages.wiring import in_order
from assay.store import Store

ROOT = Path(__file__).resolve().parents[2]

#: Every stage's cache version today: a change here recomputes every user's stored results.
VERSIONS = {"build-rows": 1, "filter-rows": 1, "generate": 1, "grade": 1, "score-choices": 1,
            "score-documents": 1, "score-rows": 1, "decontaminate": 1,
            "score-reward-model": 1, "measure": 1, "report": 3}


def test_every_mode_has_its_shard_stages_and_versions_are_unchanged() -> None:
    assert set(MODE_STAGES) == set(get_args(Mode))
    for names in MODE_STAGES.values():
        assert all(STAGES[n].scope == "shard" for n in names)
    assert {n: s.version for n, s in STAGES.items()} == VERSIONS
    assert {n: STAGE_VERSIONS[n] for n in STAGES} == VERSIONS


def test_stages_come_after_what_they_read() -> None:
    order = [s.name for s in in_order(STAGES.values())]
    for s in STAGES.values():
        assert all(order.index(r) < order.index(s.name) for r in s.reads if r in STAGES), s.name
    loop = [Stage("x", 1, "study", lambda ctx: None, reads=("y",)),
            Stage("y", 1, "study", lambda ctx: None, reads=("x",))]
    with pytest.raises(ValueError, match="cycle"):
        in_order(loop)


SPEC = """
name: declared
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier: {kind: exact_match}
  - name: b
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
execution: {shard_rows: 4}
"""


def _passed_on(ctx: RunContext, rows: stages.StageResult, shard: Shard) -> stages.StageResult:
    """A shard stage of a test's own: the shard's rows as they came, counted."""
    part = load_rows(ctx.store, rows)

    def compute() -> tuple[dict[str, Rows], dict[str, int]]:
        return {"rows": part}, {"rows": len(part)}

    return cached_stage(ctx.store, "passed-on", inputs=[part.checksum()], params={},
                        compute=compute, label=f"{shard.label(ctx.source)}",
                        progress=ctx.progress)


def test_a_declared_shard_stage_runs_on_every_shard_it_applies_to(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"{i}?", "c": str(i % 3), "gold": "1", "r": i % 2}) + "\n"
        for i in range(10)))
    (tmp_path / "spec.yaml").write_text(SPEC)
    spec = load_spec(tmp_path / "spec.yaml")
    before = stages.run_study(spec, Store(tmp_path / "s0"), progress=None)
    declare(Stage("passed-on", 1, "shard", _passed_on, reads=("grade",),
                  applies=lambda spec, source: source == "a"))
    try:
        graph = stages.run_study(spec, Store(tmp_path / "s1"), progress=None)
        chain = stages.run_study(spec, Store(tmp_path / "s2"), progress=None, mode="chain")
    finally:
        STAGES.pop("passed-on")
        STAGE_VERSIONS.pop("passed-on")
    assert [r.key for r in graph.results] == [r.key for r in chain.results]
    passed = [r for r in graph.results if r.stage == "passed-on"]
    grades = [r for r in graph.results if r.stage == "grade"]
    # after each of a's grade shards (3 shards of 4, 4 and 2 rows), not on b (given scores)
    assert [r.label for r in passed] == [g.label for g in grades] == [
        f"a shard {i}/3" for i in (1, 2, 3)]
    assert graph.graded["a"] == tuple(passed)
    assert [r.key for r in graph.graded["b"]] == [r.key for r in before.graded["b"]]
    # the same rows: the same measurements and report as without the stage
    assert graph.report is not None and before.report is not None
    assert graph.report.key == before.report.key


def test_a_declared_stage_has_its_prefect_task() -> None:
    # a fresh interpreter: prefect is imported only under the prefect_server fixture here
    code = ("from assay.stages import Stage, declare; "
            "declare(Stage('late', 1, 'study', lambda ctx: None)); "
            "from assay.tasks.stages import task_for; t = task_for('late'); "
            "print(t.name, t.fn.__name__, task_for('grade').name)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["late", "late", "grade"]
