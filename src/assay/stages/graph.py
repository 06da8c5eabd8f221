"""A small DAG runner: nodes with explicit inputs run as soon as those inputs exist, under a cap
on nodes in flight and named resource slots; a failure stops its dependents, not the rest.

Plain Python and runner-agnostic: :class:`ThreadExecutor` runs nodes on threads here;
``flows/study.py`` gives the same driver an executor that submits Prefect tasks (local or Dask).

A node may *expand* the graph when it finishes (a source's filtered rows decide its shards). A
*group* is the ordered results of the nodes added to it, complete once its sealing node has run
and every member has: a stage that reads "every shard of a source" depends on the group.

Example:
    >>> g = Graph()
    >>> g.add(Node("a", "double", lambda get: ((), {}), fn=lambda: 2))
    >>> g.add(Node("b", "add", lambda get: ((get("a"),), {}), fn=lambda x: x + 1, deps=("a",)))
    >>> run_graph(g, ThreadExecutor(2)).results["b"]
    3
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

GROUP = "group:"
_WAKE = ""  # no node has an empty id


def _start_rank(n: Node) -> tuple[Any, ...]:
    """Which ready node takes a free place under max_parallel (the scheduling policy; results
    keep their ``order`` whatever starts first). A node's own ``priority`` wins. Else: building
    and filtering any source's rows first; then shard nodes that work on rows that exist
    (grading, row scoring), source by source, shard by shard; then nodes that ask the model
    under test (``asks_model``: generation, log-likelihood scoring), in ``order``. A generate
    shard beyond its server's connections only parks on the server's budget while holding a
    place: ranked in ``order`` they would keep every grade, and later sources' rows, waiting
    for the last of them to start (benchmarks/pipeline.py shows the cost). Grading holds the
    cores, one shard at a time, so generation keeps every other place.

    A source or shard node's ``order`` is ``(0, source, step[, shard])``."""
    if n.priority is not None:
        return n.priority
    if n.scope == "source":
        return (0, -2, *n.order[1:])
    if n.scope == "shard" and not n.asks_model:
        _, source, step, shard = n.order
        return (0, -1, source, shard, step)
    return n.order


@dataclass
class Node:
    """One unit of work. ``args(get)`` builds the call's ``(args, kwargs)`` from the results of
    ``deps`` (node ids, or ``group:<name>`` for a group's tuple of results). ``resources`` name
    slots the node holds while it runs; ``order`` sorts results (completion order never
    shows) and, unless ``priority`` is given, ready nodes (first in order starts first);
    ``expand(result)`` returns nodes (and groups to seal) to add once this one ran.
    ``ready()``, when given, must also be true before the node starts (and takes its slots):
    e.g. its model is still loading elsewhere; whatever makes it true calls
    :meth:`Graph.wake`. ``scope`` (``source``, ``shard``, ``study``) and ``asks_model`` (it
    asks the model under test) are what the start policy ranks by (:func:`_start_rank`)."""

    id: str
    stage: str
    args: Callable[[Callable[[str], Any]], tuple[tuple[Any, ...], dict[str, Any]]]
    fn: Callable[..., Any]
    deps: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    order: tuple[Any, ...] = ()
    groups: tuple[str, ...] = ()
    expand: Callable[[Any], Sequence[Node]] | None = None
    label: str = ""
    ready: Callable[[], bool] | None = None
    priority: tuple[Any, ...] | None = None
    scope: str = ""
    asks_model: bool = False

    @property
    def where(self) -> str:
        """How errors name the node: ``grade (base shard 2/3)``."""
        return f"{self.stage} ({self.label})" if self.label else self.stage


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
    #: group name -> (id of the node that seals it, member ids in the order they were added)
    groups: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    #: slots held now by running nodes, and the ids of nodes started (kept by
    #: :func:`run_graph`; read from any thread)
    held: dict[str, int] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    #: called (on the runner's thread) after a node that held slots ended
    released: Callable[[], None] | None = None
    #: called with each node as it is added (the runner's policy: e.g. a gate on a model load)
    on_add: Callable[[Node], None] | None = None
    _wake: Callable[[], None] | None = None

    def wake(self) -> None:
        """Make the runner look again at nodes held back by ``ready()`` (from any thread)."""
        if self._wake is not None:
            self._wake()

    def add(self, node: Node) -> None:
        if node.id in self.nodes:
            raise ValueError(f"graph: node {node.id!r} added twice")
        if self.on_add is not None:
            self.on_add(node)
        self.nodes[node.id] = node
        for g in node.groups:
            if g not in self.groups:
                raise ValueError(f"graph: node {node.id!r} joins undeclared group {g!r}")
            self.groups[g][1].append(node.id)

    def group(self, name: str, sealed_by: str) -> str:
        """Declare group ``name``, complete once node ``sealed_by`` and every member ran."""
        self.groups[name] = (sealed_by, [])
        return GROUP + name


class Executor(Protocol):
    """Where nodes run. ``submit`` starts ``node.fn(*args, **kwargs)`` and arranges for
    ``done()`` to be called (from any thread) when it ends; ``waits`` are the handles of the
    node's inputs (a Prefect executor passes them as ``wait_for``: the edges it records)."""

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> Any: ...

    def result(self, handle: Any) -> Any: ...

    def close(self, cancel: bool) -> None: ...


class ThreadExecutor:
    """Nodes on a pool of threads (stage work releases the GIL: HTTP waits, worker processes,
    Arrow, torch). ``in_context``: each node runs in a copy of the submitting thread's context
    (its context variables, e.g. ``cached_only``, hold there too)."""

    def __init__(self, max_workers: int, *, in_context: bool = False) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="assay-node")
        self.in_context = in_context

    def submit(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Callable[[], None]) -> Future[Any]:
        if self.in_context:
            f = self.pool.submit(contextvars.copy_context().run, node.fn, *args, **kwargs)
        else:
            f = self.pool.submit(node.fn, *args, **kwargs)
        f.add_done_callback(lambda _: done())
        return f

    def result(self, handle: Future[Any]) -> Any:
        return handle.result()

    def close(self, cancel: bool) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


@dataclass
class GraphRun:
    """What ran: results by node id, failures (node id -> exception) and nodes not run because
    an input failed (node id -> the failed node's id)."""

    graph: Graph
    results: dict[str, Any]
    failed: dict[str, BaseException]
    skipped: dict[str, str]

    def ordered(self) -> list[Any]:
        """Results sorted by their nodes' ``order``."""
        ids = sorted(self.results, key=lambda i: self.graph.nodes[i].order)
        return [self.results[i] for i in ids]

    def group(self, name: str) -> tuple[Any, ...]:
        return tuple(self.results[m] for m in self.graph.groups[name][1])


def _waker(q: queue.SimpleQueue[str], node_id: str) -> Callable[[], None]:
    return lambda: q.put(node_id)


class NodeFailed(RuntimeError):
    """Raised by :func:`run_graph` when the failing node's own exception cannot carry a note."""


def run_graph(graph: Graph, executor: Executor, *, max_parallel: int = 8,
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
