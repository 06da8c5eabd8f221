"""Request counts across a killed call: the rerun reports what the killed call sent before its
last journalled answer, so the counts match what reached the server (issue 47).

A child process generates against the loopback server and exits hard (``os._exit``: no
``finally``, no flush of its counts) right after its K-th answer is journalled; the rerun in
this process finishes the job. What reached the server is counted by the server itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.openai_server import OpenAIServer, first_attempt_faults

from assay.models import generate
from assay.store import Store

QS = [f"What is {a} + {a + 1}?" for a in range(30)]
K, CONNS = 6, 4
PARAMS = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 64}

#: the killed worker: generate, and die the moment the K-th answer is journalled
CHILD = textwrap.dedent("""
    import json, os, sys
    from assay.models import generate
    from assay.models import journal
    from assay.store import Store

    url, root, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    answers = [0]
    append = journal.Journal.append

    def append_then_die(self, rec):
        append(self, rec)
        if str(rec.get("key", "")).startswith("gen:"):
            answers[0] += 1
            if answers[0] == k:
                os._exit(9)

    journal.Journal.append = append_then_die
    generate(json.loads(sys.argv[4]), {"kind": "openai", "base_url": url, "model": "tiny-ckpt",
             "max_retries": 4, "timeout_s": 30}, params=json.loads(sys.argv[5]),
             max_connections=int(sys.argv[6]), store=Store(root))
    os._exit(3)  # never reached: the K-th answer kills it first
