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
import heapq
import itertools
import queue
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeAlias

from typing_extensions import TypeVar

from assay.stages.declare import RunState

GROUP = "group:"
_WAKE = ""  # no node has an empty id

#: How nodes sort (``order``, ``priority``): tuples of strings and numbers, compared only with
#: each other (a study's are ``(0, source, step[, shard])``), never read field by field here.
Order: TypeAlias = tuple[object, ...]

#: What a graph's nodes return: its run's results (a study graph's are StageResults), and an
#: executor's handle on a submitted node (a Future, a Prefect future, an inline outcome). A
#: graph made empty (``Graph()``, then nodes added) is unparameterized, as a bare ``Graph``
#: annotation is: ``Any``, which its nodes' own types (``Node[StageResult]``) then pin.
R = TypeVar("R", default=Any)
H = TypeVar("H")


def _start_rank(n: Node[R]) -> Order:
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
class Node(Generic[R]):
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
    #: the call's arguments are whatever ``fn``'s signature takes (a run context, results, a
    #: shard; ``assay.stages.plan`` reads the context back), checked by that signature
    args: Callable[[Callable[[str], R | tuple[R, ...]]], tuple[tuple[Any, ...], dict[str, Any]]]
    fn: Callable[..., R]
    deps: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    order: Order = ()
    groups: tuple[str, ...] = ()
    expand: Callable[[R], Iterable[Node[R]]] | None = None
    label: str = ""
    ready: Callable[[], bool] | None = None
    priority: Order | None = None
    scope: str = ""
    asks_model: bool = False

    @property
    def where(self) -> str:
        """How errors name the node: ``grade (base shard 2/3)``."""
        return f"{self.stage} ({self.label})" if self.label else self.stage


@dataclass
class Graph(Generic[R]):
    nodes: dict[str, Node[R]] = field(default_factory=dict)
    #: group name -> (id of the node that seals it, member ids in the order they were added)
    groups: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    #: slots held now by running nodes, and the ids of nodes started (kept by
    #: :func:`run_graph`; read from any thread)
    held: dict[str, int] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    #: called (on the runner's thread) after a node that held slots ended
    released: Callable[[], None] | None = None
    #: called with each node as it is added (the runner's policy: e.g. a gate on a model load)
    on_add: Callable[[Node[R]], None] | None = None
    #: node id -> (the ids of the nodes its expansion added, what it raised or None), kept by
    #: :func:`run_graph` under ``_grow``: what a :meth:`follower` reads
    expansions: dict[str, tuple[list[str], BaseException | None]] = field(default_factory=dict)
    #: the live state of the run of this graph, shared by its nodes' contexts (the study
    #: graph's: ``assay.stages.wiring``); the runner starts the run's background grader on it
    state: RunState = field(default_factory=RunState)
    _wake: Callable[[], None] | None = None
    _grow: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _grown: bool = False  # no expansion will be recorded any more

    def wake(self) -> None:
        """Make the runner look again at nodes held back by ``ready()`` (from any thread)."""
        if self._wake is not None:
            self._wake()

    def add(self, node: Node[R]) -> None:
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

    def follower(self, adapt: Callable[[Node[R]], Node[R]] | None = None) -> Graph[R]:
        """A graph of this one's nodes for a second run that records this graph's run (the
        flow that records ``assay run``'s head start): its nodes are copies of these (no
        ``ready`` gate; ``adapt`` may change each copy), and a node's expansion is the one
        this graph's run made, waited for, not computed again. Where this graph's run never
        expands the node (it ended first), the copy expands it itself. Bounded: this graph is
        run, or :meth:`stop_growing` is called, by whoever made it.

        Example:
            >>> g = Graph()
            >>> g.add(Node("a", "a", lambda get: ((), {}), fn=lambda: 1,
            ...            expand=lambda r: [Node("b", "b", lambda get: ((), {}), fn=lambda: r)]))
            >>> f = g.follower()
            >>> sorted(run_graph(g, ThreadExecutor(1)).results)
            ['a', 'b']
            >>> sorted(run_graph(f, ThreadExecutor(1)).results)  # "b" as g's run made it
            ['a', 'b']
        """
        with self._grow:
            grown = {i for ids, _ in self.expansions.values() for i in ids}
            f: Graph[R] = Graph(groups={name: (sealer, [])
                                        for name, (sealer, _) in self.groups.items()},
                                state=self.state)  # the copies' contexts are this run's
            for n in list(self.nodes.values()):
                if n.id not in grown:
                    f.add(self._copy(n, adapt))
        return f

    def _copy(self, n: Node[R], adapt: Callable[[Node[R]], Node[R]] | None) -> Node[R]:
        c = replace(n, ready=None,
                    expand=None if n.expand is None else self._expansion(n, adapt))
        return adapt(c) if adapt is not None else c

    def _expansion(self, n: Node[R], adapt: Callable[[Node[R]], Node[R]] | None
                   ) -> Callable[[R], Iterable[Node[R]]]:
        def expand(result: R) -> Iterator[Node[R]]:
            with self._grow:  # woken when this graph's run records an expansion or ends
                while n.id not in self.expansions and not self._grown:
                    self._grow.wait()
                made = self.expansions.get(n.id)
                copies = None if made is None else [self._copy(self.nodes[i], adapt)
                                                    for i in made[0]]
            if made is None:  # never expanded there: expand here
                assert n.expand is not None
                for c in n.expand(result):
                    yield adapt(c) if adapt is not None else c
                return
            yield from copies or ()
            if made[1] is not None:  # it failed there after adding these: here too
                raise made[1]
        return expand

    def stop_growing(self) -> None:
        """No expansion will be recorded any more (this graph's run ended, or never starts):
        a :meth:`follower` still waiting expands for itself."""
        with self._grow:
            self._grown = True
            self._grow.notify_all()


