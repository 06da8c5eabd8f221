"""A stop ends `assay run` and `assay nightly` on time against a frozen model server (issue 38).

The loopback OpenAI server runs as its own process and is SIGSTOPped (its kernel still accepts
connections; nothing answers), before the run or in the middle of generation; the run is then
stopped by ``execution.stall_after`` or by SIGTERM. Each must exit with its status and one
``error:`` line, the last thing printed, long before the requests' ``timeout_s`` (300 s) runs
out; the nightly's webhook has the alert by then.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.errors import EXIT_STOPPED

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.openai_server import hung_study, served_in_child  # noqa: E402
from helpers.webhook_receiver import webhook_receiver  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
#: what the stop must beat by far: without it the run waits out timeout_s (300 s) per request
BOUND_S = 30.0


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The loopback server in a child process (0.1 s per answer); resumed and killed at the end."""
    with served_in_child(tmp_path, 0.1) as server:
        yield server


class Run:
    """``assay ARGS`` as a child process; its stderr lines collected with their arrival time."""

    def __init__(self, tmp: Path, args: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([str(BIN / "assay"), *args], cwd=tmp, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_line(self, text: str, bound: float = 120.0) -> None:
        end = time.monotonic() + bound
        while not any(text in line for _, line in self.lines):
            assert time.monotonic() < end and self.proc.poll() is None, self.text()
            time.sleep(0.02)

    def finish(self, bound: float = 360.0) -> tuple[int, float]:
        """(exit status, monotonic time it exited); killed if it outlives ``bound``."""
        try:
            rc = self.proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"still running after {bound} s:\n{self.text()}") from None
        ended = time.monotonic()
        self.reader.join(timeout=10)
        return rc, ended

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def errors(self) -> list[str]:
        return [line for _, line in self.lines if line.startswith("error:")]


def _check_end(run: Run, rc: int, want_rc: int, words: str) -> None:
    """Exit ``want_rc``, one ``error:`` line naming ``words``, and nothing printed after it."""
    assert rc == want_rc, run.text()
    errors = run.errors()
    assert len(errors) == 1 and words in errors[0], run.text()
    assert run.lines[-1][1] == errors[0], run.text()


def _args(kind: str, spec: Path, tmp: Path) -> list[str]:
    if kind == "run":
        return ["run", str(spec), "--store", str(tmp / "st"), "--output", str(tmp / "out")]
    return ["nightly", str(spec), "--store", str(tmp / "st"), "--root", str(tmp / "n"),
            "--night", "2026-12-01"]


def _frozen_mid_run(tmp: Path, server: dict[str, Any], kind: str, stall: str,
                    hook: dict[str, Any]) -> Run:
    """``assay KIND`` started, and its server frozen once generation has begun."""
    spec = hung_study(tmp, server["url"], stall, hook["url"] if kind == "nightly" else None)
    run = Run(tmp, _args(kind, spec, tmp))
    run.wait_line("[generate] a shard 1/1")
    server["proc"].send_signal(signal.SIGSTOP)
    return run


@pytest.mark.parametrize("kind", ["run", "nightly"])
def test_stall_on_a_server_frozen_mid_run(prefect_server: str, tmp_path: Path,
                                          model_server: dict[str, Any], kind: str) -> None:
    with webhook_receiver() as hook:
        run = _frozen_mid_run(tmp_path, model_server, kind, "2s", hook)
        frozen = time.monotonic()
        rc, ended = run.finish()
        _check_end(run, rc, EXIT_STOPPED, "stopped by execution.stall_after (2s)")
        # the stop is decided 2 s after the last answer; without it: 300 s per request
        assert ended - frozen < BOUND_S, run.text()
        if kind == "nightly":  # the alert went out before the process ended
            assert [m["subject"] for m in hook["messages"]] == [
                "assay nightly 2026-12-01: run stopped (hung)"], hook


@pytest.mark.parametrize("kind", ["run", "nightly"])
def test_stall_on_a_server_frozen_before_the_run(prefect_server: str, tmp_path: Path,
                                                 model_server: dict[str, Any], kind: str) -> None:
    """Frozen before the model listing (``/v1/models``): the listing counts as generation in
    flight, so the stall detector sees it, and the stop abandons it."""
    spec = hung_study(tmp_path, model_server["url"], "2s")
    model_server["proc"].send_signal(signal.SIGSTOP)
    run = Run(tmp_path, _args(kind, spec, tmp_path))
    rc, _ = run.finish(bound=BOUND_S + 60)
    _check_end(run, rc, EXIT_STOPPED, "stopped by execution.stall_after (2s)")
    assert "in flight: [generate] a shard 1/1: 0/80 done" in run.errors()[0]


@pytest.mark.parametrize("kind", ["run", "nightly"])
def test_sigterm_ends_a_run_waiting_on_a_frozen_server(prefect_server: str, tmp_path: Path,
                                                       model_server: dict[str, Any],
                                                       kind: str) -> None:
    """No stall detector (300 s): SIGTERM alone ends the run, requests and listing in flight."""
    with webhook_receiver() as hook:
        run = _frozen_mid_run(tmp_path, model_server, kind, "300s", hook)
        time.sleep(1.0)  # requests now wait on the frozen server
        run.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rc, ended = run.finish()
        _check_end(run, rc, 128 + 15, "terminated (SIGTERM)")
        assert ended - sent < BOUND_S, run.text()
        if kind == "nightly":
            assert len(hook["messages"]) == 1, hook
            msg = hook["messages"][0]
            assert msg["subject"] == "assay nightly 2026-12-01: run stopped (hung)"
            assert msg["stopped"]["message"].startswith("terminated (SIGTERM)")
