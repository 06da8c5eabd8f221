"""Every generate call ends, whatever the server does, with exactly one record per sample.

Against a real OpenAI-protocol server on 127.0.0.1 with many samples and several connections:
429/503 on first or on every attempt, dropped connections, stalls past timeout_s, a restart
mid-run, a 4xx, the limit cut to 1 and raised again, retries on the last requests, and two
concurrent calls sharing one server's connection budget. The ``fresh_budgets`` fixture also
checks after each test that no connection slot or parked waiter leaked.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest
from helpers.openai_server import Fault, OpenAIServer, latch

from assay.errors import GenerationError
from assay.models import generate
from assay.models.openai import BREAKER_AFTER
from assay.progress import listen

pytestmark = pytest.mark.timeout(90)  # a hang fails instead of stalling the suite

QS = [f"What is {i} + {i + 1}?" for i in range(40)]
PARAMS = {"temperature": 0.7, "max_tokens": 16}
K = 2
N = len(QS) * K


def spec(server, **kw):
    # timeout_s far above any answer time: only the stall test's stalls time out
    return {"kind": "openai", "base_url": server.base_url, "model": "tiny-ckpt", "max_retries": 6,
            "timeout_s": 60, **kw}


def journal_lines(store) -> Counter:
    """Records committed per key, over every journal of the store."""
    out: Counter = Counter()
    for f in (store.root / "journals").glob("*.jsonl"):
        for line in f.read_bytes().splitlines():
            out[json.loads(line)["rec"]["key"]] += 1
    return out


def sample_of(body) -> tuple[str, int]:
    return body["messages"][-1]["content"], body["seed"]


def first_attempts(fault, pick=lambda body: True):
    """A fault on the first attempt of every sample ``pick`` chooses; later attempts answer."""
    seen: set = set()
    lock = threading.Lock()

    def faults(n, body):
        with lock:
            key = sample_of(body)
            if key in seen or not pick(body):
                return None
            seen.add(key)
            return fault()
    return faults


def run(server, store, qs=QS, k=K, conns=8, **kw):
    g = generate(qs, spec(server, **kw), k=k, params=PARAMS, max_connections=conns, store=store)
    lines = journal_lines(store)
    assert len(g.records) == len(qs) * k
    assert set(lines) == {r["key"] for r in g.records} and set(lines.values()) == {1}
    return g


@pytest.mark.parametrize("n_prompts,conns", [(2, 2), (40, 8)])
def test_429_on_every_first_attempt_ends_with_every_answer(server, store, fast_backoff, n_prompts,
                                                            conns):
    """The hang of issue 24: a lane parked by a 429 cut waited for a waker that never came."""
    server.faults = first_attempts(lambda: Fault(429, retry_after="0"))
    g = run(server, store, QS[:n_prompts], conns=conns)
    assert not g.errors and server.count() == 2 * n_prompts * K
    assert g.stats["retries"] == {"429": n_prompts * K} and g.stats["requests"] == 2 * n_prompts * K


def test_the_last_requests_are_retries(server, store, fast_backoff):
    """Only the last prompts fail, twice each: the run ends on retries, with every lane idle."""
    last = set(QS[-3:])
    tries: Counter = Counter()
    lock = threading.Lock()

    def faults(n, body):
        with lock:
            key = sample_of(body)
            if key[0] in last and tries[key] < 2:
                tries[key] += 1
                return Fault(429 if tries[key] == 1 else 503, retry_after="0")
        return None

    server.faults = faults
    g = run(server, store)
    assert not g.errors and g.stats["retries"] == {"429": 6, "503": 6}


@pytest.mark.parametrize("status", [429, 503])
def test_every_attempt_failing_opens_the_breaker_and_ends(server, store, fast_backoff, capfd,
                                                          status):
    """A dead server: BREAKER_AFTER requests give up, the rest are not sent; one loud line."""
    server.faults = lambda n, body: Fault(status, retry_after="0", message="overloaded")
    g = run(server, store)
    assert len(g.errors) == N and all(f"HTTP {status}" in r["reason"] for r in g.errors)
    gave_up = [r for r in g.errors if "gave up after 6 retries" in r["reason"]]
    not_sent = [r for r in g.errors if r["reason"].startswith("not sent: circuit breaker open")]
    # at most 8 in flight and 8 waiting out a backoff when the breaker opens
    assert BREAKER_AFTER <= len(gave_up) < BREAKER_AFTER + 16
    assert len(not_sent) >= N - BREAKER_AFTER - 16
    # what a dead server costs is bounded, and no sample "not sent" reached the server
    assert server.count() == g.stats["requests"] <= 7 * (BREAKER_AFTER + 16)
    asked = {sample_of(b) for b in server.requests}
    assert not asked & {(QS[r["prompt_index"]], r["seed"]) for r in not_sent}
    assert g.stats["not_sent"] == len(not_sent) and g.stats["gave_up"] == N - len(not_sent)
    assert g.stats["breaker"] and f"HTTP {status}" in g.stats["breaker"]
    err = capfd.readouterr().err
    assert err.count("circuit breaker open") == 1 and server.base_url in err
    # the next call probes with one request; the server is still down: nothing else is sent
    before = server.count()
    again = generate(QS, spec(server), k=K, params=PARAMS, max_connections=8, store=store)
    assert len(again.errors) == N and server.count() - before == 1
    # the server is back: the probe closes the breaker and every sample is answered
    server.faults = []
    fixed = generate(QS, spec(server), k=K, params=PARAMS, max_connections=8, store=store)
    assert not fixed.errors and fixed.sent == N and server.count() - before == 1 + N


def test_dropped_connections_are_retried(server, store, fast_backoff):
    server.faults = first_attempts(lambda: Fault(None, drop=True))
    g = run(server, store)
    assert not g.errors and g.stats["retries"] == {"connection": N}


def test_stalls_past_timeout_s_are_cut_and_retried(server, store, fast_backoff):
    """A server that accepts and never answers (60 s against timeout_s 3)."""
    server.faults = first_attempts(lambda: Fault(None, sleep=60),
                                   pick=lambda body: body["messages"][-1]["content"] in QS[:4])
    g = run(server, store, timeout_s=3)
    # every stalled sample timed out once (a loaded machine may add a timeout, never remove one)
    assert not g.errors and set(g.stats["retries"]) == {"timeout"}
    assert g.stats["retries"]["timeout"] >= 4 * K
    assert all(r["retries"] >= 1 for r in g.records if r["prompt_index"] < 4)


def test_a_server_restart_mid_run(store, fast_backoff):
    """The server dies (listening socket closed, open connections reset) after 30 requests and
    comes back on the same port; every sample is answered, once."""
    first = OpenAIServer(["tiny-ckpt"]).start()
    state = {"server": first}
    restarted = threading.Event()

    def restart():
        first.kill()
        state["server"] = OpenAIServer(["tiny-ckpt"], port=first.port).start()
        restarted.set()

    def faults(n, body):
        if n == 30:  # this request is in flight when the server dies
            threading.Thread(target=restart).start()
            return Fault(None, until=restarted.is_set)
        return None

    first.faults = faults
    try:
        # retries spread over seconds: the restart takes milliseconds
        g = run(first, store, max_retries=200)
        assert not g.errors and first.count() + state["server"].count() >= N
        assert state["server"].count() > 0 and g.stats["retries"].get("connection", 0) >= 1
    finally:
        state["server"].stop()


def test_a_4xx_ends_the_call_at_once_without_a_double_commit(server, store, fast_backoff):
    server.faults = lambda n, body: Fault(400, message="bad request") if n == 17 else None
    with pytest.raises(GenerationError, match="HTTP 400: 'bad request'"):
        generate(QS, spec(server), k=K, params=PARAMS, max_connections=8, store=store)
    lines = journal_lines(store)
    assert set(lines.values()) <= {1} and len(lines) < N
    # the rerun asks only what was not committed
    server.faults = []
    before = server.count()
    g = run(server, store)
    assert not g.errors and g.sent == N - len(lines)
    # at the server: the rerun's requests, plus at most the first call's cancelled ones (one per
    # connection) whose bytes were on the wire when it ended and that the server read only after
    # `before` was taken (when they arrive depends on the scheduler, not on assay)
    assert g.sent <= server.count() - before <= g.sent + 8


def test_the_limit_cut_to_1_comes_back_to_max_connections(server, store, fast_backoff):
    """A burst of 429s cuts the limit to 1; once the server accepts again the limit is back at
    max_connections within a few answers: after 20 answers, arrivals are held until 8 are in
    flight at the server, which happens only if every lane is sending again."""
    state = {"n429": 0, "ok": 0}
    lock = threading.Lock()
    eight = latch(lambda: server.in_flight >= 8)

    def faults(n, body):
        with lock:
            if state["n429"] < 80:
                state["n429"] += 1
                return Fault(429, retry_after="0")
            state["ok"] += 1
            if 20 < state["ok"] <= 28:
                return Fault(None, until=eight)
            return None

    server.faults = faults
    b = spec(server, max_retries=60)
    g = generate(QS, b, k=K, params=PARAMS, max_connections=8, store=store)
    assert not g.errors and g.stats["retries"] == {"429": 80} and g.stats["min_limit"] == 1
    assert server.gate_timeouts == 0 and server.max_in_flight == 8


def test_two_concurrent_calls_share_one_servers_connections(store, tmp_path):
    """max_connections bounds the requests in flight at one server across concurrent calls (the
    shards of a study on threads); a judge on another server has its own budget.

    The first arrivals at both servers are held until both calls to the study's server run at
    once (the other call's 4 lanes parked in the budget, or a fifth request in flight: a budget
    that is not shared lets it through) and the judge's server holds 4 too (one budget for both
    servers would never get there: the gate's 30 s timeouts would then be counted)."""
    from assay.models import openai
    from assay.store import Store

    a, j = OpenAIServer(["tiny-ckpt"]).start(), OpenAIServer(["tiny-ckpt"]).start()

    def parked() -> int:
        return sum(len(b._waiters) for b in list(openai._BUDGETS.values()) if b.url == a.base_url)

    # one gate for both servers, opened once: a gate per server could each see the other's
    # count at a different instant
    gate = latch(lambda: a.in_flight >= 5
                 or (a.in_flight >= 4 and j.in_flight >= 4 and parked() >= 4))
    a.faults = lambda n, body: Fault(None, until=gate) if n < 16 else None
    j.faults = lambda n, body: Fault(None, until=gate) if n < 16 else None
    errors: list[BaseException] = []

    def call(srv, qs, where):
        try:
            generate(qs, spec(srv), params=PARAMS, max_connections=4,
                     store=Store(tmp_path / where))
        except BaseException as e:  # re-raised below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(a, QS[:20], "s1")),
               threading.Thread(target=call, args=(a, QS[20:], "s2")),
               threading.Thread(target=call, args=(j, QS, "judge"))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert a.gate_timeouts == j.gate_timeouts == 0  # both calls ran at once, and the judge
        assert a.count() == 40 and a.max_in_flight == 4  # two calls, one budget of 4
        assert j.count() == 40 and j.max_in_flight == 4  # its own budget
    finally:
        a.stop()
        j.stop()


