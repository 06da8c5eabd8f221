"""A stop cancels generation in flight (assay.stop), and the counts a call reports are the server's.

Against the loopback OpenAI server: requests held by the server are cancelled and their
connections closed at a stop, nothing more is sent, the rerun asks only what is missing and gets
the same completions; a listing that never answers is abandoned; requests, completions, failures
by cause and retries equal what the server saw; timeouts cut the concurrency as 429s do.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from helpers.openai_server import Fault, OpenAIServer

from assay import stop
from assay.models import generate
from assay.models.openai import server_budget
from assay.store import Store

pytestmark = pytest.mark.timeout(120)

QS = [f"What is {i} + {i + 1}?" for i in range(8)]


@pytest.fixture(autouse=True)
def unstopped() -> Iterator[None]:
    stop.clear()
    yield
    stop.clear()


def spec(url: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "openai", "base_url": url, "model": "tiny-ckpt", "max_retries": 4,
            "timeout_s": 300, **kw}


def until(pred: Callable[[], bool], bound: float = 60.0) -> None:
    end = time.monotonic() + bound
    while not pred():
        assert time.monotonic() < end, "the condition never held"
        time.sleep(0.02)


def connections_to(port: int) -> int:
    """Our own TCP connections to ``port`` still established (what the client holds open)."""
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - the test reads it
            out.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, out


def test_stop_cancels_requests_in_flight_and_the_rerun_asks_only_the_rest(tmp_path) -> None:
    gate = threading.Event()  # held requests answer only once the test lets them
    srv = OpenAIServer().start()
    srv.faults = lambda n, body: None if n < 2 else Fault(None, until=gate.is_set, until_s=600)
    store = Store(tmp_path / "s")
    try:
        t, out = in_thread(lambda: generate(QS, spec(srv.base_url), store=store,
                                            max_connections=3, params={"temperature": 0.5}))
        until(lambda: srv.in_flight == 3 and srv.count() == 5)
        t0 = time.monotonic()
        stop.trigger("test stop")
        t.join(timeout=20)
        took = time.monotonic() - t0
        assert not t.is_alive(), "generate did not return after the stop"
        assert isinstance(out[0], stop.Cancelled), out
        # without the stop the call waits for the gate (600 s); its connections close at once
        assert took < 15
        until(lambda: connections_to(srv.port) == 0, bound=10)
        time.sleep(0.5)  # nothing more is sent after the stop
        assert srv.count() == 5
        gate.set()
        stop.clear()
        sent = srv.count()
        again = generate(QS, spec(srv.base_url), store=store, max_connections=3,
                         params={"temperature": 0.5})
        assert srv.count() - sent == len(QS) - 2 == again.sent  # only the missing ones
        # its own requests, and the stopped call's 2 journalled ones (it reported none)
        assert again.stats["requests"] - again.stats["recovered"] == len(QS) - 2
        assert again.stats["recovered"] == 2
        fresh = generate(QS, spec(srv.base_url), store=Store(tmp_path / "fresh"),
                         max_connections=3, params={"temperature": 0.5})
        assert again.completions == fresh.completions
        assert server_budget(srv.base_url).in_flight == 0
    finally:
        gate.set()
        srv.stop()


def test_stop_abandons_a_listing_that_never_answers(tmp_path) -> None:
    """A server frozen before the run: its kernel accepts, nothing answers /v1/models."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)  # never accepted: a SIGSTOPped server looks the same from the client
    port = lsock.getsockname()[1]
    try:
        t, out = in_thread(lambda: generate(QS, spec(f"http://127.0.0.1:{port}/v1"),
                                            store=Store(tmp_path / "s")))
        until(lambda: connections_to(port) >= 1)
        stop.trigger("test stop")
        t.join(timeout=20)
        assert not t.is_alive() and isinstance(out[0], stop.Cancelled), out
    finally:
        lsock.close()


