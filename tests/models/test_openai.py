"""The openai backend against a real OpenAI-protocol server on 127.0.0.1: explicit parameters,
per-sample seeds, caching keyed by the model, retries and error rows, SIGKILL then resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.openai_server import Fault, latch

from assay.errors import GenerationError
from assay.models import SamplingParams, generate
from assay.models.journal import Journal, shard_id
from assay.verify import Numeric

QS = [f"What is {a} + {b}?" for a, b in [(2, 3), (7, 6), (10, 20), (1, 1), (40, 2)]]
PARAMS = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 64, "stop": ["\n\n"]}


def spec(server, model="tiny-ckpt", **kw):
    return {"kind": "openai", "base_url": server.base_url, "model": model, "max_retries": 4,
            "timeout_s": 30, **kw}  # far above any answer time


def test_every_parameter_and_a_seed_per_sample_are_sent(server, store):
    g = generate(QS, spec(server), k=3, params=PARAMS, seed=7, store=store)
    assert g.sent == 15 and server.count() == 15 and not g.errors
    for body in server.requests:
        assert body["_path"] == "/v1/chat/completions"
        # what the spec set and what reproducibility needs; the penalties left at the
        # protocol's defaults and n (1 by default) are not sent
        assert {k: v for k, v in body.items() if not k.startswith("_")} == {
            "model": "tiny-ckpt", "messages": body["messages"], "temperature": 0.7,
            "top_p": 0.95, "max_tokens": 64, "stop": ["\n\n"], "seed": body["seed"]}
    seeds = [[r["seed"] for r in g.records if r["prompt_index"] == i] for i in range(len(QS))]
    assert all(len(set(s)) == 3 for s in seeds)  # k samples of one prompt differ
    sent = sorted((b["messages"][-1]["content"], b["seed"]) for b in server.requests)
    assert sent == sorted((QS[r["prompt_index"]], r["seed"]) for r in g.records)
    assert g.records[0]["served_model"] == "tiny-ckpt" and g.records[0]["finish_reason"] == "stop"
    assert g.records[0]["completion_tokens"] == len(g.records[0]["completion"].split())
    # the same call again asks nothing and gives the same records (timings included: cached)
    again = generate(QS, spec(server), k=3, params=PARAMS, seed=7, store=store)
    assert again.sent == 0 and server.count() == 15 and again.records == g.records
    # another seed is another set of samples
    assert generate(QS, spec(server), k=3, params=PARAMS, seed=8, store=store).sent == 15


def test_a_model_name_change_recomputes_everything(server, store):
    generate(QS, spec(server), k=2, params=PARAMS, store=store)
    assert server.count() == 10
    other = generate(QS, spec(server, model="other-ckpt"), k=2, params=PARAMS, store=store)
    assert other.sent == 10 and server.count() == 20
    assert {b["model"] for b in server.requests[10:]} == {"other-ckpt"}
    # a pinned revision, a parameter or the API changes the key too
    assert generate(QS, spec(server, revision="step-200"), k=2, params=PARAMS,
                    store=store).sent == 10
    assert generate(QS, spec(server), k=2, params={**PARAMS, "top_p": 0.9}, store=store).sent == 10
    assert generate(QS, spec(server), k=2, params=PARAMS, store=store).sent == 0


def test_the_identity_is_what_the_spec_declares_and_the_listing_is_recorded(server, store):
    from assay.models.openai import OpenAIBackend

    b = OpenAIBackend(spec(server))
    assert b.identity() == {"backend": "openai", "base_url": server.base_url,
                            "model": "tiny-ckpt", "revision": None}
    generate(QS[:2], b, params=PARAMS, store=store)
    assert b.listing() == {"listed": True, "entry": {
        "id": "tiny-ckpt", "object": "model", "owned_by": "test", "root": "/ckpt/tiny-ckpt",
        "parent": None, "max_model_len": 2048}}
    # the listing is not keyed: another listing (a server that loads on demand and has
    # unloaded it) serves the same completions, and a cached call asks the server nothing
    server.models[:] = ["other-ckpt"]
    gets = []
    real = server.httpd.RequestHandlerClass.do_GET

    def counted(self):
        gets.append(self.path)
        return real(self)

    server.httpd.RequestHandlerClass.do_GET = counted
    try:
        again = generate(QS[:2], spec(server), params=PARAMS, store=store)
        assert again.sent == 0 and gets == []
        server.models[:] = ["tiny-ckpt"]
        # new weights behind one name are the user's to declare: a revision recomputes
        assert generate(QS[:2], spec(server, revision="step-900"), params=PARAMS,
                        store=store).sent == 2
    finally:
        server.httpd.RequestHandlerClass.do_GET = real


def test_429_honours_retry_after_and_cuts_concurrency(server, store):
    server.faults = [Fault(429, retry_after="0.4")] * 3
    from assay.models.openai import OpenAIBackend

    b = OpenAIBackend(spec(server))
    g = generate(QS[:1], b, params=PARAMS, store=store)
    assert not g.errors and g.records[0]["retries"] == 3
    times = [r["_t"] for r in server.requests]
    assert all(t2 - t1 >= 0.39 for t1, t2 in zip(times, times[1:]))  # Retry-After waited
    assert b.stats.min_limit < 16  # throttled: 16 * 0.8^2 before the third attempt -> 10
    assert g.stats["retries"] == {"429": 3} and g.stats["requests"] == 4


def test_500_and_timeouts_are_retried_to_the_same_answer(server, store):
    clean = generate(QS, spec(server), params=PARAMS, store=store).completions
    server.requests.clear()
    # a stall of 60 s against timeout_s 2: far apart, so a loaded machine cannot blur them
    faults = {0: Fault(500), 1: Fault(200, sleep=60), 2: Fault(503, retry_after="0")}
    server.faults = lambda n, body: faults.get(n)
    from assay.store import Store

    g = generate(QS, spec(server, timeout_s=2), params=PARAMS, store=Store(store.root / "other"))
    assert g.completions == clean and not g.errors
    # (a loaded machine may add a timeout, never remove one)
    assert server.count() == g.stats["requests"] == len(QS) + sum(r["retries"] for r in g.records)
    assert {**g.stats["retries"], "timeout": 1} == {"500": 1, "503": 1, "timeout": 1}
    assert g.stats["retries"]["timeout"] >= 1


def test_exhausted_retries_make_error_rows_that_are_never_graded_and_are_retried(server, store):
    bad = QS[2]
    server.faults = lambda n, body: (Fault(500, message="engine died")
                                     if body["messages"][-1]["content"] == bad else None)
    g = generate(QS, spec(server, max_retries=2), k=2, params={**PARAMS, "temperature": 0},
                 store=store)
    errs = g.errors
    assert len(errs) == 2 and all(e["completion"] is None and "engine died" in e["reason"]
                                  and "2 retries" in e["reason"] for e in errs)
    assert server.count() == 4 * 2 + 2 * 3

    def passes_empty(prompt, completion, reference):  # a grader that would pass an empty answer
        return completion == ""

    rows = g.rows(passes_empty, references=["5", "13", "30", "2", "42"])
    bad_rows = [r for r in rows if r["prompt"] == bad]
    assert [r["judge_status"] for r in bad_rows] == ["gen_error", "gen_error"]
    assert all(r["reward"] is None and "engine died" in r["reason"] for r in bad_rows)
    graded = generate(QS, spec(server, max_retries=2), k=2, params={**PARAMS, "temperature": 0},
                      store=store).rows(Numeric(), references=["5", "13", "30", "2", "42"])
    assert [r["reward"] for r in graded if r["prompt"] != bad] == [1.0] * 8
    # the rerun (server healthy again) asks only the two failed samples
    server.faults = []
    before = server.count()
    fixed = generate(QS, spec(server, max_retries=2), k=2, params={**PARAMS, "temperature": 0},
                     store=store)
    assert fixed.sent == 2 and server.count() - before == 2 and not fixed.errors
    assert fixed.completions[2] == ["The answer is 30. done"] * 2


def test_a_4xx_names_the_parameter_the_servers_message_and_the_spec_field(server, store):
    server.faults = [Fault(400, message="max_tokens is too large: 99999 > 2048")]
    with pytest.raises(GenerationError, match=r"HTTP 400: 'max_tokens is too large: 99999 > "
                       r"2048'.*refused parameter 'max_tokens', set by generate.params.max_tokens"):
        generate(QS[:1], spec(server), params=PARAMS, store=store)
    server.faults = [Fault(422, message="Unexpected fields in the request: {'top_k'}")]
    with pytest.raises(GenerationError, match=r"refused parameter 'top_k', set by "
                       r"generate.params.extra.top_k"):
        generate(QS[:1], spec(server), params={**PARAMS, "extra": {"top_k": 5}}, store=store)
    # a model the listing lacks is asked anyway (servers that load on demand list only what is
    # loaded): the server's own answer is quoted, with what the listing said
    with pytest.raises(GenerationError, match=r"HTTP 404: 'The model `nope` does not exist.'.*"
                       r"listed \['tiny-ckpt', 'other-ckpt'\].*refused parameter 'model', "
                       r"set by generate.model.model"):
        generate(QS[:1], spec(server, model="nope"), params=PARAMS, store=store)


def test_completions_api_and_truncation(server, store):
    g = generate(QS[:2], spec(server), api="completions",
                 params={"temperature": 0, "max_tokens": 2}, store=store)
    # lanes race: which prompt reaches the server first is not fixed
    assert {b["_path"] for b in server.requests} == {"/v1/completions"}
    assert sorted(b["prompt"] for b in server.requests) == sorted(QS[:2])
    assert [r["finish_reason"] for r in g.records] == ["length", "length"]
    rows = g.rows()
    assert [r["markers"]["truncated"] for r in rows] == [1.0, 1.0]
    assert rows[0]["markers"]["completion_tokens"] == 2.0
    assert SamplingParams().max_tokens == 512  # never the server's default of 16


def test_concurrency_is_bounded_by_max_connections(server, store):
    # the first 8 arrivals are held until 8 are in flight: reaching 8 is then certain, not a race
    eight = latch(lambda: server.in_flight >= 8)
    server.faults = lambda n, body: Fault(None, until=eight) if n < 8 else None
    g = generate([f"q{i}" for i in range(40)], spec(server, timeout_s=60), params=PARAMS,
                 max_connections=8, store=store)
    assert server.max_in_flight == 8 and server.gate_timeouts == 0 and not g.stats["retries"]


def test_every_client_shares_one_tls_context_per_setting(server, store, monkeypatch):
    # httpx builds a fresh SSL context for each client given verify=True/False (3-26 ms of CPU
    # each) and there is a client per lane per shard; contexts handed in are used as they are.
    # Counted where httpx's transport calls it (its module's own name for the function).
    import httpx._transports.default as transport

    from assay.models.openai import ssl_context

    built: list[object] = []
    real = transport.create_ssl_context

    def counting(verify=True, *a, **kw):
        if isinstance(verify, bool):
            built.append(verify)
        return real(verify, *a, **kw)

    monkeypatch.setattr(transport, "create_ssl_context", counting)
    for seed in (1, 2):  # two calls, eight lanes each
        g = generate([f"q{i}" for i in range(24)], spec(server), params=PARAMS, seed=seed,
                     max_connections=8, store=store)
        assert g.sent == 24 and not g.errors
    assert built == [] and ssl_context(False) is ssl_context(False)
    assert ssl_context(False).verify_mode.name == "CERT_NONE"
    assert ssl_context(True).verify_mode.name == "CERT_REQUIRED"


SCRIPT = textwrap.dedent("""
    import sys
    from assay.models import generate
    from assay.store import Store
    qs = [f"What is {i} + {i}?" for i in range(60)]
    generate(qs, {"kind": "openai", "base_url": sys.argv[1], "model": "tiny-ckpt"}, k=2,
             params={"temperature": 0.7, "max_tokens": 32}, max_connections=4,
             store=Store(sys.argv[2]))
