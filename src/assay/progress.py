"""Live progress of long work: counters per unit (stage, label) that stages advance and
watchers read.

The progress printer, the stall detector and the Prefect task run all read this one registry.

A stage opens a unit with :func:`track` and advances it as work is committed (a sample answered,
a row graded, a batch scored). Watchers take :func:`snapshot` or :func:`last_advance` without
touching the workers: advancing is a counter update under one lock, cheap enough per sample.

>>> with track("generate", "demo shard 1/1", total=3) as unit:
...     unit.advance(2)
...     unit.count(retries=1)
...     s = unit.state()
>>> (s.done, s.total, s.counts["retries"])
(2, 3, 1)
>>> any(u.label == "demo shard 1/1" for u in snapshot())
False
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_LOCK = threading.Lock()
_UNITS: dict[int, Unit] = {}
_NEXT = 0
#: monotonic time of the last advance of any unit (or the last unit opened): the stall clock
_LAST = time.monotonic()
_LISTENERS: list[Callable[[UnitState], None]] = []
#: per thread, the units it has open (innermost last): see :func:`current`
_OPEN = threading.local()


@dataclass(frozen=True)
class UnitState:
    """A copy of one unit's counters at one instant."""

    stage: str
    label: str
    done: int
    total: int | None
    counts: dict[str, int]
    started: float  # monotonic
    last: float  # monotonic time of its last advance (or its start)
    finished: bool
    #: what the unit is doing before its counted work (e.g. "loading model rm"), else None
    phase: str | None = None
    #: monotonic time its counted work began (after a loading phase); None: at ``started``
    working_since: float | None = None

    @property
    def rate(self) -> float:
        """Units of work per second since its counted work began (0 before the first)."""
        dt = self.last - (self.started if self.working_since is None else self.working_since)
        return self.done / dt if dt > 0 and self.done else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current rate, or None when unknown."""
        if self.total is None or not self.rate:
            return None
        return max(0.0, (self.total - self.done) / self.rate)


@dataclass
class Unit:
    """One tracked unit of work; advance it as work is committed."""

    stage: str
    label: str
    total: int | None
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    last: float = 0.0
    finished: bool = False
    phase: str | None = None
    working_since: float | None = None

    def advance(self, n: int = 1, **counts: int) -> None:
        """``n`` more pieces of work committed (plus any named counts, e.g. ``errors=1``)."""
        global _LAST
        with _LOCK:
            self.done += n
            for k, v in counts.items():
                self.counts[k] = self.counts.get(k, 0) + v
            self.last = _LAST = time.monotonic()
            state = self._state()
        _notify(state)

    def count(self, **counts: int) -> None:
        """Add to named counts (retries, errors, ...) without advancing: not progress."""
        with _LOCK:
            for k, v in counts.items():
                self.counts[k] = self.counts.get(k, 0) + v

    def set_phase(self, phase: str | None) -> None:
        """Say what the unit does before (or between) its counted work, e.g. ``"loading model
        rm"``; ``None`` ends the phase, and rate and ETA count from then, so a minute of model
        loading does not read as a slow rate. A phase change is activity: it moves the stall
        clock as opening a unit does.

        Example:
            >>> with track("score-rows", "demo", total=2) as unit:
            ...     unit.set_phase("loading model rm")
            ...     loading = unit.state().phase
            ...     unit.set_phase(None)
            ...     s = unit.state()
            >>> loading, s.phase, s.working_since is not None
            ('loading model rm', None, True)
        """
        global _LAST
        with _LOCK:
            now = time.monotonic()
            if phase is None and self.phase is not None:
                self.working_since = now
            self.phase = phase
            _LAST = now
            state = self._state()
        _notify(state)

    def set_total(self, total: int | None) -> None:
        with _LOCK:
            self.total = total

    def state(self) -> UnitState:
        with _LOCK:
            return self._state()

    def _state(self) -> UnitState:
        return UnitState(self.stage, self.label, self.done, self.total, dict(self.counts),
                         self.started, self.last or self.started, self.finished, self.phase,
                         self.working_since)


def _notify(state: UnitState) -> None:
    for fn in list(_LISTENERS):
        try:
            fn(state)
        except Exception:  # a watcher's bug must not fail the work it watches
            pass


@contextmanager
def track(stage: str, label: str, total: int | None = None) -> Iterator[Unit]:
    """Open a unit for the duration of the block; it leaves the registry when the block ends."""
    global _NEXT, _LAST
    unit = Unit(stage, label, total)
    with _LOCK:
        _NEXT += 1
        uid = _NEXT
        _UNITS[uid] = unit
        _LAST = time.monotonic()  # starting a unit is progress: the previous one finished
    stack = _OPEN.__dict__.setdefault("units", [])
    stack.append(unit)
    try:
        yield unit
    finally:
        if stack and stack[-1] is unit:
            stack.pop()
        with _LOCK:
            unit.finished = True
            _UNITS.pop(uid, None)
            _LAST = time.monotonic()
            state = unit._state()
        _notify(state)


def current() -> Unit | None:
    """The innermost unit this thread has open, or None: code deep in a stage (a grading loop,
    a sandbox pool) advances the stage's unit without it being passed down.

    Example:
        >>> with track("grade", "demo", total=1) as unit:
        ...     current() is unit
        True
        >>> current() is None
        True
    """
    stack = getattr(_OPEN, "units", None)
    return stack[-1] if stack else None


def snapshot() -> list[UnitState]:
    """Every open unit's counters, oldest first."""
    with _LOCK:
        return [u._state() for _, u in sorted(_UNITS.items())]


