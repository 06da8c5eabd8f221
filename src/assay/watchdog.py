"""Run-level bounds: a deadline and a stall detector that stop a run with one error line.

A :class:`Watchdog` thread reads :mod:`assay.progress` and raises :class:`RunStopped` in the
thread that runs the stages; what the store already holds stays, so the rerun resumes.

Example:
    >>> parse_duration("90s"), parse_duration("15m"), parse_duration("1h30m")
    (90.0, 900.0, 5400.0)
    >>> w = Watchdog(deadline_s=None, stall_after_s=60.0)
    >>> w.check(now=w.started + 30.0) is None   # nothing in flight: only a deadline applies
    True
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

from assay import progress
from assay.errors import EXIT_STOPPED, AssayError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")


def parse_duration(text: str | int | float) -> float:
    """Seconds in a duration such as ``90s``, ``15m``, ``6h``, ``2d`` or ``1h30m`` (a bare
    number is seconds). ValueError naming the accepted forms otherwise.

    Example:
        >>> parse_duration("2d"), parse_duration(45)
        (172800.0, 45.0)
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration; write e.g. 90s, 15m, 6h or 1h30m")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        s = str(text).strip().lower()
        parts = _PART.findall(s)
        if not s or _PART.sub("", s).strip() or not parts:
            raise ValueError(f"{text!r} is not a duration; write e.g. 90s, 15m, 6h or 1h30m "
                             "(units s, m, h, d)")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0:
        raise ValueError(f"{text!r}: a duration must be positive")
    return seconds


def format_duration(seconds: float) -> str:
    """Short form of a number of seconds (``5400`` -> ``1h30m``).

    Example:
        >>> format_duration(5400), format_duration(90), format_duration(2.5)
        ('1h30m', '1m30s', '2.5s')
    """
    if seconds < 60:
        return f"{seconds:.3g}s"
    out, rest = "", int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out