""")


def _killed_then_rerun(server: OpenAIServer, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> tuple[dict, int, list]:
    """(the rerun's stats, arrivals while the killed child ran, every arrival's sample)."""
    # the killed child's claims lapse in a second, not a minute: the rerun then takes over
    monkeypatch.setenv("ASSAY_CLAIM_LEASE_S", "1")
    root = tmp_path / "store"
    env = {**os.environ, "ASSAY_CLAIM_LEASE_S": "1"}
    child = subprocess.run([sys.executable, "-c", CHILD, server.base_url, str(root), str(K),
                            json.dumps(QS), json.dumps(PARAMS), str(CONNS)],
                           env=env, capture_output=True, text=True, timeout=120)
    assert child.returncode == 9, child.stderr[-2000:]
    killed = server.settle()  # what the killed child had sent, in flight ones included
    g = generate(QS, {"kind": "openai", "base_url": server.base_url, "model": "tiny-ckpt",
                      "max_retries": 4, "timeout_s": 30}, params=PARAMS,
                 max_connections=CONNS, store=Store(root))
    assert all(r["status"] == "ok" for r in g.records)
    samples = [json.dumps([b["messages"], b["seed"]]) for b in server.requests]
    return g.stats, killed, samples


def test_a_rerun_reports_the_requests_of_the_killed_call(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    server = OpenAIServer(latency=0.02).start()
    try:
        stats, killed, samples = _killed_then_rerun(server, tmp_path, monkeypatch)
        total = server.settle()
    finally:
        server.stop()
    # no faults: every request is one sample's one attempt. A sample the server saw twice was
    # in flight when the child died (sent, never journalled) and asked again by the rerun
    assert len(set(samples)) == len(QS) and total == len(samples)
    unanswered = total - len(set(samples))
    assert 0 <= unanswered <= CONNS
    # the exact relation: reported = reached the server - the killed call's unjournalled ones
    assert stats["requests"] == total - unanswered
    assert stats["recovered"] == K  # the killed call's K answered requests
    assert stats["requests"] - stats["recovered"] == total - killed  # the rerun's own
    # completions this call received; the killed call's K are journalled rows it served
    assert stats["completions"] == len(QS) - K and stats["retries"] == {}


def test_the_killed_calls_retries_are_reported_by_cause(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.models import openai

    monkeypatch.setattr(openai, "BACKOFF_BASE_S", 0.005)
    monkeypatch.setattr(openai, "BACKOFF_MAX_S", 0.05)
    server = OpenAIServer(latency=0.02).start()
    draw, sent_429 = first_attempt_faults(0.5, 0.0), [0]  # half the samples: a 429 first

    def faults(n, body):
        f = draw(n, body)
        sent_429[0] += f is not None
        return f

    server.faults = faults
    try:
        stats, killed, _ = _killed_then_rerun(server, tmp_path, monkeypatch)
        total = server.settle()
    finally:
        server.stop()
    # every arrival the counts leave out is one the killed child sent after its last journalled
    # answer: at most one per connection, and each 429 left out is one of them
    left_out = total - stats["requests"]
    assert 0 <= left_out <= CONNS
    assert stats["requests"] - stats["recovered"] == total - killed  # the rerun's own, exactly
    assert 0 <= sent_429[0] - stats["retries"].get("429", 0) <= left_out
    assert stats["retries"].get("429", 0) > 0 and stats["recovered"] >= K


def test_taken_over_counts_add_up_by_cause() -> None:
    from assay.models.generation import _with_taken

    mine = {"requests": 4, "completions": 3, "gave_up": 1, "not_sent": 0,
            "retries": {"503": 1}, "failures": {"HTTP 503": 1}, "breaker": None}
    dead = {"requests": 5, "completions": 4, "gave_up": 0, "not_sent": 0,
            "retries": {"429": 1, "503": 2}, "failures": {}}
    out = _with_taken(mine, [dead, dead])
    # the dead calls' completions are rows this call served from the journal, not received
    assert out["requests"] == 14 and out["recovered"] == 10 and out["completions"] == 3
    assert out["retries"] == {"429": 2, "503": 5} and out["failures"] == {"HTTP 503": 1}


def test_a_live_runs_answers_are_not_counted_by_the_run_waiting_on_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs on one store asking the same samples: the one waiting on the other's answers
    finds them journalled before the other settled them, and must not count them (no double
    count): the two runs' reports add up to what reached the server."""
    import threading
    import time

    from helpers.openai_server import Fault

    monkeypatch.setenv("ASSAY_CLAIM_POLL_S", "0.02")
    gate = threading.Event()
    server = OpenAIServer(latency=0.01).start()
    # the first 5 answers at once; the rest once the waiting run has found those 5
    server.faults = lambda n, body: None if n < 5 else Fault(None, until=gate.is_set, until_s=60)
    store = Store(tmp_path / "store")
    model = {"kind": "openai", "base_url": server.base_url, "model": "tiny-ckpt",
             "max_retries": 0, "timeout_s": 90}
    qs = QS[:5]
    got: dict[str, object] = {}
    second_done, finished = threading.Event(), []

    def hold_last(i: int, records: list) -> None:
        # the first run, its last answer journalled, stays alive and unsettled until the
        # second has ended: the second sees its answers and its live claim
        finished.append(i)
        if len(finished) == len(qs):
            second_done.wait(60)

    def ask(name: str) -> None:
        try:
            got[name] = generate(qs, model, k=2, params=PARAMS, store=store,
                                 on_prompt=hold_last if name == "first" else None)
        finally:
            if name == "second":
                second_done.set()

    first = threading.Thread(target=ask, args=("first",))
    second = threading.Thread(target=ask, args=("second",))
    try:
        first.start()
        journals = tmp_path / "store" / "journals"
        while sum(len(p.read_bytes().splitlines()) for p in journals.glob("*.jsonl")) < 5:
            assert first.is_alive()
            time.sleep(0.01)
        second.start()
        while len(list((tmp_path / "store" / "claims").rglob("*.json"))) < 2:
            assert second.is_alive()
            time.sleep(0.01)
        gate.set()
        first.join(120)
        second.join(120)
        total = server.settle()
    finally:
        gate.set()
        second_done.set()
        server.stop()
    a, b = got["first"].stats, got["second"].stats  # type: ignore[attr-defined]
    assert b["requests"] == 0 and b["recovered"] == 0 and a["recovered"] == 0
    assert a["requests"] + b["requests"] == total == 10