def last_advance() -> float:
    """Monotonic time of the last progress anywhere in this process."""
    with _LOCK:
        return _LAST


def listen(fn: Callable[[UnitState], None]) -> Callable[[], None]:
    """Call ``fn(state)`` on every advance and unit end; returns the function that unsubscribes."""
    with _LOCK:
        _LISTENERS.append(fn)

    def remove() -> None:
        with _LOCK:
            if fn in _LISTENERS:
                _LISTENERS.remove(fn)

    return remove


class Watcher:
    """A watcher of the live units: from :meth:`start` to :meth:`stop` its thread calls
    :meth:`tick` every ``tick_s`` seconds and, when ``listens``, :meth:`on_state` hears every
    advance and unit end. The stop event is the thread's waker and the join is bounded
    (``join_s``); an error in a tick ends the watching, never the work. Subclasses: the
    terminal printer and the Prefect UI publisher.

    >>> class Count(Watcher):
    ...     ticks = 0
    ...     def tick(self) -> None:
    ...         self.ticks += 1
    >>> w = Count(tick_s=3600).start(); w.stop(); w.ticks
    0
    """

    join_s = 5.0

    def __init__(self, tick_s: float, *, listens: bool = True) -> None:
        self.tick_s = tick_s
        self.listens = listens
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unlisten: Callable[[], None] | None = None

    def tick(self) -> None:
        """One look at :func:`snapshot` (what the subclass shows)."""

    def on_state(self, state: UnitState) -> None:
        """Called on every advance and unit end while watching (``listens``)."""

    def call(self, fn: Callable[[], None]) -> None:
        """How the thread runs a tick (a subclass may run it in a saved context)."""
        fn()

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.call(self.tick)
            except Exception:  # noqa: BLE001 - a closed stream or an away server: stop watching
                return

    def start(self) -> Watcher:
        if self.listens:
            self._unlisten = listen(self.on_state)
        self._thread = threading.Thread(target=self._loop, name=f"assay-{type(self).__name__}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._unlisten is not None:
            self._unlisten()
        if self._thread is not None:
            self._thread.join(timeout=self.join_s)


def describe(states: list[UnitState] | None = None) -> str:
    """One line per open unit: what is in flight (for stall and deadline errors)."""
    parts = []
    for s in snapshot() if states is None else states:
        tot = f"/{s.total}" if s.total is not None else ""
        extra = "".join(f", {k} {v}" for k, v in sorted(s.counts.items()) if v)
        doing = f" ({s.phase})" if s.phase else ""  # e.g. stalled while loading a model
        parts.append(f"[{s.stage}] {s.label}: {s.done}{tot} done{extra}{doing}")
    return "; ".join(parts) or "nothing in flight"


__all__ = ["Unit", "UnitState", "Watcher", "track", "current", "snapshot", "last_advance",
           "listen", "describe"]