class Executor(Protocol[H, R]):
    """Where nodes run. ``submit`` starts ``node.fn(*args, **kwargs)`` and arranges for
    ``done()`` to be called (from any thread) when it ends; ``waits`` are the handles of the
    node's inputs (a Prefect executor passes them as ``wait_for``: the edges it records)."""

    def submit(self, node: Node[R], args: tuple[object, ...], kwargs: dict[str, object],
               waits: list[H], done: Callable[[], None]) -> H: ...

    def result(self, handle: H) -> R: ...

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
class GraphRun(Generic[R]):
    """What ran: results by node id, failures (node id -> exception) and nodes not run because
    an input failed (node id -> the failed node's id)."""

    graph: Graph[R]
    results: dict[str, R]
    failed: dict[str, BaseException]
    skipped: dict[str, str]

    def ordered(self) -> list[R]:
        """Results sorted by their nodes' ``order``."""
        ids = sorted(self.results, key=lambda i: self.graph.nodes[i].order)
        return [self.results[i] for i in ids]

    def group(self, name: str) -> tuple[R, ...]:
        return tuple(self.results[m] for m in self.graph.groups[name][1])


def _waker(q: queue.SimpleQueue[str], node_id: str) -> Callable[[], None]:
    return lambda: q.put(node_id)


class NodeFailed(RuntimeError):
    """Raised by :func:`run_graph` when the failing node's own exception cannot carry a note."""


#: a ready node's place in a heap: (start key, version, node id); an older version is stale
_Entry = tuple[tuple[Order, int], int, str]


