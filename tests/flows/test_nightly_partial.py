"""A partial night is not a pass (issue 38): samples the model gave no completion for make
`assay nightly` exit 4, the flow run Failed, an alert, a mark in nightly.md, nightly.json and the
history; the gate refuses to compare the subset, or with ``nightly.allow_partial`` says which
tasks it left out; the generation line counts what the server saw."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.openai_server import Fault, OpenAIServer
from helpers.webhook_receiver import webhook_receiver

from assay.errors import EXIT_OK, EXIT_PARTIAL

N_TASKS, K, FAILING = 20, 2, 5


@pytest.fixture
def server() -> Iterator[tuple[OpenAIServer, threading.Event]]:
    """Answers every question right; while ``failing`` is set, 503 for every fourth task, FAILING
    tasks in all (``max_retries: 0``: each such sample ends as a gen_error row)."""
    failing = threading.Event()

    def policy(body: dict[str, Any]) -> str:
        a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?",
                                  body["messages"][-1]["content"]).groups())
        return f"The answer is {a + b}."

    def faults(n: int, body: dict[str, Any]) -> Fault | None:
        i = int(re.search(r"What is (\d+)", body["messages"][-1]["content"]).group(1))
        # every fourth task: never five failures in a row, which would open the breaker
        return Fault(503, message="engine down") if failing.is_set() and i % 4 == 0 else None

    srv = OpenAIServer(policy=policy).start()
    srv.faults = faults
    try:
        yield srv, failing
    finally:
        srv.stop()


def _spec(tmp: Path, url: str, hook: str) -> Path:
    (tmp / "p.jsonl").write_text("".join(
        json.dumps({"id": f"t{i:02d}", "q": f"What is {i} + 1?", "gold": str(i + 1)}) + "\n"
        for i in range(N_TASKS)))
    p = tmp / "part.yaml"
    p.write_text(f"""name: part
sources:
  - name: m
    kind: file
    path: p.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt, max_retries: 0}}
      k: {K}
      params: {{temperature: 0.7, max_tokens: 32}}
    verifier: {{kind: numeric}}
nightly: {{notify: "{hook}"}}
""")
    return p


@pytest.mark.slow
def test_partial_night_fails_loudly_and_is_not_compared(
        prefect_server: str, tmp_path: Path, server: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    from assay.cli import main
    from assay.flows.nightly import nightly
    from assay.nightly.partial import NOT_COMPARED

    srv, failing = server
    with webhook_receiver() as hook:
        spec = _spec(tmp_path, srv.base_url, hook["url"])

        def args(night: str, *extra: str) -> list[str]:
            # a store per night: each night asks the server itself
            return ["nightly", str(spec), "--root", str(tmp_path / "n"), "--store",
                    str(tmp_path / f"store-{night}"), "--night", night, *extra]

        assert main(args("2026-12-01")) == EXIT_OK
        capsys.readouterr()
        failing.set()
        assert main(args("2026-12-02")) == EXIT_PARTIAL
        err = capsys.readouterr().err
        assert ("part: PARTIAL night 2026-12-02 (failed samples or nothing judged: not a pass):"
                in err), err
        assert f"m: {FAILING * K} sample(s) of {FAILING} of {N_TASKS} task(s) failed" in err, err
        # what the server saw: every sample asked once, the failing ones answered 503
        assert (f"generation: {N_TASKS * K} samples asked: {(N_TASKS - FAILING) * K} "
                f"completions, {FAILING * K} failed (HTTP 503: {FAILING * K}); "
                f"{N_TASKS * K} HTTP requests") in err, err
        night2 = tmp_path / "n" / "part" / "2026-12-02"
        md = (night2 / "nightly.md").read_text()
        assert "**PARTIAL NIGHT**" in md and "not compared with the baseline" in md
        assert "No regression detected" not in md
        doc = json.loads((night2 / "nightly.json").read_text())
        (src,) = doc["sources"]
        assert doc["partial"] == ["m"] and doc["regressions"] == []
        assert src["partial"]["left_out"] == [f"t{i:02d}" for i in range(0, N_TASKS, 4)]
        assert {m["verdict"] for m in src["metrics"]} == {NOT_COMPARED}
        hist = json.loads((tmp_path / "n" / "part" / "history.json").read_text())
        marks = {r["night"]: r["failed_samples"] for r in hist["rows"]}
        assert marks == {"2026-12-01": 0, "2026-12-02": FAILING * K}
        assert [m["subject"] for m in hook["messages"]] == [
            "assay nightly 2026-12-02: partial night (part)"]
        from assay.view.compare import night_doc

        page = night_doc(night2)  # what the night's page banner shows
        assert page is not None and page["verdict"] == "partial"
        assert page["partial"][0].startswith(f"m: {FAILING * K} sample(s)")
        assert hook["messages"][0]["partial"]["message"].startswith("m: 10 sample(s)")

        # opted in: compared on the tasks answered in full, against the last night that was
        # not partial; still a failed flow run
        state = nightly(specs=[str(spec)], root=str(tmp_path / "n"), night="2026-12-03",
                        store_root=str(tmp_path / "store-3"),
                        overrides=["nightly.allow_partial=true"], return_state=True)
    assert state.is_failed()
    assert "partial night (failed samples or nothing judged): part/m" in state.message
    doc = json.loads((tmp_path / "n" / "part" / "2026-12-03" / "nightly.json").read_text())
    (src,) = doc["sources"]
    assert src["baseline"] == "2026-12-01"  # the partial night is no baseline
    p1 = next(m for m in src["metrics"] if m["metric"] == "pass@1")
    assert p1["n_paired"] == N_TASKS - FAILING and p1["verdict"] != NOT_COMPARED
    md = (tmp_path / "n" / "part" / "2026-12-03" / "nightly.md").read_text()
    assert ("compared on the other tasks (nightly.allow_partial); "
            "left out: t00, t04, t08, t12, t16") in md
    assert len(hook["messages"]) == 2


@pytest.mark.slow
def test_another_root_reuses_the_store(prefect_server: str, tmp_path: Path, server: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """docs/nightly.md, "Fresh completions every night": another `--root` with the same night
    and store sends 0 requests; another `--store` or another `--night` asks the model again."""
    from assay.cli import main

    srv, _ = server
    spec = _spec(tmp_path, srv.base_url, "http://127.0.0.1:9/unused")
    text = (Path(__file__).resolve().parents[2] / "docs" / "nightly.md").read_text()
    assert "Another\n`--root` with the same night and store does **not** ask again" in text

    def night(root: str, store: str, date: str = "2026-12-01") -> int:
        before = srv.count()
        assert main(["nightly", str(spec), "--root", str(tmp_path / root), "--store",
                     str(tmp_path / store), "--night", date]) == EXIT_OK
        return srv.count() - before

    assert night("a", "s") == N_TASKS * K
    capsys.readouterr()
    assert night("b", "s") == 0
    assert (f"part: generation: 0 requests sent: all {N_TASKS * K} completions served from the "
            "cache") in capsys.readouterr().err
    assert night("c", "other") == N_TASKS * K
    assert night("a", "s", "2026-12-02") == N_TASKS * K
