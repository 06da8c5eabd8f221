"""The runner's schedule, pinned: the order nodes start in, the order results, failures and
skips are recorded, and why each node was skipped, for graphs with groups, expansion,
priorities, slots, ready gates and failures, as the rescanning runner did before issue 50
(recorded from it; and compared with a copy of it kept in benchmarks/scheduler.py on random
graphs)."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.stages.graph import GROUP, Graph, GraphRun, Node, NodeFailed, run_graph

ROOT = Path(__file__).resolve().parents[2]


class Inline:
    """Runs each node in ``submit`` (its ``done`` fires there too): every schedule is
    deterministic, so an order can be pinned, and it records the order nodes start in."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> tuple[bool, Any]:
        self.order.append(node.id)
        try:
            out: tuple[bool, Any] = (True, node.fn(*args, **kwargs))
        except Exception as e:
            out = (False, e)
        done()
        return out

    def result(self, handle: tuple[bool, Any]) -> Any:
        ok, value = handle
        if not ok:
            raise value
        return value

    def close(self, cancel: bool) -> None:
        pass


def _args(deps: tuple[str, ...]) -> Callable[[Callable[[str], Any]], Any]:
    return lambda get: (tuple(get(d) for d in deps), {})


def _ok(*_: Any) -> str:
    return "ok"


def _boom(*_: Any) -> str:
    raise ValueError("boom")


def mk(id: str, deps: tuple[str, ...] = (), fn: Callable[..., Any] = _ok, **kw: Any) -> Node:
    return Node(id, id.split("[")[0], _args(deps), fn, deps=deps, order=kw.pop("order", (9, id)),
                **kw)


def outcome(g: Graph, ex: Inline, run: GraphRun) -> dict[str, Any]:
    return {"started": ex.order, "results": list(run.results), "failed": list(run.failed),
            "skipped": list(run.skipped.items())}


def study(g: Graph, fail: set[str]) -> None:
    """Two sources, as the wiring builds them: source nodes, then per shard generate (asks the
    model) -> grade (cores) -> score (gpu, cores), groups sealed by the filter; study nodes."""
    for si, src in enumerate(("a", "b")):
        g.group(f"graded:{src}", sealed_by=f"filter[{src}]")
        g.group(f"final:{src}", sealed_by=f"filter[{src}]")

        def expand(_: Any, si: int = si, src: str = src) -> list[Node]:
            out = []
            for i in range(3):
                prev: tuple[str, ...] = ()
                for j, (st, slots, asks) in enumerate((("gen", (), True),
                                                       ("grade", ("cores",), False),
                                                       ("score", ("gpu", "cores"), False))):
                    nid = f"{st}[{src}{i}]"
                    groups = ((f"graded:{src}",) if st == "grade" else ()) + (
                        (f"final:{src}",) if st == "score" else ())
                    out.append(mk(nid, prev, _boom if nid in fail else _ok, resources=slots,
                                  order=(0, si, 2 + j, i), groups=groups, scope="shard",
                                  asks_model=asks))
                    prev = (nid,)
            return out

        g.add(mk(f"build[{src}]", order=(0, si, 0), scope="source"))
        g.add(mk(f"filter[{src}]", (f"build[{src}]",), order=(0, si, 1), scope="source",
                 expand=expand))
    g.add(mk("measure", (GROUP + "final:a", GROUP + "final:b", GROUP + "graded:b"),
             order=(1, 0, 0), scope="study", resources=("cores",)))
    g.add(mk("check", (GROUP + "graded:a",), order=(1, 1, 0), scope="study"))
    g.add(mk("report", ("measure", "check"), order=(1, 2, 0), scope="study"))


def priorities(g: Graph, fail: set[str]) -> None:
    """Roots and chains with explicit priorities, ties (insertion order), slots."""
    g.add(mk("late", priority=(5,), resources=("gpu",)))
    g.add(mk("early", priority=(1,), resources=("gpu",)))
    g.add(mk("tie1", priority=(3,)))
    g.add(mk("tie2", priority=(3,), resources=("cores",)))
    g.add(mk("both", ("early",), resources=("gpu", "cores"), order=(0,)))
    g.add(mk("plain", ("tie1", "tie2"), order=(2,)))
    g.add(mk("after", ("both", "late"), priority=(0,)))
    g.add(mk("z", order=(1,), resources=("cores",)))


