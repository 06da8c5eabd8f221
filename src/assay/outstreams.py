"""Terminal output that cannot end a study: once stdout or stderr can no longer be written (its
reader closed the pipe, a killed Prefect worker, a full non-blocking terminal), lines are dropped.

Why: a progress line is worth less than the study printing it. A plain ``print`` to a closed
pipe raises BrokenPipeError in whichever stage printed, and rich (Prefect's console log
handler) turns it into ``SystemExit(1)``: a night failed because nobody was reading.
:func:`guard_output` wraps ``sys.stdout``/``sys.stderr`` and points the logging handlers (and
rich consoles) that wrote to them at the wrappers; the run's log file keeps every record.

Example:
    >>> import io
    >>> class Closed(io.StringIO):
    ...     def write(self, s):
    ...         raise BrokenPipeError(32, "Broken pipe")
    >>> out = Tolerant(Closed(), "stdout")
    >>> out.write("progress\\n"), out.dead, out.dropped
    (9, True, 1)
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from collections.abc import Iterable
from typing import IO, Any

__all__ = ["Tolerant", "guard_output"]

#: errno values that mean the stream is gone for good (not merely full right now).
_GONE = {errno.EPIPE, errno.EBADF, errno.EIO, errno.ECONNRESET, errno.ENXIO}

_LOCK = threading.Lock()


class Tolerant:
    """A text stream that forwards to ``stream`` until it fails: a stream that is gone (closed
    pipe, closed file) is marked ``dead`` and its file descriptor pointed at /dev/null (so the
    interpreter's last flush and any process started later do not meet the pipe either); a
    write refused for now (EAGAIN: a full non-blocking terminal) drops that line only."""

    def __init__(self, stream: IO[str], name: str) -> None:
        self._stream = stream
        self.name = name
        self.dead = False
        self.dropped = 0  # writes not delivered

    @property
    def wrapped(self) -> IO[str]:
        return self._stream

    def _failed(self, e: BaseException) -> None:
        self.dropped += 1
        if isinstance(e, BlockingIOError):
            return  # the reader is there but slow: the next line may get through
        if isinstance(e, OSError) and e.errno not in _GONE and not isinstance(e, BrokenPipeError):
            return
        with _LOCK:
            if self.dead:
                return
            self.dead = True
        try:
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)
        except (OSError, ValueError, AttributeError):
            pass  # no descriptor of its own (a test's StringIO): dropping is enough
        # the run's log file hears it (the terminal cannot any more)
        logging.getLogger("assay.output").warning(
            "%s can no longer be written (%s: %s): terminal output is dropped from here on; "
            "the run goes on", self.name, type(e).__name__, e)

    def write(self, s: str) -> int:
        if self.dead:
            self.dropped += 1
            return len(s)
        try:
            return self._stream.write(s)
        except (OSError, ValueError) as e:  # ValueError: I/O operation on closed file
            self._failed(e)
            return len(s)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.dead:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError) as e:
            self._failed(e)

    def isatty(self) -> bool:
        try:
            return not self.dead and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, buffer, errors, ...
        return getattr(self._stream, name)


def _wrap(name: str) -> tuple[IO[str], Tolerant]:

    current = getattr(sys, name)
    if isinstance(current, Tolerant):
        return current.wrapped, current
    wrapper = Tolerant(current, name)
    setattr(sys, name, wrapper)
    return current, wrapper


def guard_output() -> None:
    """Make this process's terminal output unable to fail its work (idempotent): wrap
    ``sys.stdout`` and ``sys.stderr`` in :class:`Tolerant`, and re-point every logging handler
    (and a rich console inside one, as Prefect's console handler has) that writes to either."""
    with _LOCK:
        pairs = [_wrap("stdout"), _wrap("stderr")]
    swap = {id(old): new for old, new in pairs}
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for logger in loggers:
        for h in list(logger.handlers):
            stream = getattr(h, "stream", None)
            if stream is not None and id(stream) in swap:
                # not setStream: that flushes the old stream first, which may be the dead pipe
                setattr(h, "stream", swap[id(stream)])  # noqa: B010
            console = getattr(h, "console", None)
            file = getattr(console, "_file", None)
            if file is not None and id(file) in swap:
                console.file = swap[id(file)]  # type: ignore[union-attr]

