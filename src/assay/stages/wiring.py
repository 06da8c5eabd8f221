"""The study as a graph of stage nodes, derived from the stage declarations (:data:`STAGES`) and
the mode table (:data:`~assay.stages.modes.MODES`): no stage or mode is named here.

Per source: its ``source`` stages (build-rows -> filter-rows), then, once its filtered rows
exist, per shard its mode's stages and the ``shard`` stages that apply to it (score-rows);
then the ``study`` stages, each after what it reads. Every node calls its stage function with
the same inputs whatever runs it, so results and cache keys never depend on the runner.

Example:
    >>> from assay.spec import parse_spec
    >>> spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
    ...                   "fields: {prompt: q, completion: c, reward: r}}]}")
    >>> sorted(study_graph(spec, None, progress=None).nodes)
    ['build-rows[a]', 'filter-rows[a]', 'measure', 'report']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from assay.stages.cache import StageResult, cut_rows, print_progress
from assay.stages.declare import STAGES, Progress, RunContext, Shard, Stage
from assay.stages.graph import GROUP, Graph, Node
from assay.stages.modes import ModeRow, row_of
from assay.stages.seams import Args, Get, NodeCall

if TYPE_CHECKING:
    from assay.spec import StudySpec
    from assay.store import Store

#: How a study stage reads one of its inputs (``_add_study``): each source's group by source
#: name, every node of an ``each`` stage, or the one node of a stage (None: not planned).
Input = (tuple[Literal["by_source"], list[tuple[str, str]]] | tuple[Literal["all"], list[str]]
         | tuple[Literal["one"], str | None])


def in_order(stages: Iterable[Stage]) -> list[Stage]:
    """``stages`` so that each comes after the ones it reads (ties by their declared ``order``,
    then name): the order their results are listed in, and the order of the shard stages that
    follow a mode's."""
    todo = {s.name: s for s in stages}
    out: list[Stage] = []
    while todo:
        ready = sorted((n for n, s in todo.items() if not any(r in todo for r in s.reads)),
                       key=lambda n: (todo[n].order, n))
        if not ready:
            raise ValueError(f"stages read each other in a cycle: {sorted(todo)}")
        out += [todo.pop(n) for n in ready[:1]]
    return out


def _call(*args: object) -> Args:
    return lambda get: (args, {})


def study_graph(spec: StudySpec, store: Store | None, *,
                progress: Progress | None = print_progress,
                workers: int | None = None) -> Graph:
    """The study's nodes (shards are added when a source's filtered rows exist)."""
    # a listing needs no store (the shards are cut only when the graph runs)
    ctx = RunContext(store, spec, progress, workers)  # type: ignore[arg-type]
    g = Graph(state=ctx.state)  # the run's live state: where its nodes find the run's grader
    by_scope = {scope: in_order(s for s in STAGES.values() if s.scope == scope)
                for scope in ("source", "shard", "study")}
    for si, src in enumerate(spec.sources):
        _add_source(g, ctx.on(src.name), si, by_scope["source"], by_scope["shard"])
    _add_study(g, ctx, by_scope["study"])
    return g


def _add_source(g: Graph, ctx: RunContext, si: int, source_stages: Sequence[Stage],
                shard_stages: Sequence[Stage]) -> None:
    """A source's ``source`` nodes, the last of which cuts its rows into shards."""
    spec, name = ctx.spec, ctx.source
    row = row_of(spec.source(name).mode)
    mode = [STAGES[n] for n in row.stages]
    after = [s for s in shard_stages if s not in mode and s.applies is not None
             and s.applies(spec, name)]
    last = f"{source_stages[-1].name}[{name}]"
    graded = g.group(f"graded:{name}", sealed_by=last)[len(GROUP):]
    final = g.group(f"final:{name}", sealed_by=last)[len(GROUP):]
    for step, st in enumerate(source_stages):
        nid = f"{st.name}[{name}]"
        deps = tuple(f"{r}[{name}]" for r in st.reads)
        is_last = nid == last
        g.add(Node(nid, st.name, _source_args(ctx, deps), st.fn, deps=deps,
                   resources=st.slots(spec, name), order=(0, si, step), label=name,
                   scope="source",
                   expand=_shards(ctx, si, len(source_stages), row, mode, after)
                   if is_last else None,
                   groups=((graded,) if is_last and not mode else ())
                   + ((final,) if is_last and not mode and not after else ())))


def _source_args(ctx: RunContext, deps: tuple[str, ...]) -> Args:
    return lambda get: ((ctx, *(get(d) for d in deps)), {})