def failures(g: Graph, fail: set[str]) -> None:
    """A failing node's dependents (direct, through a group, two failed inputs), an expansion
    that fails after adding some nodes, independent work that still runs."""
    g.group("parts", sealed_by="split")

    def expand(_: Any) -> list[Node]:
        return [mk("p0", groups=("parts",), order=(3, 0)),
                mk("p1", ("x",), groups=("parts",), order=(3, 1)),
                mk("p2", groups=("parts",), order=(3, 2), fn=_boom)]

    def bad_expand(_: Any) -> list[Node]:
        g.add(mk("orphan", order=(4, 0)))  # added before the split fails: it still runs
        raise ValueError("cannot split")

    g.add(mk("x", fn=_boom, order=(1, 0)))
    g.add(mk("y", order=(1, 1)))
    g.add(mk("split", ("y",), order=(2, 0), expand=expand))
    g.add(mk("sum", (GROUP + "parts",), order=(5, 0)))
    g.add(mk("two", ("sum", "x"), order=(5, 1)))
    g.add(mk("two2", ("x", "sum"), order=(5, 2)))
    g.add(mk("bad", order=(2, 1), expand=bad_expand))
    g.add(mk("after_bad", ("bad",), order=(6, 0)))
    g.add(mk("free", order=(7, 0), resources=("gpu",)))


def gates(g: Graph, fail: set[str]) -> None:
    """Nodes held back by ``ready()`` until a node ran (which wakes the runner)."""
    ran: set[str] = set()

    def opener(*_: Any) -> str:
        ran.add("opener")
        g.wake()
        return "ok"

    def is_open() -> bool:
        return "opener" in ran

    g.add(mk("g1", ready=is_open, order=(0, 0), resources=("gpu",)))
    g.add(mk("g2", ready=is_open, order=(0, 1)))
    g.add(mk("w1", order=(1, 0)))
    g.add(mk("w2", ("w1",), order=(1, 1)))
    g.add(mk("opener", ("w2",), fn=opener, order=(2, 0)))
    g.add(mk("tail", ("g1", "g2"), order=(3, 0), resources=("gpu",)))


SHAPES = {"study": study, "priorities": priorities, "failures": failures, "gates": gates}


def run_shape(shape: str, fail: set[str], runner: Callable[..., GraphRun] = run_graph,
              **kw: Any) -> dict[str, Any]:
    g, ex = Graph(), Inline()
    SHAPES[shape](g, fail)
    run = runner(g, ex, raise_first=False, poll_s=0.01, **kw)
    return outcome(g, ex, run)


