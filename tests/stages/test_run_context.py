"""The run context carries its run's live state (issue 51): the background grader lives on the
run, not in a module registry keyed by the spec, so two runs of one spec never share one.

No threads race here: each case sets both runs up first, then calls one stage synchronously.
"""
from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.openai_server import served_source

import assay
from assay.spec import load_spec
from assay.stages import plan, stream
from assay.stages.cache import NotCached, StageResult, cached_only
from assay.stages.declare import RunContext, Shard
from assay.stages.grade import run_grade_shard
from assay.stages.wiring import study_graph
from assay.store import Store

SPEC = "name: ctx\nsources:\n" + served_source(2, "{{kind: exact_match}}")


def _spec(tmp: Path):  # a source that generates and grades: its runs stream (no server asked)
    (tmp / "a.jsonl").write_text(json.dumps({"id": "t0", "q": "1 + 1?", "gold": "2"}) + "\n")
    (tmp / "spec.yaml").write_text(SPEC.format(url="http://127.0.0.1:9/v1"))
    return load_spec(tmp / "spec.yaml")


def _ctx(graph) -> RunContext:
    (ctx,), _ = graph.nodes["build-rows[a]"].args(lambda dep: None)
    return ctx.on("a")


def test_two_runs_of_one_spec_on_one_store_each_find_their_own_grader(tmp_path: Path) -> None:
    """Run A's grade node claims its shard from A's grader, never from B's (with a registry
    keyed by store and spec text, B's start replaced A's, and A's node claimed B's shard)."""
    spec, store = _spec(tmp_path), Store(tmp_path / "store")
    graph_a, graph_b = study_graph(spec, store), study_graph(spec, store)
    ahead_a = plan._pregrader(spec, store, graph_a, 1)
    ahead_b = plan._pregrader(spec, store, graph_b, 1)
    try:
        assert ahead_a is not None and ahead_b is not None and ahead_a is not ahead_b
        for ahead in (ahead_a, ahead_b):  # shard 0 of source a is generating in both runs
            assert ahead.feed("a", 0, k=1, messages=[[]], task_ids=["t0"]) is not None
        rows = assay.rows(["1 + 1?"], [["2"]], [[1.0]])
        res = StageResult("generate", "a shard 1/1", "k", {"rows": store.put_table(
            rows.to_arrow())}, {"rows": rows.checksum()}, {"rows": 1})
        # a probe: the grade node stops at the store lookup, after asking its run's grader
        with cached_only(), pytest.raises(NotCached):
            run_grade_shard(_ctx(graph_a), res, Shard(0, 1, (0, 1)))
        assert ("a", 0) not in ahead_a.shards  # claimed by its own run's node
        assert ("a", 0) in ahead_b.shards  # the other run's shard is untouched
    finally:
        for ahead in (ahead_a, ahead_b):
            if ahead is not None:
                ahead.close()


def test_the_run_state_follows_every_copy_of_the_context_in_this_process(tmp_path: Path) -> None:
    spec, store = _spec(tmp_path), Store(tmp_path / "store")
    graph = study_graph(spec, store)
    ctx = _ctx(graph)
    assert ctx.state is graph.state and ctx.pregrader is None
    ahead = plan._pregrader(spec, store, graph, 1)
    assert ahead is not None
    try:
        # the copies a runner makes: per source, per task (device slot), per recorded flow
        for copy in (ctx.on("b"), replace(ctx, workers=3), replace(ctx, spec=_spec(tmp_path))):
            assert copy.pregrader is ahead
        assert graph.follower().state is graph.state
        # another process has no threads of this one: a pickled context arrives without them
        back = pickle.loads(pickle.dumps(ctx))
        assert back.pregrader is None and back.spec == spec and back.source == "a"
    finally:
        ahead.close()
    assert ctx.pregrader is None and not ahead.thread.is_alive()  # closed: the run has none


def test_cached_only_is_read_from_the_context(tmp_path: Path) -> None:
    ctx = RunContext(Store(tmp_path), None)  # type: ignore[arg-type]
    assert not ctx.cached_only
    with cached_only():
        assert ctx.cached_only
    assert not ctx.cached_only


def test_no_module_registry_of_runs_remains() -> None:
    """Nothing in the streaming module maps runs to graders (a dict there is a registry)."""
    assert not [name for name, v in vars(stream).items() if isinstance(v, dict)
                and not name.startswith("__")]
