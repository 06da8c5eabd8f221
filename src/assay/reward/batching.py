"""Batch planning for reward scoring: length-sorted batches filled up to a padded-token budget.

Pure numpy (no torch), so the plan is testable on its own and shared by every model adapter.

Why: a transformer forward costs roughly ``batch size x longest sequence`` (padding included).
Sorting by length makes the sequences of a batch about equally long, so little compute goes to
padding, and a token budget (instead of a fixed batch size) lets short sequences travel in big
batches and long ones in small batches, so memory use stays flat.

Each scored batch is told to this context's listener (:func:`on_batches`): progress bars move
per batch, the scoring worker relays them to its caller.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from assay.errors import MeasureError

#: Who hears each scored batch of this context: ``fn(done, total)``, items of one scoring pass.
_ON_BATCH: contextvars.ContextVar[Callable[[int, int], None] | None] = contextvars.ContextVar(
    "assay_on_batch", default=None)


@contextlib.contextmanager
def on_batches(fn: Callable[[int, int], None]) -> Iterator[None]:
    """Call ``fn(done, total)`` after every batch a reward model scores in this block (this
    thread or task): ``done`` of ``total`` items of its scoring pass. Progress reads it, so a
    shard's bar moves per batch instead of once at the shard's end.

    Example:
        >>> seen = []
        >>> with on_batches(lambda d, t: seen.append((d, t))):
        ...     _ = run_plan([2, 5, 3], 8, lambda idx: idx * 1.0)
        >>> seen
        [(1, 3), (3, 3)]
    """
    token = _ON_BATCH.set(fn)
    try:
        yield
    finally:
        _ON_BATCH.reset(token)


def batch_scored(done: int, total: int) -> None:
    """Tell this context's listener (:func:`on_batches`) that ``done`` of ``total`` items are
    scored; a listener's error never fails the scoring it watches."""
    fn = _ON_BATCH.get()
    if fn is not None:
        with contextlib.suppress(Exception):
            fn(done, total)


class Advances(Protocol):
    """A progress unit as :class:`RowAdvance` moves it (:class:`assay.progress.Unit`, a test's
    counter)."""

    def advance(self, n: int) -> None: ...