# Recorded from the rescanning runner (main at d8dbe8b), before issue 50's change.
RECORDED: list[tuple[str, set[str], dict[str, Any], dict[str, Any]]] = [
 ('study', set(), {'max_parallel': 1},
  {'started': ['build[a]', 'filter[a]', 'build[b]', 'filter[b]', 'gen[a0]', 'grade[a0]',
               'score[a0]', 'gen[a1]', 'grade[a1]', 'score[a1]', 'gen[a2]', 'grade[a2]',
               'score[a2]', 'gen[b0]', 'grade[b0]', 'score[b0]', 'gen[b1]', 'grade[b1]',
               'score[b1]', 'gen[b2]', 'grade[b2]', 'score[b2]', 'measure', 'check', 'report'],
   'results': ['build[a]', 'filter[a]', 'build[b]', 'filter[b]', 'gen[a0]', 'grade[a0]',
               'score[a0]', 'gen[a1]', 'grade[a1]', 'score[a1]', 'gen[a2]', 'grade[a2]',
               'score[a2]', 'gen[b0]', 'grade[b0]', 'score[b0]', 'gen[b1]', 'grade[b1]',
               'score[b1]', 'gen[b2]', 'grade[b2]', 'score[b2]', 'measure', 'check', 'report'],
   'failed': [],
   'skipped': []}),
 ('study', set(), {'max_parallel': 3, 'capacity': {'gpu': 1, 'cores': 1}},
  {'started': ['build[a]', 'build[b]', 'filter[a]', 'filter[b]', 'gen[a0]', 'gen[a1]',
               'gen[a2]', 'grade[a0]', 'gen[b0]', 'gen[b1]', 'score[a0]', 'gen[b2]',
               'grade[a1]', 'score[a1]', 'grade[a2]', 'score[a2]', 'check', 'grade[b0]',
               'score[b0]', 'grade[b1]', 'score[b1]', 'grade[b2]', 'score[b2]', 'measure',
               'report'],
   'results': ['build[a]', 'build[b]', 'filter[a]', 'filter[b]', 'gen[a0]', 'gen[a1]',
               'gen[a2]', 'grade[a0]', 'gen[b0]', 'gen[b1]', 'score[a0]', 'gen[b2]',
               'grade[a1]', 'score[a1]', 'grade[a2]', 'score[a2]', 'check', 'grade[b0]',
               'score[b0]', 'grade[b1]', 'score[b1]', 'grade[b2]', 'score[b2]', 'measure',
               'report'],
   'failed': [],
   'skipped': []}),
 ('study', {'gen[b2]', 'grade[a1]'}, {'max_parallel': 1},
  {'started': ['build[a]', 'filter[a]', 'build[b]', 'filter[b]', 'gen[a0]', 'grade[a0]',
               'score[a0]', 'gen[a1]', 'grade[a1]', 'gen[a2]', 'grade[a2]', 'score[a2]',
               'gen[b0]', 'grade[b0]', 'score[b0]', 'gen[b1]', 'grade[b1]', 'score[b1]',
               'gen[b2]'],
   'results': ['build[a]', 'filter[a]', 'build[b]', 'filter[b]', 'gen[a0]', 'grade[a0]',
               'score[a0]', 'gen[a1]', 'gen[a2]', 'grade[a2]', 'score[a2]', 'gen[b0]',
               'grade[b0]', 'score[b0]', 'gen[b1]', 'grade[b1]', 'score[b1]'],
   'failed': ['grade[a1]', 'gen[b2]'],
   'skipped': [('score[a1]', 'grade[a1]'), ('measure', 'grade[a1]'), ('check', 'grade[a1]'),
               ('report', 'grade[a1]'), ('grade[b2]', 'gen[b2]'), ('score[b2]', 'gen[b2]')]}),
 ('study', {'score[a0]'}, {'max_parallel': 2, 'capacity': {'gpu': 1, 'cores': 1}},
  {'started': ['build[a]', 'build[b]', 'filter[a]', 'filter[b]', 'gen[a0]', 'gen[a1]',
               'grade[a0]', 'gen[a2]', 'score[a0]', 'gen[b0]', 'grade[a1]', 'gen[b1]',
               'score[a1]', 'gen[b2]', 'grade[a2]', 'score[a2]', 'check', 'grade[b0]',
               'score[b0]', 'grade[b1]', 'score[b1]', 'grade[b2]', 'score[b2]'],
   'results': ['build[a]', 'build[b]', 'filter[a]', 'filter[b]', 'gen[a0]', 'gen[a1]',
               'grade[a0]', 'gen[a2]', 'gen[b0]', 'grade[a1]', 'gen[b1]', 'score[a1]',
               'gen[b2]', 'grade[a2]', 'score[a2]', 'check', 'grade[b0]', 'score[b0]',
               'grade[b1]', 'score[b1]', 'grade[b2]', 'score[b2]'],
   'failed': ['score[a0]'],
   'skipped': [('measure', 'score[a0]'), ('report', 'score[a0]')]}),
 ('priorities', set(), {'max_parallel': 1},
  {'started': ['early', 'both', 'z', 'tie1', 'tie2', 'plain', 'late', 'after'],
   'results': ['early', 'both', 'z', 'tie1', 'tie2', 'plain', 'late', 'after'],
   'failed': [],
   'skipped': []}),
 ('priorities', set(), {'max_parallel': 2, 'capacity': {'gpu': 1, 'cores': 1}},
  {'started': ['early', 'z', 'tie1', 'both', 'tie2', 'late', 'plain', 'after'],
   'results': ['early', 'z', 'tie1', 'both', 'tie2', 'late', 'plain', 'after'],
   'failed': [],
   'skipped': []}),
 ('priorities', set(), {'max_parallel': 8, 'capacity': {'gpu': 1, 'cores': 1}},
  {'started': ['early', 'z', 'tie1', 'late', 'tie2', 'both', 'plain', 'after'],
   'results': ['early', 'z', 'tie1', 'late', 'tie2', 'both', 'plain', 'after'],
   'failed': [],
   'skipped': []}),
 ('failures', set(), {'max_parallel': 1},
  {'started': ['x', 'y', 'split', 'bad', 'p0', 'p2', 'orphan', 'free'],
   'results': ['y', 'split', 'p0', 'orphan', 'free'],
   'failed': ['x', 'bad', 'p2'],
   'skipped': [('two', 'x'), ('two2', 'x'), ('p1', 'x'), ('after_bad', 'bad'), ('sum', 'x')]}),
 ('failures', set(), {'max_parallel': 3, 'capacity': {'gpu': 1}},
  {'started': ['x', 'y', 'bad', 'free', 'split', 'orphan', 'p0', 'p2'],
   'results': ['y', 'free', 'split', 'orphan', 'p0'],
   'failed': ['x', 'bad', 'p2'],
   'skipped': [('two', 'x'), ('two2', 'x'), ('after_bad', 'bad'), ('p1', 'x'), ('sum', 'x')]}),
 ('gates', set(), {'max_parallel': 1},
  {'started': ['w1', 'w2', 'opener', 'g1', 'g2', 'tail'],
   'results': ['w1', 'w2', 'opener', 'g1', 'g2', 'tail'],
   'failed': [],
   'skipped': []}),
 ('gates', set(), {'max_parallel': 4, 'capacity': {'gpu': 1}},
  {'started': ['w1', 'w2', 'opener', 'g1', 'g2', 'tail'],
   'results': ['w1', 'w2', 'opener', 'g1', 'g2', 'tail'],
   'failed': [],
   'skipped': []})]