class _Book(Generic[R]):
    """What :func:`run_graph` knows between events, kept up as nodes end instead of rescanning
    every node after each one (a rescan per event was quadratic in the shards).

    Per waiting node, how many of its inputs are not there yet (``missing``) and who reads each
    input (``readers``); per group, its first member (sealer first) not run yet (``cursor``)
    and the state its readers last heard (``gstate``). Ready nodes wait in heaps keyed
    ``(_start_rank(node), insertion index)``, which is the order a stable sort of all waiting
    nodes by ``_start_rank`` gives, so the same nodes start in the same order as a rescan would
    start them. A node's rank is read once, when it is added. Only the runner's thread uses it."""

    def __init__(self, graph: Graph[R], results: Mapping[str, R],
                 failed: dict[str, BaseException], skipped: dict[str, str],
                 running: Mapping[str, object]) -> None:
        self.graph, self.results, self.failed = graph, results, failed
        self.skipped, self.running = skipped, running
        self.key: dict[str, tuple[Order, int]] = {}  # every node seen -> its start key
        self.version: dict[str, int] = {}
        self.missing: dict[str, int] = {}  # node -> its inputs not there yet
        self.readers: dict[str, list[str]] = {}  # input (id or group:name) -> nodes reading it
        self.in_groups: dict[str, set[str]] = {}  # node -> the groups it seals or joins
        self.cursor: dict[str, int] = {}  # group -> its first member not run (0: the sealer)
        self.gstate: dict[str, str] = {}  # group -> "ok" | "wait" | "dead", as its readers know
        self.doomed: set[str] = set()  # waiting nodes with an input that failed or was skipped
        #: ready nodes: not yet looked at; parked on a full slot; held back by ``ready()``
        #: (one lane per ``ready`` callable: the lane's nodes all get the same answer)
        self.fresh: list[_Entry] = []
        self.parked: dict[str, list[_Entry]] = {}
        self.gated: dict[Hashable, list[_Entry]] = {}
        self.gate: dict[Hashable, Callable[[], bool]] = {}

    def waiting(self, nid: str) -> bool:
        return (nid in self.key and nid not in self.results and nid not in self.failed
                and nid not in self.skipped and nid not in self.running)

    def state(self, d: str) -> tuple[str, str | None]:
        """Input ``d``: ("ok" | "wait" | "dead", the failed node when dead). A group is in the
        state of its first member (sealer first) that has not run."""
        if d.startswith(GROUP):
            name = d[len(GROUP):]
            self._track(name)
            at = self._member(name, self.cursor[name])
            return ("ok", None) if at is None else self.state(at)
        if d in self.results:
            return "ok", None
        if d in self.failed:
            return "dead", d
        if d in self.skipped:
            return "dead", self.skipped[d]
        return "wait", None

    def _member(self, name: str, i: int) -> str | None:
        sealer, members = self.graph.groups[name]
        if i == 0:
            return sealer
        return members[i - 1] if i <= len(members) else None

    def _track(self, name: str) -> None:
        """Follow group ``name`` from now on (its sealer and its members so far)."""
        if name in self.cursor:
            return
        sealer, members = self.graph.groups[name]
        for m in (sealer, *members):
            self.in_groups.setdefault(m, set()).add(name)
        self.cursor[name], self.gstate[name] = 0, "wait"
        self._refresh(name)

    def _refresh(self, name: str) -> None:
        """Move the group's cursor past members that ran and tell its readers when its state
        changed: ok once complete, wait again when a member joins, dead at a dead member."""
        i = self.cursor[name]
        while (m := self._member(name, i)) is not None and m in self.results:
            i += 1
        self.cursor[name] = i
        new = "ok" if m is None else self.state(m)[0]
        old, self.gstate[name] = self.gstate[name], new
        if new == old:
            return
        for r in self.readers.get(GROUP + name, ()):
            if not self.waiting(r):
                continue
            if old == "ok":
                self.missing[r] += 1
            elif new == "ok":
                self._resolve(r)
            if new == "dead":
                self.doomed.add(r)

    def sync(self) -> None:
        """Take in the nodes added since the last look (by expansions, or by anyone), in the
        order they were added."""
        nodes = self.graph.nodes
        if len(nodes) != len(self.key):
            for n in itertools.islice(nodes.values(), len(self.key), None):
                self._add(n)

    def _add(self, n: Node[R]) -> None:
        self.key[n.id], self.version[n.id] = (_start_rank(n), len(self.key)), 0
        for g in n.groups:
            if g in self.cursor:
                self.in_groups.setdefault(n.id, set()).add(g)
                self._refresh(g)
            else:
                self._track(g)
        missing, dead = 0, False
        for d in n.deps:
            if d.startswith(GROUP):
                self._track(d[len(GROUP):])  # before it reads: tracking tells no one
                s = self.gstate[d[len(GROUP):]]
            else:
                s = self.state(d)[0]
            self.readers.setdefault(d, []).append(n.id)
            missing += s != "ok"
            dead = dead or s == "dead"
        self.missing[n.id] = missing
        if dead:
            self.doomed.add(n.id)
        elif not missing:
            heapq.heappush(self.fresh, (self.key[n.id], 0, n.id))

    def _resolve(self, r: str) -> None:
        self.missing[r] -= 1
        if self.missing[r] == 0:
            self.version[r] += 1
            heapq.heappush(self.fresh, (self.key[r], self.version[r], r))

    def ended(self, nid: str) -> None:
        """Node ``nid`` ran, failed or was skipped (``results``, ``failed`` or ``skipped`` says
        which): its readers and its groups hear of it."""
        ok = nid in self.results
        for r in self.readers.get(nid, ()):
            if self.waiting(r):
                if ok:
                    self._resolve(r)
                else:
                    self.doomed.add(r)
        for g in self.in_groups.get(nid, ()):
            self._refresh(g)

    def settle(self) -> None:
        """Skip every waiting node with a failed or skipped input, and so on down, pass by
        pass as a rescan in start order did: a node is skipped for the first of its inputs
        that was dead when the scan reached it."""
        todo, self.doomed = self.doomed, set()
        while todo:
            heap = [(self.key[n], n) for n in todo if self.waiting(n)]
            heapq.heapify(heap)
            queued, later = {n for _, n in heap}, set()
            while heap:
                k, n = heapq.heappop(heap)
                self.skipped[n] = next(why for s, why in map(self.state, self.graph.nodes[n].deps)
                                       if s == "dead" and why is not None)
                self.ended(n)
                for r in self.doomed:  # this pass reaches those after it; the next, the rest
                    if r not in queued:
                        queued.add(r)
                        if self.key[r] > k:
                            heapq.heappush(heap, (self.key[r], r))
                        else:
                            later.add(r)
                self.doomed = set()
            todo = later

    def _live(self, lane: list[_Entry]) -> bool:
        """Drop stale entries off the top of ``lane``; whether one is left."""
        while lane:
            _, v, nid = lane[0]
            if v == self.version[nid] and self.missing[nid] == 0 and self.waiting(nid):
                return True
            heapq.heappop(lane)
        return False

    def starts(self, room: Callable[[], bool], free: Callable[[str], bool],
               start: Callable[[Node[R]], None]) -> bool:
        """Start ready nodes in start order while ``room()``, one pass as a rescan made: a node
        held back by ``ready()`` waits in its callable's lane, one whose slot is not ``free``
        in that slot's lane (looked at again once the slot is free). Returns whether a node was
        held back by ``ready()`` (its wake comes)."""
        gated = False
        closed: set[Hashable] = set()  # gated lanes that said no since the last start
        pos: tuple[Order, int] | None = None  # the last key looked at: a pass never goes back
        behind: list[tuple[Hashable, _Entry]] = []  # gated lanes' entries, back after the pass
        while room():
            best: list[_Entry] | None = None
            if self._live(self.fresh):
                best = self.fresh
            for r, lane in self.parked.items():
                if free(r) and self._live(lane) and (best is None or lane[0] < best[0]):
                    best = lane
            for g, lane in self.gated.items():
                if g in closed or not self._live(lane):
                    continue
                if pos is not None and lane[0][0] < pos:  # reopened by a start: ask again
                    if not self.gate[g]():
                        gated = True
                        closed.add(g)
                        continue
                    while self._live(lane) and lane[0][0] < pos:
                        behind.append((g, heapq.heappop(lane)))
                    if not self._live(lane):
                        continue
                if best is None or lane[0] < best[0]:
                    best = lane
            if best is None:
                break
            entry = heapq.heappop(best)
            pos = entry[0]
            n = self.graph.nodes[entry[2]]
            if n.ready is not None and not n.ready():
                gated = True
                g = _gate_key(n)
                self.gate[g] = n.ready
                self.gated.setdefault(g, [])
                closed.add(g)
                behind.append((g, entry))
                continue
            slot = next((r for r in n.resources if not free(r)), None)
            if slot is not None:
                heapq.heappush(self.parked.setdefault(slot, []), entry)
                continue
            start(n)
            closed.clear()
        for g, entry in behind:
            heapq.heappush(self.gated[g], entry)
        return gated


