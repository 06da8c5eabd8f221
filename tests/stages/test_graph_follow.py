"""One graph per run (issue 50): the flow that records a head start follows the head start's
graph, so each expansion (a source's rows cut into shards) is made once, by the head start's
run, and a follower waits for it; where the leader never expands a node, the follower does."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from assay.spec import load_spec
from assay.stages import cache, headstart
from assay.stages.graph import GROUP, Graph, GraphRun, Node, ThreadExecutor, run_graph
from assay.stages.plan import run_study
from assay.store import Store

BOUND = 60  # seconds a wait may take before the test fails (a bound, not a margin)


class Inline:
    """Runs each node in ``submit``, keeping what each call gave (``outcomes``); given
    another run's ``answers``, returns those instead of calling the node (as the flow that
    records a head start gets the head start's result of each node)."""

    def __init__(self, answers: dict[str, tuple[bool, Any]] | None = None) -> None:
        self.answers = answers
        self.outcomes: dict[str, tuple[bool, Any]] = {}
        self.called: list[str] = []

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> tuple[bool, Any]:
        out: tuple[bool, Any]
        if self.answers is not None and node.id in self.answers:
            out = self.answers[node.id]
        else:
            self.called.append(node.id)
            try:
                out = (True, node.fn(*args, **kwargs))
            except Exception as e:
                out = (False, e)
        self.outcomes[node.id] = out
        done()
        return out

    def result(self, handle: tuple[bool, Any]) -> Any:
        ok, value = handle
        if not ok:
            raise value
        return value

    def close(self, cancel: bool) -> None:
        pass


def _node(id: str, deps: tuple[str, ...] = (), **kw: Any) -> Node:
    return Node(id, id, lambda get: (tuple(get(d) for d in deps), {}), kw.pop("fn", lambda *a: id),
                deps=deps, order=kw.pop("order", (id,)), **kw)


def leader() -> tuple[Graph, list[str]]:
    """``split`` expands into three parts (a group), ``bad`` adds one node and then fails."""
    expanded: list[str] = []
    g = Graph()
    g.group("parts", sealed_by="split")

    def split(n: int) -> Iterator[Node]:
        expanded.append("split")
        for i in range(n):
            yield _node(f"part{i}", order=("part", i), groups=("parts",))

    def bad(_: Any) -> Iterator[Node]:
        expanded.append("bad")
        yield _node("orphan")
        raise ValueError("cannot split")

    g.add(_node("split", fn=lambda: 3, expand=split))
    g.add(_node("sum", (GROUP + "parts",), fn=lambda parts: "+".join(parts)))
    g.add(_node("bad", expand=bad))
    g.add(_node("after", ("bad",)))
    return g, expanded


def outcome(run: GraphRun) -> tuple[Any, ...]:
    return (list(run.graph.nodes), run.results, list(run.failed), run.skipped)


@pytest.mark.parametrize("made", ["before", "after"])
def test_a_follower_takes_its_leaders_expansions_and_makes_none(made: str) -> None:
    g, expanded = leader()
    f = g.follower() if made == "before" else None  # the flow may start before or after
    ex = Inline()
    lead = run_graph(g, ex, max_parallel=1, raise_first=False)
    f = f if f is not None else g.follower()
    assert sorted(expanded) == ["bad", "split"]
    follower_ex = Inline(ex.outcomes)
    follow = run_graph(f, follower_ex, max_parallel=1, raise_first=False)
    assert follower_ex.called == []
    assert sorted(expanded) == ["bad", "split"]  # not again
    assert outcome(follow) == outcome(lead)
    assert lead.results["sum"] == "part0+part1+part2"
    assert str(follow.failed["bad"]) == "cannot split"
    assert "orphan" in follow.results  # added before the failure: it ran there, and here
    # the follower's nodes are copies: a gate or a wrapper there never reaches the leader
    assert all(f.nodes[i] is not g.nodes[i] for i in g.nodes)


def test_a_follower_expands_for_itself_what_its_leader_never_did() -> None:
    g, expanded = leader()
    f = g.follower()
    g.stop_growing()  # the leader stopped before running anything
    run = run_graph(f, Inline(), max_parallel=1, raise_first=False)
    assert sorted(expanded) == ["bad", "split"]
    assert run.results["sum"] == "part0+part1+part2"
    assert "orphan" in run.results and str(run.failed["bad"]) == "cannot split"


def test_a_follower_waits_for_the_expansion_its_leader_has_not_made_yet() -> None:
    g, expanded = leader()
    f = g.follower()
    got: list[list[str]] = []
    split = f.nodes["split"].expand
    assert split is not None
    t = threading.Thread(target=lambda: got.append([n.id for n in split(3)]), daemon=True)
    t.start()  # blocks: the leader has not run
    t.join(0.05)
    assert not got and expanded == []
    run_graph(g, ThreadExecutor(2), max_parallel=2, raise_first=False)  # wakes it
    t.join(BOUND)
    assert got == [["part0", "part1", "part2"]] and sorted(expanded) == ["bad", "split"]


SPEC = """
name: follow
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier: {kind: exact_match}
execution: {shard_rows: 8}
"""


class Joining(ThreadExecutor):
    """What the flow's executor does with a head start, on threads: each node's call waits
    for (returns) the head start's result of it."""

    def __init__(self, head: headstart.HeadStart) -> None:
        super().__init__(4, in_context=True)
        self.head = head

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> Any:
        with headstart.joining(self.head, node.id):
            return super().submit(replace(node, fn=functools.partial(headstart.joined, node.fn)),
                                  args, kwargs, waits, done)


def test_a_run_recording_a_head_start_cuts_the_rows_once(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"What is {i}?", "c": str(i % 3), "gold": str(i)}) + "\n"
        for i in range(20)))
    (tmp_path / "s.yaml").write_text(SPEC)
    cuts: list[str] = []
    load_columns = cache.load_columns

    def counted(store: Store, res: Any, columns: Any, name: str = "rows") -> Any:
        cuts.append(res.stage)
        return load_columns(store, res, columns, name)
    monkeypatch.setattr(cache, "load_columns", counted)
    spec, store = load_spec(tmp_path / "s.yaml"), Store(tmp_path / "store")
    head = headstart.HeadStart(spec, store)
    with headstart.running(head):
        # the flow's own spec and store objects, as flows/study.py loads them
        spec2, store2 = load_spec(tmp_path / "s.yaml"), Store(tmp_path / "store")
        run = run_study(spec2, store2, executor=Joining(head), progress=None, preload=False,
                        graph=head.follower(spec2, store2))
        head.wait(BOUND)
    assert head.run is not None and head.error is None
    assert cuts == ["filter-rows"]  # the head start cut the rows; the flow's run took its cut
    assert [r.key for r in run.results] == [r.key for r in head.run.results]
    assert len([r for r in run.results if r.stage == "grade"]) == 3  # 20 rows, 8 a shard