class RowAdvance:
    """Maps a scoring pass's batches onto ``rows`` rows of a progress ``unit`` (anything with
    ``advance(n)``): after ``done`` of ``total`` items, ``rows * done // total`` rows are
    advanced (items can be fewer than rows: duplicates are scored once). :meth:`finish` adds
    what is left, so the unit ends at exactly ``rows`` however the model batched.

    Example:
        >>> class U:
        ...     done = 0
        ...     def advance(self, n: int) -> None: self.done += n
        >>> u = U(); a = RowAdvance(u, 10)
        >>> a(1, 4); u.done
        2
        >>> a(4, 4); a.finish(); u.done
        10
    """

    def __init__(self, unit: Advances, rows: int) -> None:
        self.unit, self.rows, self.advanced = unit, int(rows), 0

    def __call__(self, done: int, total: int) -> None:
        target = min(self.rows, self.rows * done // total) if total > 0 else 0
        if target > self.advanced:
            self.unit.advance(target - self.advanced)
            self.advanced = target

    def finish(self) -> None:
        if self.rows > self.advanced:
            self.unit.advance(self.rows - self.advanced)
            self.advanced = self.rows


def plan_batches(lengths: Sequence[int] | np.ndarray, batch_tokens: int,
                 max_batch: int | None = None) -> list[np.ndarray]:
    """Split item indices into length-sorted batches whose padded size fits ``batch_tokens``.

    Items are sorted by length (longest first, so an out-of-memory error shows up on the first
    batch instead of the last; ties keep input order, so the plan is deterministic). A batch
    grows while ``len(batch) * longest <= batch_tokens`` (and ``len(batch) <= max_batch``); an
    item longer than the budget travels alone.

    Example:
        >>> [b.tolist() for b in plan_batches([3, 10, 4, 9], batch_tokens=20)]
        [[1, 3], [2, 0]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1:
        raise MeasureError(f"lengths must be one-dimensional, got shape {lengths.shape}")
    if np.any(lengths < 0):
        raise MeasureError(f"lengths must be >= 0; item {int(np.argmin(lengths))} is negative")
    if not isinstance(batch_tokens, (int, np.integer)) or batch_tokens < 1:
        raise MeasureError(f"batch_tokens must be a positive integer, got {batch_tokens!r}")
    if max_batch is not None and max_batch < 1:
        raise MeasureError(f"max_batch must be a positive integer or None, got {max_batch!r}")
    order = np.argsort(-lengths, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        longest = max(int(lengths[order[start]]), 1)
        size = max(1, batch_tokens // longest)  # sorted descending: the first item is the longest
        if max_batch is not None:
            size = min(size, max_batch)
        batches.append(order[start:start + size])
        start += size
    return batches


def fixed_batches(n: int, batch_size: int) -> list[np.ndarray]:
    """Input-order batches of ``batch_size`` (the naive loop the benchmark compares against).

    Example:
        >>> [b.tolist() for b in fixed_batches(5, 2)]
        [[0, 1], [2, 3], [4]]
    """
    if batch_size < 1:
        raise MeasureError(f"batch_size must be a positive integer, got {batch_size!r}")
    idx = np.arange(n)
    return [idx[i:i + batch_size] for i in range(0, n, batch_size)]


def padded_tokens(lengths: Sequence[int] | np.ndarray, batches: Sequence[np.ndarray]) -> int:
    """Total tokens a plan feeds the model, padding included (``sum(len(b) * longest(b))``).

    Example:
        >>> padded_tokens([3, 10, 4, 9], [[0, 1], [2, 3]])
        38
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    return int(sum(len(b) * int(lengths[np.asarray(b)].max()) for b in batches if len(b)))


def is_out_of_memory(exc: BaseException) -> bool:
    """True for an accelerator out-of-memory error (torch's OutOfMemoryError or its message),
    checked by name so this module needs no torch import."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


@dataclass
class PlanRun:
    """Counters of one :func:`run_plan` call."""

    n_batches: int = 0
    n_padded_tokens: int = 0
    oom_backoffs: int = 0
    final_batch_tokens: int = 0
    largest_batch: int = 0


def run_plan(lengths: Sequence[int] | np.ndarray, batch_tokens: int,
             forward: Callable[[np.ndarray], np.ndarray],
             *, max_batch: int | None = None, on_oom: Callable[[], None] | None = None,
             ) -> tuple[np.ndarray, PlanRun]:
    """Score items in length-sorted token-budget batches, halving the budget on out-of-memory.

    ``forward(indices)`` returns one float per index. On an OOM error the failed batch's items
    go back to the queue, ``on_oom`` runs (e.g. ``torch.cuda.empty_cache``) and the budget halves
    for the rest of the run; a single item that still does not fit re-raises the error.

    Example:
        >>> out, run = run_plan([2, 5, 3], 8, lambda idx: idx * 10.0)
        >>> out.tolist(), run.n_batches
        ([0.0, 10.0, 20.0], 2)
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.full(len(lengths), np.nan)
    run = PlanRun(final_batch_tokens=batch_tokens)
    order = np.argsort(-lengths, kind="stable")
    start, n, budget = 0, len(order), batch_tokens
    while start < n:
        longest = max(int(lengths[order[start]]), 1)
        size = max(1, budget // longest)
        if max_batch is not None:
            size = min(size, max_batch)
        idx = order[start:start + size]
        try:
            vals = np.asarray(forward(idx), dtype=np.float64).reshape(-1)
        except Exception as exc:  # noqa: BLE001 - only OOM is handled, everything else re-raises
            if not is_out_of_memory(exc) or len(idx) == 1:
                raise
            run.oom_backoffs += 1
            if on_oom is not None:
                on_oom()
            budget = max(1, min(budget, len(idx) * longest) // 2)
            run.final_batch_tokens = budget
            continue
        if vals.shape[0] != len(idx):
            raise MeasureError(f"forward returned {vals.shape[0]} scores for a batch of {len(idx)}")
        out[idx] = vals
        batch_scored(start + len(idx), n)
        run.n_batches += 1
        run.largest_batch = max(run.largest_batch, len(idx))
        run.n_padded_tokens += len(idx) * longest
        start += len(idx)
    return out, run
