"""The mode table: per source mode, everything the mode decides (its per-shard stages, by
name; how its rows are cut into shards; the measures that read its sources by default; which
model it needs).

The study graph, the measure and report stages and the spec's checks read a source's row here
instead of comparing its mode with a string, so adding a source mode is its row
(:func:`declare_mode`) plus its stages. A mode's stages run shard by shard, each on the previous
one's output (the first on the source's filtered rows, cut by ``cut``); a mode with no stages
keeps the filtered rows whole (``scores``: given verdicts). The stage functions themselves are
looked up by name in :mod:`assay.stages.modes`; this table is core (the spec reads it).

Example:
    >>> MODES["generate"].stages, MODES["scores"].stages, MODES["choices"].model
    (('generate', 'grade'), (), 'scorer')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from assay.rows import Rows
    from assay.sources.base import SourceSpec


def shard_bounds(rows: Rows, shard_rows: int) -> list[tuple[int, int]]:
    """Row ranges of shards of about ``shard_rows`` rows that never split a task (rows of a task
    are contiguous after build-rows): how a sharded mode cuts a source's rows
    (:data:`MODES`). Shards are the resume unit.

    Example:
        >>> import assay
        >>> r = assay.rows(["a", "b", "c"], [["x", "y"], ["z", "w"], ["v"]], [[1, 0], [1, 1], [0]])
        >>> shard_bounds(r, 3)
        [(0, 4), (4, 5)]
    """
    import pyarrow.compute as pc

    ids = rows.to_arrow().column("task_id")
    n = len(ids)
    if n == 0:
        return []
    # where a task starts, found in Arrow: a Python string per row (400k of them) would stay
    # in the process's heap after the cut (issue 50)
    starts = pc.not_equal(ids.slice(1), ids.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    bounds, start = [], 0
    for i in (starts.nonzero()[0] + 1).tolist():
        if i - start >= shard_rows:
            bounds.append((start, i))
            start = i
    bounds.append((start, n))
    return bounds


#: Which model a mode's stages need: the model under test asked for completions
#: (``generate``: ``generate.model``), a model scoring the records' log-likelihoods
#: (``scorer``: the source's ``scoring_model``), or none.
ModelSlot = Literal["generate", "scorer"] | None

#: ``cut(rows, rows_per_shard)``: the (start, stop) row ranges of a source's shards.
Cut = Callable[["Rows", int], list[tuple[int, int]]]


class HasSources(Protocol):
    """What :func:`default_sources` reads of a spec (a :class:`~assay.spec.StudySpec`: the
    spec asks this table, so the table does not import the spec)."""

    @property
    def sources(self) -> Sequence[SourceSpec]: ...


@dataclass(frozen=True)
class ModeRow:
    """One mode's row. ``stages``: the names of its per-shard stages, in the order they run on
    a shard. ``cut``: how its filtered rows are cut into shards (None: whole, one unsharded
    node per following stage); the first stage's ``rows_per_shard`` says how many rows.
    ``measures``: the measures (and the lm-eval metric sets) whose entries without
    ``sources:`` read this mode's sources; a measure no row lists reads every source.
    ``model``: the model its stages need (:data:`ModelSlot`). ``group_mean``: whether a mean
    of its tasks' scores is a score (not for perplexity: a corpus-level ratio)."""

    stages: tuple[str, ...]
    cut: Cut | None = shard_bounds
    measures: tuple[str, ...] = ()
    model: ModelSlot = None
    group_mean: bool = True


#: mode -> its row. ``lm_eval_metrics`` / ``lm_eval_mc_metrics``: every metric lm-eval reports,
#: for a ``kind: lm_eval`` source's generate_until / multiple_choice task.
MODES: dict[str, ModeRow] = {
    "scores": ModeRow((), cut=None),
    "verify": ModeRow(("grade",)),
    "generate": ModeRow(("generate", "grade"), measures=("lm_eval_metrics",), model="generate"),
    "choices": ModeRow(("score-choices",), measures=("choice_accuracy", "lm_eval_mc_metrics"),
                       model="scorer"),
    "perplexity": ModeRow(("score-documents",), measures=("perplexity",), model="scorer",
                          group_mean=False),
}


def declare_mode(mode: str, row: ModeRow) -> ModeRow:
    """Add source mode ``mode`` (a source kind whose ``mode`` says it; its stages declared
    with :func:`~assay.stages.declare.declare`)."""
    MODES[mode] = row
    return row


def row_of(mode: str) -> ModeRow:
    """``mode``'s row; an unknown mode names the table (a kind whose mode has no row)."""
    try:
        return MODES[mode]
    except KeyError:
        raise ValueError(f"source mode {mode!r} has no row in the mode table "
                         f"(assay.modes.MODES: {sorted(MODES)}); declare_mode it") from None


def default_sources(spec: HasSources, measure: str) -> list[str]:
    """The sources an entry of ``measure`` without ``sources:`` reads: those whose mode lists
    it, or every source when no mode does.

    Example:
        >>> from assay.spec import parse_spec
        >>> spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
        ...                   "fields: {prompt: q, completion: c, reward: r}}]}")
        >>> default_sources(spec, "pass_at"), default_sources(spec, "perplexity")
        (['a'], [])
    """
    if not any(measure in r.measures for r in MODES.values()):
        return [s.name for s in spec.sources]
    return [s.name for s in spec.sources if measure in row_of(s.mode).measures]


def needs_model(source: SourceSpec, slot: Literal["generate", "scorer"]) -> bool:
    """Whether ``source``'s mode needs a model of ``slot`` (:attr:`ModeRow.model`)."""
    return row_of(source.mode).model == slot


__all__ = ["MODES", "ModeRow", "ModelSlot", "declare_mode", "default_sources",
           "needs_model", "row_of", "shard_bounds"]