@pytest.mark.parametrize("case", range(len(RECORDED)))
def test_the_schedule_is_the_one_recorded_before_the_heap(case: int) -> None:
    shape, fail, kw, expected = RECORDED[case]
    assert run_shape(shape, fail, **kw) == expected


def _naive() -> Callable[..., GraphRun]:
    spec = importlib.util.spec_from_file_location("assay_bench_scheduler",
                                                  ROOT / "benchmarks" / "scheduler.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.naive_run_graph  # type: ignore[no-any-return]


def random_graph(seed: int) -> Callable[[Graph], None]:
    """A random DAG: groups sealed by random nodes, members added up front or by expansions
    (one failing half-way), failures, slots, priorities, ready gates opened by a root."""
    rng = random.Random(seed)

    def build(g: Graph) -> None:
        ran: set[str] = set()

        def opener(*_: Any) -> str:
            ran.add("open")
            g.wake()
            return "ok"

        def is_open() -> bool:  # one callable shared by every gated node
            return "open" in ran

        ids: list[str] = []
        groups: list[str] = []
        reads_group: set[str] = set()
        slots = ("gpu", "cores", "io")
        counter = iter(range(10**6))

        def rand_node(prefix: str, pool: list[str]) -> Node:
            nid = f"{prefix}{next(counter)}"
            joins = groups and rng.random() < 0.3
            if joins:  # no cycle: a member reads no group, nor anything that reads one
                pool = [i for i in pool if i not in reads_group]
            deps = tuple(rng.sample(pool, k=min(len(pool), rng.choice((0, 0, 1, 1, 2, 3)))))
            if groups and not joins and rng.random() < 0.3:
                deps += (GROUP + rng.choice(groups),)
            if any(d.startswith(GROUP) or d in reads_group for d in deps):
                reads_group.add(nid)
            kw: dict[str, Any] = {
                "resources": tuple(rng.sample(slots, k=rng.choice((0, 0, 1, 2)))),
                "order": (rng.randrange(3), rng.randrange(4)),
                "scope": rng.choice(("", "source", "shard", "shard", "study")),
                "asks_model": rng.random() < 0.3,
            }
            if kw["scope"] in ("source", "shard"):
                kw["order"] = (0, rng.randrange(3), rng.randrange(3), rng.randrange(4))
            if rng.random() < 0.15:
                kw["priority"] = (rng.randrange(3),)
            if rng.random() < 0.15:
                kw["ready"] = is_open
            if joins:
                kw["groups"] = (rng.choice(groups),)
            fn = _boom if rng.random() < 0.08 else _ok
            if rng.random() < 0.12:
                n_new, fails = rng.randrange(1, 5), rng.random() < 0.2

                def expand(_: Any, n_new: int = n_new, fails: bool = fails) -> Iterator[Node]:
                    for k in range(n_new):  # a generator: what it yielded stays added
                        new = rand_node("e", ids)
                        if fails and k == n_new - 1:
                            raise ValueError("split failed")
                        ids.append(new.id)
                        yield new
                kw["expand"] = expand
            return mk(nid, deps, fn, **kw)

        g.add(mk("open", fn=opener, order=(rng.randrange(3),)))
        ids.append("open")
        for _ in range(rng.randrange(8, 30)):
            if rng.random() < 0.15 and ids:
                name = f"grp{len(groups)}"
                g.group(name, sealed_by=rng.choice(ids))
                groups.append(name)
            n = rand_node("n", ids)
            g.add(n)
            ids.append(n.id)
    return build


@pytest.mark.parametrize("seed", range(300))
def test_random_graphs_schedule_as_the_rescanning_runner_did(seed: int) -> None:
    naive = _naive()
    rng = random.Random(seed)
    kw = {"max_parallel": rng.choice((1, 1, 2, 3, 8)),
          "capacity": {"gpu": rng.choice((1, 2)), "cores": 1, "io": rng.choice((1, 3))}}
    got = []
    for runner in (naive, run_graph):
        g, ex = Graph(), Inline()
        random_graph(seed)(g)
        try:
            run = runner(g, ex, raise_first=False, poll_s=0.01, **kw)
            got.append(outcome(g, ex, run))
        except NodeFailed as e:  # a dependency on a node that never exists
            got.append({"error": str(e), "started": ex.order})
    assert got[1] == got[0]


class Counted:
    """A priority that counts how often the runner compares it: the runner's work, counted
    instead of timed (comparisons are what ordering the ready nodes costs)."""

    calls = 0

    def __init__(self, v: int) -> None:
        self.v = v

    def __lt__(self, other: Counted) -> bool:
        Counted.calls += 1
        return self.v < other.v

    def __eq__(self, other: object) -> bool:
        Counted.calls += 1
        return isinstance(other, Counted) and self.v == other.v

    __hash__ = None  # type: ignore[assignment]


def _comparisons(shards: int) -> tuple[int, int]:
    """(nodes, comparisons) for ``shards`` chains a -> b joining one group, then one reader."""
    rng = random.Random(shards)
    ranks = list(range(2 * shards + 1))
    rng.shuffle(ranks)
    g = Graph()
    g.group("all", sealed_by="a0")
    for i in range(shards):
        g.add(mk(f"a{i}", priority=(Counted(ranks[2 * i]),)))
        g.add(mk(f"b{i}", (f"a{i}",), priority=(Counted(ranks[2 * i + 1]),), groups=("all",)))
    g.add(mk("end", (GROUP + "all",), priority=(Counted(ranks[-1]),)))
    Counted.calls = 0
    run = run_graph(g, Inline(), max_parallel=1)
    assert len(run.results) == len(g.nodes)
    return len(g.nodes), Counted.calls


def test_the_runner_orders_ready_nodes_in_n_log_n_comparisons_not_a_sort_per_event() -> None:
    # a rescan sorted every waiting node after each event: ~n^2/2 comparisons (1.07M at 401
    # nodes, 4.9M at 801); a heap makes ~4.5 n log2 n (15k, 35k)
    small, big = _comparisons(100), _comparisons(400)
    for n, calls in (small, big):
        assert calls <= 10 * n * math.log2(n), (n, calls)
    assert big[1] / small[1] < 8  # 4x the nodes: n log n gives ~5x, n^2 16x