def _shards(ctx: RunContext, si: int, step0: int, row: ModeRow, mode: Sequence[Stage],
            after: Sequence[Stage]) -> Callable[[StageResult], list[Node]]:
    """A source's shard nodes, made once its filtered rows exist: its mode's stages, then the
    ones that apply to it, each on the previous one's output of the same shard; the rows cut
    as the mode's row says."""
    spec, name = ctx.spec, ctx.source
    chain = [*mode, *after]

    def expand(filtered: StageResult) -> list[Node]:
        if not chain:
            return []
        sums: Sequence[str | None]  # each shard's content checksum, when the cut knows it
        if row.cut is not None:  # as many rows as the first stage says (a generate shard:
            # prompts for ~shard_rows completions)
            per = chain[0].rows_per_shard
            cuts, sums = cut_rows(ctx.store, filtered, row.cut,
                                  per(spec, name) if per else spec.execution.shard_rows)
            labels = [Shard(i, len(cuts), b).label(name) for i, b in enumerate(cuts)]
        else:  # the given rows, whole
            cuts, labels = [(0, int(filtered.summary["rows"]))], [name]
            sums = [None]
        n = len(cuts)
        nodes: list[Node] = []
        for i, (bounds, label) in enumerate(zip(cuts, labels)):
            prev: str | None = None
            for j, st in enumerate(chain):
                nid = f"{st.name}[{label}]"
                groups = ((f"graded:{name}",) if j == len(mode) - 1 else ()) + (
                    (f"final:{name}",) if j == len(chain) - 1 else ())
                nodes.append(Node(
                    nid, st.name,
                    _call(ctx, filtered, Shard(i, n, bounds, sums[i])) if prev is None
                    else _after(ctx, prev, i, n), st.fn,
                    deps=() if prev is None else (prev,), resources=st.slots(spec, name),
                    order=(0, si, step0 + j, i), label=label, groups=groups, scope="shard",
                    asks_model=st.asks_model))
                prev = nid
        return nodes

    return expand


def _after(ctx: RunContext, prev: str, i: int, n: int) -> Args:
    """A later shard stage's call: the whole output of the shard's previous stage."""
    def args(get: Get) -> NodeCall:
        rows = get(prev)
        assert isinstance(rows, StageResult)  # a node's id: one result, never a group's
        return (ctx, rows, Shard(i, n, (0, int(rows.summary["rows"])))), {}
    return args


def _add_study(g: Graph, ctx: RunContext, study_stages: Sequence[Stage]) -> None:
    """The ``study`` nodes, each after what it reads (``rows``: every source's final rows;
    ``graded``: the graded rows of the sources it checks; a stage: its node(s))."""
    spec = ctx.spec
    names = [s.name for s in spec.sources]
    planned: dict[str, list[str]] = {}  # stage -> its node ids
    for k, st in enumerate(study_stages):
        if st.when is not None and not st.when(spec):
            continue
        items: Sequence[str | None] = list(st.each(spec)) if st.each is not None else [None]
        planned[st.name] = []
        checked = list(st.sources(spec)) if st.sources is not None else names
        inputs: list[Input] = []  # (how, what): how one input is read
        deps: list[str] = []
        for r in st.reads:
            if r == "rows":
                inputs.append(("by_source", [(n, f"{GROUP}final:{n}") for n in names]))
                deps += [f"{GROUP}final:{n}" for n in names]
            elif r == "graded":
                inputs.append(("by_source", [(n, f"{GROUP}graded:{n}") for n in checked]))
                deps += [f"{GROUP}graded:{n}" for n in checked]
            elif STAGES[r].each is not None:
                inputs.append(("all", planned.get(r, [])))
                deps += planned.get(r, [])
            else:
                ids = planned.get(r, [])
                inputs.append(("one", ids[0] if ids else None))
                deps += ids
        reads_rows = {"rows", "graded"} & set(st.reads)
        label = ",".join(checked) if reads_rows and len(st.reads) == 1 else spec.name
        for ii, item in enumerate(items):
            nid = st.name if item is None else f"{st.name}[{item}]"
            planned[st.name].append(nid)
            g.add(Node(nid, st.name, _study_args(ctx, item, inputs), st.fn, deps=tuple(deps),
                       resources=st.slots(spec, item or ""), order=(1, k, ii),
                       label=label if item is None else item, scope="study"))


def _study_args(ctx: RunContext, item: str | None, inputs: list[Input]) -> Args:
    def value(get: Get, what: Input) -> object:
        if what[0] == "by_source":
            return {n: get(d) for n, d in what[1]}
        if what[0] == "all":
            return tuple(get(d) for d in what[1])
        return None if what[1] is None else get(what[1])

    def args(get: Get) -> NodeCall:
        head: tuple[object, ...] = (ctx,) if item is None else (ctx, item)
        return (*head, *(value(get, what) for what in inputs)), {}
    return args