class RunStopped(AssayError, RuntimeError):
    """The run was stopped by its deadline or its stall detector (exit EXIT_STOPPED).

    What :func:`guard` raises: an ``Exception``, so Prefect records the flow run as Failed
    with this message. ``reason`` is ``"deadline"`` or ``"stall"``; ``in_flight`` is
    :func:`assay.progress.describe` at the moment of the stop."""

    def __init__(self, message: str, reason: str = "", in_flight: str = "",
                 where: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.in_flight = in_flight
        #: the stage that stopped progressing, as errors name it (``grade (m)``): the unit that
        #: has waited longest; the graph runs nodes on other threads, so no stage call is on
        #: the stack of the thread the stop is raised in
        self.where = where


class StopRun(KeyboardInterrupt):
    """Raised *inside* the guarded block to unwind it as Ctrl-C does: no ``except Exception``
    turns it into error verdicts, no half-computed stage is committed, and sandboxes are
    aborted rather than waited for. :func:`guard` turns it into :class:`RunStopped`."""

    #: the stop in progress (an exception raised into another thread is built without
    #: arguments: see :meth:`Watchdog._interrupt`)
    pending: RunStopped | None = None


#: Signal the watchdog sends the main thread so that a blocking wait (a pipe, a socket, a
#: lock) returns at once and the handler raises there. SIGUSR2: nothing else here uses it
#: (Prefect's task timeouts use SIGALRM).
STOP_SIGNAL = signal.SIGUSR2


class Watchdog:
    """A thread that stops the run past ``deadline_s`` or when no progress unit has advanced
    for ``stall_after_s`` while one is open (no sample answered, no row graded, no batch
    scored). Between units (a stage that reports no progress: build-rows, measure) only the
    deadline applies.

    The stop is raised as :class:`RunStopped` in the thread that started the watchdog. If that
    thread has not left the guarded block ``grace_s`` later (stuck in C code that ignores
    signals), ``hard_exit`` runs: by default the one error line, then ``os._exit(EXIT_STOPPED)``;
    every child process dies with us (see :mod:`assay.reaper`).
    """

    def __init__(self, deadline_s: float | None, stall_after_s: float | None, *,
                 tick_s: float | None = None, grace_s: float = 30.0,
                 hard_exit: Callable[[RunStopped], None] | None = None) -> None:
        self.deadline_s = deadline_s
        self.stall_after_s = stall_after_s
        bounds = [b for b in (deadline_s, stall_after_s) if b]
        self.tick_s = tick_s or max(0.05, min([1.0, *(b / 20 for b in bounds)]))
        self.grace_s = grace_s
        self.hard_exit = hard_exit or _hard_exit
        self.started = time.monotonic()
        self.stopped: RunStopped | None = None
        self._done = threading.Event()
        self._target = threading.get_ident()
        self._thread: threading.Thread | None = None

    def check(self, now: float | None = None) -> RunStopped | None:
        """The stop due at ``now`` (monotonic), or None: a pure read of the progress registry."""
        now = time.monotonic() if now is None else now
        states = progress.snapshot()
        in_flight = progress.describe(states)
        oldest = min(states, key=lambda u: u.last) if states else None
        where = (f"{oldest.stage} ({oldest.label.split(' shard ')[0]})" if oldest is not None
                 else None)
        if self.deadline_s and now - self.started > self.deadline_s:
            msg = (f"stopped by execution.deadline ({format_duration(self.deadline_s)}) after "
                   f"{format_duration(now - self.started)}; in flight: {in_flight}")
            return RunStopped(msg, "deadline", in_flight, where)
        if self.stall_after_s and states:
            idle = now - progress.last_advance()
            if idle > self.stall_after_s:
                msg = (f"stopped by execution.stall_after ({format_duration(self.stall_after_s)}):"
                       f" no progress for {format_duration(idle)}; in flight: {in_flight}")
                return RunStopped(msg, "stall", in_flight, where)
        return None

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self._loop, name="assay-watchdog", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop watching (the guarded block ended); joins the thread (bounded: it wakes on the
        event at once)."""
        self._done.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._done.wait(self.tick_s):
            stop = self.check()
            if stop is None:
                continue
            self.stopped = stop
            # the work in flight on every thread stops now (requests, grading, sandboxes),
            # not when the guarded thread gets to unwind (assay.stop says why one mechanism)
            from assay import stop as stops

            # recorded before the trigger: a node's cancellation can reach the main thread
            # first, and the line it prints still names the stage (``stopped_where``)
            StopRun.pending = stop
            stops.trigger(str(stop))
            self._interrupt(stop)
            # the guarded thread unwinds (its finally blocks stop workers and sandboxes); if it
            # is stuck where no signal reaches, leave anyway: a run always ends
            if not self._done.wait(self.grace_s):
                self.hard_exit(stop)
            return

    def _interrupt(self, stop: RunStopped) -> None:
        """Raise :class:`StopRun` in the guarded thread."""
        StopRun.pending = stop
        if self._target == threading.main_thread().ident and _HANDLER_OWNER.get("watchdog"):
            signal.pthread_kill(self._target, STOP_SIGNAL)  # wakes a blocking wait there
            return
        # another thread: raise at its next bytecode (a blocking call returns first)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._target),
                                                   ctypes.py_object(StopRun))


#: which watchdog installed the STOP_SIGNAL handler (the innermost guard in the main thread)
_HANDLER_OWNER: dict[str, Watchdog] = {}


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    w = _HANDLER_OWNER.get("watchdog")
    if w is not None and w.stopped is not None and not w._done.is_set():
        raise StopRun(str(w.stopped))


def _hard_exit(stop: RunStopped) -> None:
    from assay import reaper

    print(f"error: {stop} (the stage did not stop within the grace period; exiting)",
          file=sys.stderr, flush=True)
    reaper.kill_descendants()
    os._exit(EXIT_STOPPED)


def stopped_where(reason: str) -> str | None:
    """The stage a watchdog stop named (``grade (m)``) when ``reason`` is that stop's message
    (as :func:`assay.stop.trigger` recorded it), else None."""
    pending = StopRun.pending
    if pending is not None and str(pending) == reason:
        return pending.where
    return None


@contextlib.contextmanager
def guard(deadline: str | float | None = None, stall_after: str | float | None = None, *,
          grace_s: float = 30.0,
          hard_exit: Callable[[RunStopped], None] | None = None) -> Iterator[Watchdog | None]:
    """Watch the block with a deadline and a stall detector (durations as in
    :func:`parse_duration`; None: that bound is off). Yields the watchdog, or None when both
    are off. :class:`RunStopped` is raised inside the block when a bound is passed.

    Example:
        >>> import time
        >>> try:
        ...     with guard(stall_after="0.2s"):
        ...         with progress.track("grade", "demo shard 1/1", total=2):
        ...             time.sleep(60)  # a wait that never ends by itself
        ... except RunStopped as e:
        ...     stop = e
        >>> stop.reason, "[grade] demo shard 1/1: 0/2 done" in str(stop)
        ('stall', True)
    """
    from assay import stop as stops

    with stops.run():  # a new guarded run: a stop left by an earlier, finished one is over
        with _guard(deadline, stall_after, grace_s=grace_s, hard_exit=hard_exit) as w:
            yield w


@contextlib.contextmanager
def _guard(deadline: str | float | None, stall_after: str | float | None, *, grace_s: float,
           hard_exit: Callable[[RunStopped], None] | None) -> Iterator[Watchdog | None]:
    d = parse_duration(deadline) if deadline is not None else None
    s = parse_duration(stall_after) if stall_after is not None else None
    if d is None and s is None:
        yield None
        return
    w = Watchdog(d, s, grace_s=grace_s, hard_exit=hard_exit)
    in_main = threading.current_thread() is threading.main_thread()
    previous: Callable[[int, FrameType | None], object] | int | signal.Handlers | None = None

    outer = _HANDLER_OWNER.get("watchdog")
    if in_main:
        previous = signal.signal(STOP_SIGNAL, _raise_stop)
        _HANDLER_OWNER["watchdog"] = w
    w.start()
    try:
        yield w
    except StopRun as e:
        stop = w.stopped or StopRun.pending
        if stop is None:  # not ours: a StopRun of an outer guard
            raise
        err = RunStopped(str(stop), stop.reason, stop.in_flight, stop.where)
        # set on the way out of a stage run in this thread; else the unit that stalled
        stage = getattr(e, "assay_stage", None) or stop.where
        if stage:
            err.assay_stage = stage  # type: ignore[attr-defined]  # a tag read back by getattr
        raise err from None
    finally:
        w.close()
        if in_main:
            signal.signal(STOP_SIGNAL, previous)
            if outer is None:
                _HANDLER_OWNER.pop("watchdog", None)
            else:
                _HANDLER_OWNER["watchdog"] = outer


__all__ = ["RunStopped", "StopRun", "Watchdog", "guard", "parse_duration", "format_duration",
           "STOP_SIGNAL"]
