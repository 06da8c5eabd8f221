"""Claims on requests in flight (assay.models.claims): a request another live run claimed is not
sent, its answer is taken from the journal; a lapsed claim (its holder died) is taken over and
asked once; an object store's journal publishes an answer without waiting for the next one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from helpers.openai_server import OpenAIServer

from assay.hashing import canonical_json
from assay.models import generate
from assay.models import journal as journal_mod
from assay.models.claims import Claims
from assay.models.journal import Journal
from assay.stages.generate import journal_file
from assay.store import Store

PROMPTS = [f"What is {i} + {i + 2}?" for i in range(5)]
MODEL = {"kind": "openai", "base_url": "", "model": "tiny-ckpt", "max_retries": 0}


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    from assay.models import openai

    openai._BUDGETS.clear()
    srv = OpenAIServer(["tiny-ckpt"]).start()
    yield srv
    srv.stop()
    openai._BUDGETS.clear()


def ask(server: OpenAIServer, store: Store):
    return generate(PROMPTS, {**MODEL, "base_url": server.base_url}, k=2,
                    params={"temperature": 0.7, "max_tokens": 8}, store=store)


def answers(records: list[dict]) -> list[dict]:
    """The records without the wall-clock facts of the call that asked (latency, retries)."""
    return [{k: v for k, v in r.items() if k not in ("latency_s", "retries")} for r in records]


def claim_docs(store: Store) -> list[str]:
    return [e.rel for e in store.entries("claims")]


def test_a_request_claimed_by_a_live_run_is_not_sent_but_read_from_its_answer(
        server, tmp_path, monkeypatch):
    monkeypatch.setenv("ASSAY_CLAIM_POLL_S", "0.02")
    ref = ask(server, Store(tmp_path / "ref"))  # the answers, and their keys
    keys = [r["key"] for r in ref.records]
    store = Store(tmp_path / "st")
    rel = journal_file(ref.config)
    other = Claims(store, rel)  # another run, asking these right now
    assert other.claim(keys) == keys
    got: list = []
    t = threading.Thread(target=lambda: got.append(ask(server, store)))
    before = server.count()
    t.start()
    # the waiter's own claim document appears once it has looked (the old code never writes one)
    while len(claim_docs(store)) < 2 and t.is_alive():
        time.sleep(0.01)
    log = Journal(store, "gshard:" + rel.removeprefix("journals/").removesuffix(".jsonl"))
    for rec in ref.records:  # the other run's answers arrive, then its claim goes
        log.append({k: v for k, v in rec.items() if k != "prompt_index"})
    log.close()
    other.release()
    t.join(120)
    assert not t.is_alive()
    assert server.count(before) == 0  # nothing sent twice
    assert got[0].sent == 0
    assert got[0].records == ref.records
    assert claim_docs(store) == []


def test_a_lapsed_claim_is_taken_over_and_asked_once(server, tmp_path, monkeypatch):
    monkeypatch.setenv("ASSAY_CLAIM_POLL_S", "0.02")
    ref = ask(server, Store(tmp_path / "ref"))
    keys = [r["key"] for r in ref.records]
    store = Store(tmp_path / "st")
    hexd = journal_file(ref.config).removeprefix("journals/").removesuffix(".jsonl")
    # a claimant killed mid-run: its claim, never renewed, lapses 0.3 s (the store's clock)
    # after it was written; no answer was journalled
    dead = f"claims/{hexd}/dead.json"
    store.write_file(dead, canonical_json({"kind": "claim", "ttl": 0.3, "keys": keys,
                                           "host": "gone", "pid": -1}))
    before = server.count()
    g = ask(server, store)
    assert server.count(before) == len(keys)  # each asked once more, by the taker
    assert g.sent == len(keys)
    assert answers(g.records) == answers(ref.records)
    assert dead not in claim_docs(store) and claim_docs(store) == []


def test_two_claimants_never_both_keep_a_key(tmp_path):
    """Racing claimants (threads, each its own claim): every key kept by at most one, whatever
    the interleaving; a key both yielded is free for the next round."""
    store = Store(tmp_path / "st")
    keys = [f"gen:{i}" for i in range(20)]
    kept: list[list[str]] = [[] for _ in range(4)]
    go = threading.Barrier(4)
    claims = [Claims(store, "journals/ab.jsonl") for _ in range(4)]

    def race(i: int) -> None:
        go.wait()
        kept[i] = claims[i].claim(keys[i * 3:i * 3 + 10])

    ts = [threading.Thread(target=race, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    flat = [k for ks in kept for k in ks]
    assert len(flat) == len(set(flat))
    for c in claims:
        c.release()


def test_an_object_store_journal_publishes_an_answer_without_a_next_append(s3, monkeypatch):
    """The old journal kept a lone answer in memory until the next append or close: a run
    killed in a quiet spell (a slow request after it) lost it."""
    monkeypatch.setattr(journal_mod, "FSYNC_EVERY_S", 0.2)
    store = Store(s3.url("flush"))
    log = Journal(store, "gshard:ab")
    log.append({"key": "gen:1", "status": "ok", "completion": "a"})
    log.append({"key": "gen:2", "status": "ok", "completion": "b"})  # within the period
    end = time.monotonic() + 30  # a cap for the old code, which never publishes here
    while not Journal(store, "gshard:ab").load() and time.monotonic() < end:
        time.sleep(0.05)
    assert sorted(Journal(store, "gshard:ab").load()) == ["gen:1", "gen:2"]
    log.close()
    segs = store.entries("journals/ab")
    assert len(segs) == 1  # the timer's segment; close had nothing left to write
    assert json.loads(store.read_file(segs[0].rel).split(b"\n")[0])["rec"]["key"] == "gen:1"