def test_progress_counts_every_sample_retry_and_error(server, store, fast_backoff):
    bad = QS[5]
    thirds = first_attempts(lambda: Fault(429, retry_after="0"),
                            pick=lambda body: QS.index(body["messages"][-1]["content"]) % 3 == 0)
    server.faults = lambda n, body: (Fault(500) if body["messages"][-1]["content"] == bad
                                     else thirds(n, body))
    seen = []
    stop = listen(lambda s: seen.append(s) if s.label == "liveness" else None)
    try:
        g = generate(QS, spec(server, max_retries=2), k=K, params=PARAMS, max_connections=8,
                     store=store, label="liveness")
    finally:
        stop()
    final = seen[-1]
    assert final.finished and final.done == final.total == N
    assert final.counts["errors"] == len(g.errors) == K
    assert final.counts["retries"] == sum(g.stats["retries"].values()) == 2 * K + 14 * K
    assert g.stats["retries"] == {"429": 14 * K, "500": 2 * K}
    assert [s.done for s in seen if not s.finished] == list(range(1, N + 1))


def test_a_judge_under_429s_gives_every_row_a_verdict(server, tmp_path, fast_backoff):
    """The judge's calls: 429 on every first attempt, 40 rows, 8 connections."""
    from assay.verify.judge import JudgeVerifier

    server.faults = first_attempts(lambda: Fault(429, retry_after="0"))
    judge = JudgeVerifier(model=spec(server), store=str(tmp_path / "judge"), max_connections=8)
    rows = [{"prompt": q, "final_text": str(2 * i + 1 + (i % 2)),
             "privileged": {"reference": str(2 * i + 1)}} for i, q in enumerate(QS)]
    seen = []
    stop = listen(lambda s: seen.append(s) if s.stage == "judge" else None)
    try:
        verdicts = judge.grade_batch(rows)
    finally:
        stop()
    assert [v.reward for v in verdicts] == [1.0, 0.0] * 20
    assert server.count() == 80 and seen[-1].done == 40 and seen[-1].counts["retries"] == 40
    assert seen[-1].label == "judge:tiny-ckpt"


def test_a_4xx_to_the_breakers_probe_fails_like_any_4xx(server, store, fast_backoff):
    server.faults = lambda n, body: Fault(503)
    assert len(run(server, store, max_retries=0).errors) == N  # the breaker opens
    server.faults = lambda n, body: Fault(400, message="bad probe")
    with pytest.raises(GenerationError, match="HTTP 400: 'bad probe'"):
        generate(QS, spec(server), k=K, params=PARAMS, max_connections=8, store=store)