def _gate_key(n: Node[R]) -> Hashable:
    """The lane of a node held back by ``ready()``: its callable (``loader.idle`` of every
    score-rows node is one lane), or the node alone when the callable cannot be hashed."""
    try:
        hash(n.ready)
    except TypeError:
        return ("node", n.id)
    return n.ready


def _expand(graph: Graph[R], node: Node[R], result: R) -> None:
    """Add what ``node`` expands into and record it for followers (a failure too: what was
    added before it stays in the graph, and runs)."""
    assert node.expand is not None
    with graph._grow:
        added: list[str] = []
        try:
            for new in node.expand(result):
                graph.add(new)
                added.append(new.id)
        except Exception as e:
            graph.expansions[node.id] = (added, e)
            raise
        else:
            graph.expansions[node.id] = (added, None)
        finally:
            graph._grow.notify_all()


def run_graph(graph: Graph[R], executor: Executor[H, R], *, max_parallel: int = 8,
              capacity: Mapping[str, int] | None = None, raise_first: bool = True,
              poll_s: float = 1.0) -> GraphRun[R]:
    """Run every node of ``graph`` once its inputs exist, at most ``max_parallel`` at a time and
    at most ``capacity[r]`` holding resource ``r``. Ready nodes start in ``order``. A failure
    skips its dependents; the rest of the graph still runs. Then, with ``raise_first``, the
    first failure (in ``order``) is raised with ``assay_stage`` naming its node and a note
    listing what was not run. Scheduling costs O(log n) per node, not a rescan of the graph
    after each event (:class:`_Book`)."""
    capacity = dict(capacity or {})
    results: dict[str, R] = {}
    failed: dict[str, BaseException] = {}
    skipped: dict[str, str] = {}
    running: dict[str, H] = {}
    held = graph.held
    held.clear()
    graph.started.clear()
    finished: queue.SimpleQueue[str] = queue.SimpleQueue()
    graph._wake = lambda: finished.put(_WAKE)
    lock = threading.Lock()  # a done() may fire inside submit(), before `running` has the handle
    book = _Book(graph, results, failed, skipped, running)

    def get(d: str) -> R | tuple[R, ...]:
        if d.startswith(GROUP):
            return tuple(results[m] for m in graph.groups[d[len(GROUP):]][1])
        return results[d]

    def handles(d: str) -> list[H]:
        if d.startswith(GROUP):
            sealer, members = graph.groups[d[len(GROUP):]]
            return [h for m in (sealer, *members) for h in handles(m)]
        return [done_handles[d]] if d in done_handles else []

    def room() -> bool:
        return len(running) < max_parallel

    def free(r: str) -> bool:
        return held.get(r, 0) < capacity.get(r, 1 << 30)

    def start(n: Node[R]) -> None:
        for r in n.resources:
            held[r] = held.get(r, 0) + 1
        args, kwargs = n.args(get)
        graph.started.add(n.id)
        waits = [h for d in n.deps for h in handles(d)]
        with lock:
            running[n.id] = executor.submit(n, args, kwargs, waits, _waker(finished, n.id))

    done_handles: dict[str, H] = {}
    cancel = True
    try:
        while True:
            book.sync()
            book.settle()  # skips cascade: settled before anything starts
            gated = book.starts(room, free, start)
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
                if node.expand is not None:
                    _expand(graph, node, res)
            except Exception as e:  # it failed, or its output could not be split
                failed[nid] = e
            else:
                results[nid] = res
            book.ended(nid)
        left = [n for n in graph.nodes if n not in results and n not in failed and n not in skipped]
        if left:  # a dependency on a node that never exists: a bug in the graph, said loudly
            raise NodeFailed(f"graph: nodes {left} wait on inputs that never came")
        cancel = False
    finally:
        graph.stop_growing()
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
