"""Terminal streams that cannot fail the work: a closed pipe marks the stream dead (later lines
dropped, its descriptor on /dev/null), a full non-blocking pipe drops lines without ending
anything, and logging handlers and rich consoles are pointed at the guarded streams."""

from __future__ import annotations

import io
import logging
import os
import sys

import pytest

from assay.outstreams import Tolerant, guard_output


def _pipe_stream(nonblocking: bool = False) -> tuple[io.TextIOWrapper, int]:
    r, w = os.pipe()
    if nonblocking:
        os.set_blocking(w, False)
    return io.TextIOWrapper(io.BufferedWriter(io.FileIO(w, "w")), line_buffering=True), r


def test_a_pipe_whose_reader_closed_is_dead_and_its_descriptor_is_devnull() -> None:
    stream, r = _pipe_stream()
    os.close(r)
    out = Tolerant(stream, "stdout")
    assert out.write("one line\n") == 9 and out.dead
    out.write("and another\n")
    out.flush()
    assert out.dropped == 2
    # the descriptor now leads to /dev/null: the interpreter's last flush meets no pipe
    assert os.path.samestat(os.fstat(stream.fileno()), os.stat(os.devnull))
    stream.write("x\n")  # the wrapped stream itself writes again (its buffer drains there)
    stream.flush()
    stream.close()


def test_a_full_nonblocking_pipe_drops_lines_but_stays_alive() -> None:
    stream, r = _pipe_stream(nonblocking=True)
    out = Tolerant(stream, "stderr")
    line = "x" * 1000 + "\n"
    for _ in range(400):  # 400 kB into a pipe of 64 kB that nobody reads: EAGAIN
        out.write(line)
    assert out.dropped > 0 and not out.dead
    os.read(r, 1 << 20)  # the reader catches up: lines go through again
    got_before = out.dropped
    out.write("after\n")
    assert out.dropped == got_before
    os.close(r)
    try:
        stream.close()
    except OSError:
        pass  # what was left in its buffer met the closed reader


def test_guard_output_wraps_once_and_repoints_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    plain = logging.StreamHandler(err)

    class RichHandler(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.console = Console(file=err)

    rich = RichHandler()
    log = logging.getLogger("assay.test.outstreams")
    log.addHandler(plain)
    log.addHandler(rich)
    try:
        guard_output()
        guard_output()  # idempotent: one wrapper
        assert isinstance(sys.stderr, Tolerant) and sys.stderr.wrapped is err
        assert plain.stream is sys.stderr and rich.console.file is sys.stderr
    finally:
        log.removeHandler(plain)
        log.removeHandler(rich)


def test_rich_on_a_closed_pipe_raises_system_exit_unless_guarded() -> None:
    # why the guard exists: rich turns BrokenPipeError into SystemExit(1)
    from rich.console import Console

    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise io.UnsupportedOperation

    with pytest.raises(SystemExit):
        Console(file=Closed()).print("a log record")
    Console(file=Tolerant(Closed(), "stderr")).print("a log record")  # nothing raised
