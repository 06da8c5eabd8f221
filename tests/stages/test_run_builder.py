"""One run builder: every study run (the graph, the one-slot order, the fully cached rerun, the
head start and the flow that records it) gets its graph and its StudyRun from StudyPlan."""

from __future__ import annotations

import ast
from pathlib import Path

from assay.spec import parse_spec
from assay.stages.chain import StudyPlan
from assay.stages.declare import RunContext
from assay.stages.headstart import HeadStart
from assay.store import Store

ROOT = Path(__file__).resolve().parents[2]

#: What only the builder may call: the graph's derivation and the run's result.
BUILT = {"study_graph", "StudyRun"}


def builder_calls(text: str) -> list[str]:
    """Where ``text`` (a module's source) builds a study graph or a StudyRun itself."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                f, ast.Attribute) else ""
            if name in BUILT:
                found.append(f"{node.lineno}: {ast.unparse(node)[:60]}")
    return found


def test_the_checker_finds_the_builds_it_is_for() -> None:
    code = ("g = study_graph(spec, store, progress=None)\n"
            "r = StudyRun(spec.checksum(), (), {}, None)\n"
            "h = wiring.study_graph(spec, None)\n"
            "p = StudyPlan.build(spec, store)\n")
    assert [int(f.split(":")[0]) for f in builder_calls(code)] == [1, 2, 3]


def test_only_the_builder_builds_a_run() -> None:
    files = [*sorted((ROOT / "src/assay").rglob("*.py")), *sorted((ROOT / "tasks").glob("*.py")),
             *sorted((ROOT / "flows").glob("*.py"))]
    found = {str(p.relative_to(ROOT)): builder_calls(p.read_text()) for p in files}
    found = {p: f for p, f in found.items() if f}
    # the builder's two calls, in the builder's module
    assert list(found) == ["src/assay/stages/chain.py"]
    assert len(found["src/assay/stages/chain.py"]) == 2


SPEC = ("{name: d, execution: {workers: 3}, sources: [{name: a, kind: file, path: a.jsonl, "
        "fields: {prompt: q, completion: c, reward: r}}]}")


def test_the_head_start_and_its_recording_flow_share_one_built_graph(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    store, other = Store(tmp_path / "a"), Store(tmp_path / "b")
    head = HeadStart(spec, store)
    assert head.graph is head.plan.graph  # built once, by the builder
    flow = head.follower(spec, other)
    assert sorted(flow.nodes) == sorted(head.graph.nodes)
    assert flow.state is head.graph.state  # the one run's live state
    head.graph.stop_growing()  # never run: a waiting follower expands for itself
    # each recorded node computes with the flow's store, and the spec's workers
    (ctx, *_), _ = flow.nodes["build-rows[a]"].args(lambda i: None)
    assert isinstance(ctx, RunContext) and ctx.store is other and ctx.workers == 3
    (ctx0, *_), _ = StudyPlan.build(spec, store, workers=5).graph.nodes[
        "build-rows[a]"].args(lambda i: None)
    assert ctx0.workers == 5
