"""The graph runner's scheduling cost: CPU seconds to run a study-shaped graph of no-op nodes
(N shards: generate, grade, score-rows each), today's runner vs the rescanning one it replaced.

Both runners run the same graph in the same process, alternated, median of ``--repeats``; every
start order is checked equal to the old runner's before a time is printed. ``naive_run_graph``
is a copy of assay's own ``run_graph`` before issue 50 (a rescan of every node per event), kept
here only as the reference to measure against.

    .venv/bin/python benchmarks/scheduler.py --shards 400 1600 6400 16000 --repeats 3
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from assay.stages.graph import (
    _WAKE,
    GROUP,
    Executor,
    Graph,
    GraphRun,
    Node,
    NodeFailed,
    _start_rank,
    _waker,
    run_graph,
)

# ---- the old runner, verbatim but for its name (assay's own code, for comparison only) ----

def naive_run_graph(graph: Graph, executor: Executor, *, max_parallel: int = 8,
              capacity: Mapping[str, int] | None = None, raise_first: bool = True,
              poll_s: float = 1.0) -> GraphRun:
    """Run every node of ``graph`` once its inputs exist, at most ``max_parallel`` at a time and
    at most ``capacity[r]`` holding resource ``r``. Ready nodes start in ``order``. A failure
    skips its dependents; the rest of the graph still runs. Then, with ``raise_first``, the
    first failure (in ``order``) is raised with ``assay_stage`` naming its node and a note
    listing what was not run."""
    capacity = dict(capacity or {})
    results: dict[str, Any] = {}
    failed: dict[str, BaseException] = {}
    skipped: dict[str, str] = {}
    running: dict[str, Any] = {}
    held = graph.held
    held.clear()
    graph.started.clear()
    finished: queue.SimpleQueue[str] = queue.SimpleQueue()
    graph._wake = lambda: finished.put(_WAKE)
    lock = threading.Lock()  # a done() may fire inside submit(), before `running` has the handle

    def dep_state(d: str) -> tuple[str, str | None]:
        """("ok" | "wait" | "dead", the failed node when dead)."""
        if d.startswith(GROUP):
            sealer, members = graph.groups[d[len(GROUP):]]
            for m in (sealer, *members):
                s, why = dep_state(m)
                if s != "ok":
                    return s, why
            return "ok", None
        if d in results:
            return "ok", None
        if d in failed:
            return "dead", d
        if d in skipped:
            return "dead", skipped[d]
        return "wait", None

    def get(d: str) -> Any:
        if d.startswith(GROUP):
            return tuple(results[m] for m in graph.groups[d[len(GROUP):]][1])
        return results[d]

    def handles(d: str) -> list[Any]:
        if d.startswith(GROUP):
            sealer, members = graph.groups[d[len(GROUP):]]
            return [h for m in (sealer, *members) for h in handles(m)]
        return [done_handles[d]] if d in done_handles else []

    done_handles: dict[str, Any] = {}
    cancel = True
    try:
        while True:
            changed, gated = True, False
            while changed:  # skips cascade: settle them before starting anything
                changed = False
                waiting = [n for n in graph.nodes.values() if n.id not in results and
                           n.id not in failed and n.id not in skipped and n.id not in running]
                for n in sorted(waiting, key=_start_rank):
                    states = [dep_state(d) for d in n.deps]
                    dead = next((why for s, why in states if s == "dead"), None)
                    if dead is not None:
                        skipped[n.id] = dead
                        changed = True
                        continue
                    if any(s == "wait" for s, _ in states) or len(running) >= max_parallel:
                        continue
                    if n.ready is not None and not n.ready():
                        gated = True  # its Graph.wake() comes
                        continue
                    if any(held.get(r, 0) >= capacity.get(r, 1 << 30) for r in n.resources):
                        continue
                    for r in n.resources:
                        held[r] = held.get(r, 0) + 1
                    args, kwargs = n.args(get)
                    graph.started.add(n.id)
                    waits = [h for d in n.deps for h in handles(d)]
                    with lock:
                        running[n.id] = executor.submit(n, args, kwargs, waits,
                                                        _waker(finished, n.id))
            if not running and not gated:
                break
            try:
                nid = finished.get(timeout=poll_s)
            except queue.Empty:
                continue
            if nid == _WAKE:
                continue
            with lock:
                handle = running.pop(nid)
            node = graph.nodes[nid]
            for r in node.resources:
                held[r] -= 1
            if node.resources and graph.released is not None:
                graph.released()
            done_handles[nid] = handle
            try:
                res = executor.result(handle)
            except Exception as e:
                failed[nid] = e
                continue
            results[nid] = res
            if node.expand is not None:
                try:
                    for new in node.expand(res):
                        graph.add(new)
                except Exception as e:  # the node's output could not be split: it failed
                    del results[nid]
                    failed[nid] = e
        left = [n for n in graph.nodes if n not in results and n not in failed and n not in skipped]
        if left:  # a dependency on a node that never exists: a bug in the graph, said loudly
            raise NodeFailed(f"graph: nodes {left} wait on inputs that never came")
        cancel = False
    finally:
        executor.close(cancel)
    run = GraphRun(graph, results, failed, skipped)
    if failed and raise_first:
        first = min(failed, key=lambda i: graph.nodes[i].order)
        err = failed[first]
        if getattr(err, "assay_stage", None) is None:
            try:
                # a tag on the exception, read back by the CLI
                err.assay_stage = graph.nodes[first].where  # type: ignore[attr-defined]  # (above)
            except (AttributeError, TypeError):
                raise NodeFailed(f"{graph.nodes[first].where}: {err}") from err
        others = [graph.nodes[i].where for i in sorted(failed, key=lambda i: graph.nodes[i].order)
                  if i != first]
        note = [f"node {graph.nodes[first].where} failed"]
        if others:
            note.append(f"also failed: {', '.join(others)}")
        if skipped:
            note.append(f"not run ({len(skipped)}, an input failed): "
                        + ", ".join(graph.nodes[i].where for i in sorted(
                            skipped, key=lambda i: graph.nodes[i].order)))
        err.add_note("; ".join(note))
        err.assay_graph = run  # type: ignore[attr-defined]  # a tag the CLI reads back
        raise err
    return run


# ---- the study-shaped graph of no-op nodes ----


class Recorder:
    """Runs each node inline (no thread: only the runner's own work is timed), recording the
    start order."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> Any:
        self.order.append(node.id)
        done()
        return None

    def result(self, handle: Any) -> Any:
        return handle

    def close(self, cancel: bool) -> None:
        pass


def _none(get: Callable[[str], Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (), {}


def study_shaped(shards: int) -> Graph:
    """build-rows -> filter-rows, which expands into ``shards`` x (generate -> grade ->
    score-rows) with the wiring's scopes, orders and slots; then measure and report on the
    source's groups (as ``assay.stages.wiring`` builds a one-source study)."""
    g = Graph()
    graded = g.group("graded:s", sealed_by="filter-rows[s]")[len(GROUP):]
    final = g.group("final:s", sealed_by="filter-rows[s]")[len(GROUP):]

    def expand(_: Any) -> list[Node]:
        out: list[Node] = []
        chain = [("generate", (), True), ("grade", ("cores",), False),
                 ("score-rows", ("gpu", "cores"), False)]
        for i in range(shards):
            prev: str | None = None
            for j, (stage, slots, asks) in enumerate(chain):
                nid = f"{stage}[s {i}]"
                groups = (graded,) if stage == "grade" else (final,) if j == 2 else ()
                out.append(Node(nid, stage, _none, fn=lambda: None,
                                deps=() if prev is None else (prev,), resources=slots,
                                order=(0, 0, 2 + j, i), groups=groups, scope="shard",
                                asks_model=asks))
                prev = nid
        return out

    g.add(Node("build-rows[s]", "build-rows", _none, fn=lambda: None, order=(0, 0, 0),
               scope="source"))
    g.add(Node("filter-rows[s]", "filter-rows", _none, fn=lambda: None,
               deps=("build-rows[s]",), order=(0, 0, 1), scope="source", expand=expand))
    g.add(Node("measure", "measure", _none, fn=lambda: None,
               deps=(GROUP + final, GROUP + graded), order=(1, 0, 0), scope="study"))
    g.add(Node("report", "report", _none, fn=lambda: None, deps=("measure",),
               order=(1, 1, 0), scope="study"))
    return g


def cpu_seconds(runner: Callable[..., GraphRun], shards: int) -> tuple[float, list[str]]:
    g, ex = study_shaped(shards), Recorder()
    t = time.process_time()
    runner(g, ex, max_parallel=8, capacity={"cores": 1, "gpu": 1})
    return time.process_time() - t, ex.order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, nargs="+", default=[400, 1600, 6400, 16000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--naive-up-to", type=int, default=None,
                    help="time the old runner only up to this many shards (it is quadratic)")
    a = ap.parse_args()
    print(f"{'shards':>7} {'nodes':>7} {'old cpu s':>10} {'new cpu s':>10} {'ratio':>8}")
    for n in a.shards:
        old_t: list[float] = []
        new_t: list[float] = []
        naive = a.naive_up_to is None or n <= a.naive_up_to
        for _ in range(a.repeats):
            t_new, order_new = cpu_seconds(run_graph, n)
            new_t.append(t_new)
            if naive:
                t_old, order_old = cpu_seconds(naive_run_graph, n)
                old_t.append(t_old)
                if order_new != order_old:
                    raise SystemExit(f"{n} shards: the start orders differ")
        new = statistics.median(new_t)
        if old_t:
            old = statistics.median(old_t)
            print(f"{n:>7} {3 * n + 4:>7} {old:>10.3f} {new:>10.3f} {old / new:>7.1f}x", flush=True)
        else:
            print(f"{n:>7} {3 * n + 4:>7} {'(not run)':>10} {new:>10.3f} {'':>8}", flush=True)


if __name__ == "__main__":
    main()
