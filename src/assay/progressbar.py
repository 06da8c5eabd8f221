"""Progress of long work on the terminal: a bar on a TTY, a line every few seconds otherwise.

A :class:`Printer` thread reads :mod:`assay.progress`; short stages (under ``every_s``) print
nothing, so a cached rerun's output is unchanged.

Example:
    >>> from assay.progress import UnitState
    >>> s = UnitState("grade", "m shard 1/2", 120, 240, {"retries": 3}, 0.0, 10.0, False)
    >>> format_state(s, now=10.0)
    '[grade] m shard 1/2: 120/240 (50%), 12/s, retries 3, errors 0, ETA 10s'
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, TypedDict, Unpack

from assay import progress, stop
from assay.progress import UnitState
from assay.watchdog import format_duration


def format_state(s: UnitState, now: float | None = None) -> str:
    """One line: done/total (percent), rate, retries, errors, ETA; rate and ETA over the time
    since the unit started (``now``: monotonic, default the present).

    Example:
        >>> format_state(UnitState("decontaminate", "a", 0, None, {}, 0.0, 0.0, False), now=4.0)
        '[decontaminate] a: 0 done, 0/s, retries 0, errors 0, ETA ?'
        >>> format_state(UnitState("score-rows", "m", 0, 364, {}, 0.0, 0.0, False,
        ...                        "loading model rm"), now=42.0)
        '[score-rows] m: loading model rm (42s), 0/364'
    """
    now = time.monotonic() if now is None else now
    if s.phase is not None:  # loading a model: no rate or ETA to tell yet, say what it does
        done = f"{s.done}/{s.total}" if s.total is not None else f"{s.done} done"
        return (f"[{s.stage}] {s.label}: {s.phase} ({format_duration(max(0.0, now - s.started))})"
                f", {done}")
    # rate and ETA over the counted work only, not the loading phase before it
    dt = now - (s.started if s.working_since is None else s.working_since)
    rate = s.done / dt if dt > 0 else 0.0
    if s.total is not None:
        pct = f" ({100 * s.done / s.total:.0f}%)" if s.total else ""
        done = f"{s.done}/{s.total}{pct}"
        eta = (format_duration(max(1.0, (s.total - s.done) / rate)) if rate and s.done < s.total
               else "0s" if s.done >= s.total else "?")
    else:
        done, eta = f"{s.done} done", "?"
    shown = f"{rate:.3g}" if rate < 100 else f"{rate:,.0f}"
    c = s.counts
    extra = "".join(f", {k} {v}" for k, v in sorted(c.items()) if k not in ("retries", "errors"))
    return (f"[{s.stage}] {s.label}: {done}, {shown}/s, retries {c.get('retries', 0)}, "
            f"errors {c.get('errors', 0)}{extra}, ETA {eta}")


def _bar(s: UnitState, width: int = 20) -> str:
    if not s.total:
        return ""
    filled = min(width, int(width * s.done / s.total))
    return "[" + "#" * filled + "." * (width - filled) + "] "


class PrinterOptions(TypedDict, total=False):
    """The keyword options of :class:`Printer` (what :func:`printing` passes on)."""

    every_s: float
    tty: bool | None
    tty_every_s: float


class Printer(progress.Watcher):
    """Prints the open units that have run longer than ``every_s``: on a TTY one bar line
    rewritten in place (``tty_every_s``), else one line per unit every ``every_s``. Stops by
    its event (bounded join); a watcher's error never reaches the work."""

    def __init__(self, stream: IO[str] | None = None, *, every_s: float = 5.0,
                 tty: bool | None = None, tty_every_s: float = 0.5) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.every_s = every_s
        # on a TTY it hears unit ends, to clear its bar before the stage's own done line
        super().__init__(tty_every_s if self.tty else every_s, listens=self.tty)
        self._shown = False  # a bar is on the terminal's last line
        self._lock = threading.Lock()

    def lines(self, now: float | None = None) -> list[str]:
        """What one tick prints (without bars): the units open at least ``every_s``."""
        now = time.monotonic() if now is None else now
        return [format_state(s, now) for s in progress.snapshot()
                if now - s.started >= self.every_s]

    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        states = [s for s in progress.snapshot() if now - s.started >= self.every_s]
        if not states or stop.stopped() is not None:  # a stopped run's units only wind down
            return
        with self._lock:
            if self.tty:
                text = " | ".join(_bar(s) + format_state(s, now) for s in states)
                self.stream.write("\r\x1b[K" + text)
                self._shown = True
            else:
                self.stream.write("".join(format_state(s, now) + "\n" for s in states))
            self.stream.flush()

    def on_state(self, state: UnitState) -> None:
        if state.finished and self._shown:  # the stage's own done line comes next
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._shown = False

    def start(self) -> Printer:
        super().start()
        return self

    def stop(self) -> None:
        super().stop()
        if self._shown:
            with contextlib.suppress(Exception):
                self.stream.write("\r\x1b[K")
                self.stream.flush()


@contextlib.contextmanager
def printing(stream: IO[str] | None = None, **kwargs: Unpack[PrinterOptions]) -> Iterator[Printer]:
    """A :class:`Printer` running while the block runs (``kwargs``: the Printer's)."""
    p = Printer(stream, **kwargs).start()
    try:
        yield p
    finally:
        p.stop()


__all__ = ["Printer", "format_state", "printing"]