def test_counts_are_what_the_server_saw(tmp_path, fast_backoff) -> None:
    """Odd prompts get 503 on every attempt, a quarter of the rest time out once: requests,
    completions, failures by cause and retries each match the server's own count."""
    srv = OpenAIServer().start()
    seen: set[tuple[str, int]] = set()
    lock = threading.Lock()

    def faults(n: int, body: dict[str, Any]) -> Fault | None:
        q = body["messages"][-1]["content"]
        i = QS.index(q)
        if i % 2:
            return Fault(503, message="overloaded")
        with lock:
            first = (q, body["seed"]) not in seen
            seen.add((q, body["seed"]))
        return Fault(None, sleep=3.0) if first and i % 4 == 0 else None

    srv.faults = faults
    try:
        g = generate(QS, spec(srv.base_url, max_retries=2, timeout_s=1.0), k=2,
                     store=Store(tmp_path / "s"), max_connections=4,
                     params={"temperature": 0.5})
        srv.settle()
        bodies = srv.requests
        s = g.stats
        assert s["requests"] == len(bodies)
        ok = sum(r["status"] == "ok" for r in g.records)
        assert s["completions"] == ok == 8
        assert s["failures"] == {"HTTP 503": 8}
        assert s["retries"] == {"503": 16, "timeout": 4}
        assert len(bodies) == 8 + 4 + 8 * 3  # answers, timed-out first attempts, 503s
    finally:
        srv.stop()


def test_refused_connections_count_as_not_sent(tmp_path, fast_backoff) -> None:
    """A dead server saw no request: the count says 0 sent, every sample failed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    m = spec(f"http://127.0.0.1:{port}/v1", max_retries=1, timeout_s=5)
    from assay.models.base import Request, RunStats
    from assay.models.openai import OpenAIBackend
    from assay.models.specs import SamplingParams

    b = OpenAIBackend(m)
    stats = RunStats()
    recs: list[dict[str, Any]] = []
    reqs = [Request(f"k{i}", i, 0, i, [{"role": "user", "content": q}])
            for i, q in enumerate(QS)]
    b.run(reqs, SamplingParams(), api="chat", max_connections=2,
          commit=lambda r, rec: (recs.append(rec), stats.committed(rec)), stats=stats)
    d = stats.as_dict()
    assert d["requests"] == 0 and d["completions"] == 0
    assert sum(d["failures"].values()) == len(QS) == len(recs)


def test_timeouts_cut_the_concurrency(tmp_path, fast_backoff) -> None:
    """A server that answers one request at a time: timed-out requests are not retried at full
    concurrency (the limit is cut as on a 429)."""
    one = threading.Lock()

    def slow(body: dict[str, Any]) -> str:
        with one:
            time.sleep(0.25)
        return "ok"

    srv = OpenAIServer(policy=slow).start()
    try:
        qs = [f"q{i}" for i in range(16)]
        g = generate(qs, spec(srv.base_url, timeout_s=1.0, max_retries=8, retry_total_s=120),
                     k=2, store=Store(tmp_path / "s"), max_connections=16)
        srv.settle()
        assert g.stats["requests"] == srv.count(), (g.stats, srv.count())
        # without the cut only 429s lower it: the limit stays at 16 and every retry goes out
        # at full concurrency
        assert g.stats["min_limit"] is not None and g.stats["min_limit"] <= 4, g.stats
        # every sample is accounted for, answered or failed by its cause (how many attempts a
        # sample needs on a loaded machine is the machine's, not what is tested here)
        assert g.stats["completions"] + sum(g.stats["failures"].values()) == 32, g.stats
        assert g.stats["completions"] > 0 and set(g.stats["failures"]) <= {"timeout"}, g.stats
    finally:
        srv.stop()


def test_a_finished_runs_stop_does_not_cancel_the_next_call(tmp_path) -> None:
    """A watchdog stopped an earlier guarded run in this process (a notebook's last study):
    the next direct call runs, and a thread that run abandoned cannot commit into it."""
    from assay import progress
    from assay.watchdog import RunStopped, guard

    with pytest.raises(RunStopped):
        with guard(stall_after="0.2s"):
            with progress.track("grade", "stalled shard 1/1", total=1):
                time.sleep(60)  # the stall detector ends it
    assert stop.stopped() is not None  # sticky: a node the stopped run still held stops too
    left_over = stop.epoch()
    srv = OpenAIServer().start()
    try:
        g = generate(QS, spec(srv.base_url), store=Store(tmp_path / "s"))
        assert g.stats["completions"] == len(QS) == srv.count()
    finally:
        srv.stop()
    assert stop.stopped() is None
    with pytest.raises(stop.Cancelled):
        stop.check(left_over)  # what the abandoned run's threads check before they commit


def test_a_call_inside_a_stopped_run_stays_stopped(tmp_path) -> None:
    """Only the first unit of work to begin clears an old stop: a node starting inside a run
    that was stopped meanwhile is cancelled at once, before it asks the server anything."""
    srv = OpenAIServer().start()
    try:
        with stop.run():
            stop.trigger("test stop")
            with pytest.raises(stop.Cancelled):
                generate(QS, spec(srv.base_url), store=Store(tmp_path / "s"))
        assert srv.count() == 0
    finally:
        srv.stop()
