"""Generation against a real OpenAI-compatible server nobody here wrote: ``transformers serve``
on a tiny local chat checkpoint, pinned to it and loading it on demand.

Each check would fail on what the issue found: ``stop: []`` refused (HTTP 400), an empty
``/v1/models`` refused, the stop string kept in the text, a stop that waits for every request,
a cached rerun that asks the server. Counts are read at the server (its access log) and from
assay's own request count. Both servers start once for the module and are killed at its end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.tiny_chat import TransformersServe, build_tiny_chat_lm

from assay.errors import GenerationError
from assay.models import generate
from assay.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
QS = ["What is 2 + 3?", "Name a colour.", "What is 7 * 6?", "Say hello."]
CHAT = "POST /v1/chat/completions"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_chat_lm(tmp_path_factory.mktemp("ckpt") / "tiny-chat")


@pytest.fixture(scope="module")
def servers(ckpt: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[TransformersServe, TransformersServe]]:
    """(pinned to the checkpoint, on demand): started side by side, killed at the end."""
    logs = tmp_path_factory.mktemp("serve-logs")
    pinned = TransformersServe(str(ckpt), log=logs / "pinned.log")
    on_demand = TransformersServe(None, log=logs / "on-demand.log")
    try:
        pinned.launch()
        on_demand.launch()
        yield pinned.ready(), on_demand.ready()
    finally:
        pinned.stop()
        on_demand.stop()


@pytest.fixture()
def pinned(servers: tuple[TransformersServe, TransformersServe]) -> TransformersServe:
    return servers[0]


def model(srv: TransformersServe, name: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "openai", "base_url": srv.base_url, "model": name, "max_retries": 1,
            "timeout_s": 120, **kw}


def until(pred: Callable[[], bool], bound: float, what: str) -> None:
    end = time.monotonic() + bound
    while not pred():
        assert time.monotonic() < end, f"{what}: not within {bound:g} s"
        time.sleep(0.05)


def test_chat_without_a_stop_list_and_the_listing_recorded(pinned: TransformersServe,
                                                           ckpt: Path, tmp_path: Path) -> None:
    before = pinned.seen(CHAT)
    g = generate(QS, model(pinned, str(ckpt)), params={"temperature": 0, "max_tokens": 8},
                 store=Store(tmp_path))
    assert not g.errors, g.errors  # was HTTP 400 on "stop": [] for every request
    assert g.stats["requests"] == len(QS)
    until(lambda: pinned.seen(CHAT) - before == len(QS), 10, "the server's count")
    from assay.models.generation import shared_backend

    listing = shared_backend(model(pinned, str(ckpt))).listing()
    assert listing["listed"] is True and listing["entry"]["id"] == str(ckpt)


def test_a_stop_string_is_cut_as_openai_and_vllm_return_it(pinned: TransformersServe, ckpt: Path,
                                                           tmp_path: Path) -> None:
    store = Store(tmp_path)
    greedy = generate(QS[:1], model(pinned, str(ckpt)),
                      params={"temperature": 0, "max_tokens": 12}, store=store).completions[0][0]
    assert greedy is not None
    # a short ASCII piece first met a few characters in: the text before it is not empty
    at = next((i for i in range(2, len(greedy) - 1)
               if greedy[i:i + 2].isascii() and greedy[i:i + 2].isalpha()
               and greedy.find(greedy[i:i + 2]) == i), None)
    assert at is not None, f"no stop candidate in {greedy!r}"
    stop_s = greedy[at:at + 2]
    g = generate(QS[:1], model(pinned, str(ckpt)),
                 params={"temperature": 0, "max_tokens": 12, "stop": [stop_s]}, store=store)
    rec = g.records[0]
    assert rec["finish_reason"] == "stop" and rec["completion"] == greedy[:at]
    assert rec["stop_trimmed"] is not None and rec["stop_trimmed"].startswith(stop_s)
    assert g.rows()[0]["markers"]["stop_trimmed"] == 1.0
    from assay.models.specs import GenerateSpec
    from assay.report import generation_notes
    from assay.stages.report import generation_summary

    gspec = GenerateSpec.model_validate({"model": model(pinned, str(ckpt)), "params": {
        "temperature": 0, "max_tokens": 12, "stop": [stop_s]}})
    summary = generation_summary(g.rows(), gspec)
    assert summary["stop_trimmed"] == 1
    assert "1 completion(s) kept the stop string" in generation_notes("qa", summary)[0]


def test_k_seeded_samples_are_reproducible(pinned: TransformersServe, ckpt: Path,
                                           tmp_path: Path) -> None:
    params = {"temperature": 1.0, "max_tokens": 6}
    a = generate(QS[:2], model(pinned, str(ckpt)), k=3, params=params, seed=3,
                 store=Store(tmp_path / "a"))
    b = generate(QS[:2], model(pinned, str(ckpt)), k=3, params=params, seed=3,
                 store=Store(tmp_path / "b"))
    assert not a.errors and a.completions == b.completions  # the seed is honoured
    assert any(len(set(c)) > 1 for c in a.completions)  # and the k samples are k draws


def test_an_unknown_model_is_the_servers_own_error_quoted(pinned: TransformersServe,
                                                          tmp_path: Path) -> None:
    with pytest.raises(GenerationError, match=r"HTTP 400: \"Server is pinned to .*requested "
                       r"'nope'.*listed \[.*\].*refused parameter 'model', set by "
                       r"generate.model.model"):
        generate(QS[:1], model(pinned, "nope"), params={"max_tokens": 4}, store=Store(tmp_path))


def test_on_demand_lists_nothing_is_not_refused_and_a_cached_rerun_asks_nothing(
        servers: tuple[TransformersServe, TransformersServe], ckpt: Path,
        tmp_path: Path) -> None:
    srv = servers[1]
    assert httpx.get(f"{srv.base_url}/models", timeout=10).json()["data"] == []
    from assay.models.openai import OpenAIBackend

    b = OpenAIBackend(model(srv, str(ckpt)))
    store = Store(tmp_path)
    g = generate(QS[:2], b, params={"temperature": 0, "max_tokens": 6}, store=store)
    assert not g.errors and g.sent == 2
    assert b.listing() == {"listed": False, "models": []}  # recorded as the server said it
    gets, posts = srv.seen("GET /v1/models"), srv.seen(CHAT)
    again = generate(QS[:2], model(srv, str(ckpt)), params={"temperature": 0, "max_tokens": 6},
                     store=store)
    assert again.sent == 0 and again.completions == g.completions
    time.sleep(0.3)  # a request would have been logged by now (the log is unbuffered)
    assert (srv.seen("GET /v1/models"), srv.seen(CHAT)) == (gets, posts)


def test_a_judge_verifier_grades_through_the_server(pinned: TransformersServe, ckpt: Path,
                                                    tmp_path: Path) -> None:
    from assay.verify.judge import JudgeVerifier

    judge = JudgeVerifier(model=model(pinned, str(ckpt)), max_tokens=6,
                          store=str(tmp_path / "judge"))
    rows = [{"task_id": f"q{i}", "prompt": q, "final_text": "5",
             "privileged": {"reference": "5"}} for i, q in enumerate(QS)]
    before = pinned.seen(CHAT)
    verdicts = judge.grade_batch(rows)
    # a random model writes no GRADE line: unjudged, never a failed call (was 4 of 4 errors)
    assert [v.status for v in verdicts] == ["no_verdict"] * len(QS), verdicts
    until(lambda: pinned.seen(CHAT) - before == len(QS), 10, "the judge's requests")


STUDY = """
name: served
sources:
  - name: qa
    kind: file
    path: qa.jsonl
    fields: {{prompt: q, reference: gold}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: "{ckpt}", max_retries: 1}}
      params: {{temperature: 0, max_tokens: 40}}
      max_connections: 4
    verifier: {{kind: exact_match}}
