"""The DAG runner: a node starts once its inputs exist (not in list order), the cap on nodes in
flight and the resource slots hold, a failure skips its dependents only and names its node,
expansion and groups. Overlap is proven with events and barriers, never with timings."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from assay.stages.graph import Graph, Node, ThreadExecutor, run_graph

BOUND = 60  # seconds a barrier waits before the test fails (a bound, not a margin)


def node(id: str, fn: Any, deps: tuple[str, ...] = (), **kw: Any) -> Node:
    return Node(id, id, lambda get: (tuple(get(d) for d in deps), {}), fn, deps=deps,
                order=kw.pop("order", (id,)), **kw)


def test_a_node_runs_as_soon_as_its_inputs_exist_while_unrelated_work_continues() -> None:
    # "slow" (first in order) finishes only after "b", which needs "a": a chain in list order
    # would wait forever (bounded: the event times out and the assertion fails)
    b_ran = threading.Event()
    g = Graph()
    g.add(node("0-slow", lambda: b_ran.wait(BOUND)))
    g.add(node("1-a", lambda: 1))
    g.add(node("2-b", lambda a: (b_ran.set(), a + 1)[1], deps=("1-a",)))
    run = run_graph(g, ThreadExecutor(4), max_parallel=4)
    assert run.results == {"0-slow": True, "1-a": 1, "2-b": 2}
    assert run.ordered() == [True, 1, 2]  # results in node order, not completion order


def test_max_parallel_and_slots_bound_what_runs_at_once() -> None:
    lock = threading.Lock()
    now = {"all": 0, "gpu": 0}
    peak = {"all": 0, "gpu": 0}
    two = threading.Barrier(2, timeout=BOUND)  # two free nodes must be in flight together

    def work(kind: str) -> Any:
        def fn() -> str:
            with lock:
                for k in {"all", kind}:
                    now[k] = now.get(k, 0) + 1
                    peak[k] = max(peak.get(k, 0), now[k])
            if kind == "free":
                two.wait()
            with lock:
                for k in {"all", kind}:
                    now[k] -= 1
            return kind
        return fn

    g = Graph()
    for i in range(2):
        g.add(node(f"free{i}", work("free")))
    for i in range(4):
        g.add(node(f"gpu{i}", work("gpu"), resources=("gpu",)))
    run = run_graph(g, ThreadExecutor(8), max_parallel=3, capacity={"gpu": 1})
    assert len(run.results) == 6
    assert peak["gpu"] == 1 and peak["all"] <= 3 and peak["free"] == 2


def test_a_failure_stops_its_dependents_not_unrelated_nodes_and_names_the_node() -> None:
    def boom() -> None:
        raise ValueError("bad shard")

    g = Graph()
    g.add(node("a", boom, label="base shard 2/3"))
    g.add(node("b", lambda a: a, deps=("a",)))
    g.add(node("c", lambda b: b, deps=("b",)))
    g.add(node("other", lambda: "fine"))
    with pytest.raises(ValueError, match="bad shard") as info:
        run_graph(g, ThreadExecutor(2), max_parallel=2)
    err = info.value
    assert err.assay_stage == "a (base shard 2/3)"
    assert "not run (2, an input failed): b, c" in "".join(err.__notes__)
    run = err.assay_graph
    assert run.results == {"other": "fine"} and run.skipped == {"b": "a", "c": "a"}


def test_expansion_and_groups_feed_a_stage_that_reads_every_shard() -> None:
    g = Graph()
    grp = g.group("parts", sealed_by="split")

    def expand(n: int) -> list[Node]:
        return [node(f"part{i}", lambda i=i: i * 10, order=("part", i), groups=("parts",))
                for i in range(n)]

    g.add(node("split", lambda: 3, expand=expand))
    g.add(Node("sum", "sum", lambda get: ((get(grp),), {}), lambda parts: parts, deps=(grp,),
               order=("z",)))
    run = run_graph(g, ThreadExecutor(3), max_parallel=3)
    assert run.results["sum"] == (0, 10, 20)  # the group in the order its members were added



def test_a_node_held_back_by_ready_takes_no_slot() -> None:
    # "a" comes first in order and wants the one core, but its model is still loading: "b"
    # (which finishes the load) holds the core meanwhile, then "a" runs
    g = Graph()
    loaded = threading.Event()
    seen: list[bool] = []
    g.add(node("a", lambda: seen.append(loaded.is_set()), resources=("cores",), order=(0,),
               ready=loaded.is_set))
    g.add(node("b", lambda: (loaded.set(), "b")[1], resources=("cores",), order=(1,)))
    run = run_graph(g, ThreadExecutor(2), capacity={"cores": 1})
    assert seen == [True] and run.results["b"] == "b"


def test_a_wake_starts_a_held_node_when_nothing_else_runs() -> None:
    # nothing runs while "a" waits on a load outside the graph; the loader's wake starts it
    # (the runner's poll is an hour: without the wake the bound below fails the test)
    g = Graph()
    loaded, asked = threading.Event(), threading.Event()

    def ready() -> bool:
        asked.set()
        return loaded.is_set()

    g.add(node("a", lambda: "a", ready=ready))

    def loader() -> None:
        asked.wait(BOUND)  # the runner has seen "a" held back
        loaded.set()
        g.wake()

    threading.Thread(target=loader, daemon=True).start()
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(run_graph(g, ThreadExecutor(1),
                                                             poll_s=3600)), daemon=True)
    t.start()
    t.join(BOUND)
    assert out and out[0].results == {"a": "a"}


def test_priority_picks_which_ready_node_takes_a_free_slot_results_keep_their_order() -> None:
    # "gate" holds the one core until all three others are ready; then "late" (last in order,
    # first in priority) must take the core before "x" and "y" (as score-rows before the next
    # shard's grade). One slot: the start order is deterministic.
    g = Graph()
    started: list[str] = []

    def run(name: str) -> Any:
        return lambda *_: (started.append(name), name)[1]

    g.add(node("gate", run("gate"), resources=("cores",), order=(0,)))
    g.add(node("x", run("x"), deps=("gate",), resources=("cores",), order=(1,)))
    g.add(node("y", run("y"), deps=("gate",), resources=("cores",), order=(2,)))
    g.add(node("late", run("late"), deps=("gate",), resources=("cores",), order=(3,),
               priority=(0, 5)))
    run_ = run_graph(g, ThreadExecutor(4), capacity={"cores": 1})
    assert started == ["gate", "late", "x", "y"]
    assert run_.ordered() == ["gate", "x", "y", "late"]  # results by order, not start