""")


def test_sigkill_mid_generation_then_resume_sends_only_the_missing(server, store, tmp_path):
    server.latency = 0.05
    script = tmp_path / "gen.py"
    script.write_text(SCRIPT)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), server.base_url, str(store.root)],
                            env=env)
    jdir = store.root / "journals"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        files = list(jdir.glob("*.jsonl")) if jdir.exists() else []
        if files and files[0].read_bytes().count(b"\n") >= 30:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    first = server.settle()  # requests in flight at the kill finish on the server side
    qs = [f"What is {i} + {i}?" for i in range(60)]
    model = {"kind": "openai", "base_url": server.base_url, "model": "tiny-ckpt"}
    params = {"temperature": 0.7, "max_tokens": 32}
    from assay.models import make_backend

    config = {"identity": make_backend(model).identity(), "api": "chat",
              "params": SamplingParams(**params).model_dump(mode="json")}
    committed = len(Journal(store, shard_id(config)).load())
    assert 30 <= committed < 120 and first - committed <= 4  # at most the in-flight requests lost
    resumed = generate(qs, model, k=2, params=params, max_connections=4, store=store)
    assert resumed.sent == 120 - committed and server.count() - first == 120 - committed
    from assay.store import Store

    fresh = generate(qs, model, k=2, params=params, store=Store(tmp_path / "fresh"))
    assert resumed.completions == fresh.completions
    assert resumed.rows().checksum() == fresh.rows().checksum()


def test_length_finishes_are_what_the_rl_selection_cuts(server, store):
    import assay

    qs = ["hi", "yo", "hey", "Tell me a story about a lighthouse",
          "Describe the sea at night in detail"]
    g = generate(qs, spec(server), k=2, params={"temperature": 0, "max_tokens": 5}, store=store)
    truncated = [r["finish_reason"] == "length" for r in g.records]
    assert truncated == [False] * 6 + [True] * 4
    rows = g.rows(lambda row: float(row["rollout_index"] == 0))  # mixed groups, all in the band
    sel = assay.select(rows, band=(0.0, 1.0))
    gate = next(x for x in sel.gates if x.name == "cut-off reply")
    assert gate.rows_dropped == 4 and {r["prompt"] for r in sel.rows} == {"hi", "yo", "hey"}
    assert len(sel.rows) == 6


def test_samples_that_differ_at_temperature_zero_are_said(server, store, capsys):
    """A server that does not decode greedily at temperature 0 (batching): one warning line,
    and the report's generation summary counts the prompts; a greedy server raises neither."""
    from assay.models.specs import GenerateSpec
    from assay.report import generation_notes
    from assay.stages.report import generation_summary

    gspec = GenerateSpec.model_validate({"model": spec(server), "k": 3,
                                         "params": {"temperature": 0, "max_tokens": 8}})
    greedy = generate(QS[:2], spec(server), k=3, params=gspec.params, store=store)
    assert "temperature 0" not in capsys.readouterr().err
    assert generation_summary(greedy.rows(), gspec)["differ_at_t0"] == 0
    server.policy = lambda body: f"answer {body['seed'] % 2}"  # the seed leaks into the text
    noisy = generate(QS[2:4], spec(server), k=3, params=gspec.params, store=store)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert "temperature 0, yet the 3 samples of 2 of 2 prompts differ" in err
    summary = generation_summary(noisy.rows(), gspec)
    assert summary["differ_at_t0"] == 2 and summary["stop_trimmed"] == 0
    assert "the 3 samples of 2 prompt(s) differ" in generation_notes("qa", summary)[0]