"""
N = 12


def _journalled(store: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (store / "journals").glob("*.jsonl"))


def _run(folder: Path, home: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("assay")), "run", "s.yaml", "--output", "out",
         "--store", "store", "--prefect-home", str(home), "--no-view"],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)


def _interrupt(folder: Path, home: Path, store: Path, sig: signal.Signals, after: int,
               srv: TransformersServe) -> int:
    """Start `assay run`, send ``sig`` once ``after`` completions are journalled; returns how
    many are journalled once it exited (checked: its exit status, that it exited at once, and
    that nothing more reached the server after it)."""
    p = _run(folder, home)
    try:
        until(lambda: (store / "journals").is_dir() and _journalled(store) >= after, 240,
              f"{after} completions journalled")
        t0 = time.monotonic()
        os.kill(p.pid, sig)
        out, _ = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    assert p.returncode == 128 + sig, out
    # without the stop it waits for every remaining request (about a second each here)
    assert took < 5, f"{sig.name}: the exit took {took:.1f} s"
    print(f"{sig.name}: exit {took:.2f} s after the signal", file=sys.stderr)
    answered = _journalled(store)
    assert answered < N, "the run finished before the stop: the test proves nothing"
    posts = srv.seen(CHAT)
    time.sleep(0.5)
    assert srv.seen(CHAT) == posts  # nothing more reached the server after the exit
    return answered


def test_ctrl_c_and_sigterm_stop_at_once_the_rerun_asks_only_the_rest_then_nothing(
        pinned: TransformersServe, ckpt: Path, tmp_path: Path) -> None:
    (tmp_path / "qa.jsonl").write_text("".join(
        json.dumps({"q": f"Question {i}: what is {i} + {i}?", "gold": str(2 * i)}) + "\n"
        for i in range(N)))
    (tmp_path / "s.yaml").write_text(STUDY.format(url=pinned.base_url, ckpt=ckpt))
    home, store = tmp_path / "prefect-home", tmp_path / "store"
    # the server answers one request at a time: stop once two are journalled, then two more
    first = _interrupt(tmp_path, home, store, signal.SIGINT, 2, pinned)
    answered = _interrupt(tmp_path, home, store, signal.SIGTERM, first + 2, pinned)
    posts = pinned.seen(CHAT)
    again = _run(tmp_path, home)
    out, _ = again.communicate(timeout=240)
    assert again.returncode == 0, out
    facts = json.loads((tmp_path / "out" / "run.json").read_text())["generation"]["total"]
    # only the rest was asked; the stopped run's requests are counted from its journal
    assert facts["requests"] - facts["recovered"] == N - answered
    rec = facts["recovered"]
    assert 0 < rec <= answered  # what the interrupted runs journalled before they stopped
    rest = N - answered  # the summary line: each count its own number, as the server saw them
    assert (f"generation: {rest} samples asked: {rest} completions, 0 failed; {rest + rec} HTTP "
            f"requests ({rec} sent by an earlier run that was stopped or killed); {N} rows in all"
            ) in out, out
    until(lambda: pinned.seen(CHAT) - posts == N - answered, 10, "the rerun's requests")
    # everything cached: no request at all, not even the listing
    gets = pinned.seen("GET /v1/models")
    cached = _run(tmp_path, home)
    out, _ = cached.communicate(timeout=120)
    assert cached.returncode == 0 and "0 requests sent" in out, out
    time.sleep(0.3)
    assert (pinned.seen(CHAT), pinned.seen("GET /v1/models")) == (posts + N - answered, gets)
