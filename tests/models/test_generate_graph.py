"""Generation in the study graph: two sources generating from one server run concurrently (a
request of one is answered only once the other source's requests arrive: one after another would
never get there), with the same bytes as the chain; one server, one connection budget."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from helpers.openai_server import scripted_policy

from assay import stages
from assay.spec import parse_spec
from assay.store import Store

BOUND = 60  # seconds the held request waits for the other source (a bound, not a margin)
PAIRS = [(2, 3), (7, 6), (10, 20), (1, 1), (40, 2), (9, 9), (12, 30), (5, 8)]


def spec_text(base_url: str, max_connections: int = 2) -> str:
    src = """
  - name: {name}
    kind: file
    path: {name}.jsonl
    fields: {{prompt: question, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt, max_retries: 1}}
      k: 2
      params: {{temperature: 0.7, max_tokens: 8}}
      max_connections: {mc}
    verifier: {{kind: numeric}}"""
    srcs = "".join(src.format(name=n, url=base_url, mc=max_connections) for n in ("add", "sum"))
    return ("name: gen-graph\nsources:" + srcs
            + "\nmeasure:\n  pass_at: {k: 2}\n  compare: [{before: add, after: sum}]\n"
            "execution: {shard_rows: 6}\n")


def write_sources(tmp: Path) -> None:
    for name, fmt in (("add", "What is {a} + {b}?"), ("sum", "Add {a} and {b}.")):
        (tmp / f"{name}.jsonl").write_text("".join(
            json.dumps({"id": f"q{i}", "question": fmt.format(a=a, b=b), "gold": str(a + b)}) + "\n"
            for i, (a, b) in enumerate(PAIRS)))


def test_two_sources_generate_at_once_and_match_the_chain(server: Any, tmp_path: Path) -> None:
    write_sources(tmp_path)
    spec = parse_spec(spec_text(server.base_url), base_dir=str(tmp_path))
    other_seen = threading.Event()
    held: list[bool] = []
    first = threading.Lock()  # two lanes may ask at once: exactly one request is held

    def policy(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        if text.startswith("Add "):
            other_seen.set()
        elif first.acquire(blocking=False):  # the first "add" request waits for a "sum" one
            held.append(other_seen.wait(BOUND))
        return scripted_policy(body)

    server.policy = policy
    graph = stages.run_study(spec, Store(tmp_path / "graph"), progress=None)
    assert held == [True], "the second source did not generate while the first was generating"
    server.policy = scripted_policy
    chain = stages.run_study(spec, Store(tmp_path / "chain"), progress=None, mode="chain")
    assert [(r.stage, r.label, r.key) for r in graph.results] == \
        [(r.stage, r.label, r.key) for r in chain.results]
    assert [r.label for r in graph.results if r.stage == "generate"] == \
        ["add shard 1/3", "add shard 2/3", "add shard 3/3",
         "sum shard 1/3", "sum shard 2/3", "sum shard 3/3"]
    g_files = stages.report_files(Store(tmp_path / "graph"), graph.report)
    c_files = stages.report_files(Store(tmp_path / "chain"), chain.report)
    assert g_files == c_files
    for name in ("add", "sum"):
        assert stages.concat_rows(Store(tmp_path / "graph"), graph.graded[name]).to_arrow().equals(
            stages.concat_rows(Store(tmp_path / "chain"), chain.graded[name]).to_arrow())


def test_one_server_is_one_pool_across_shards_and_sources(server: Any, tmp_path: Path) -> None:
    """Six generate shards of two sources in flight at once against one server with
    ``max_connections: 2``: the server never sees more than 2 requests at a time."""
    write_sources(tmp_path)
    server.latency = 0.05
    spec = parse_spec(spec_text(server.base_url, max_connections=2), base_dir=str(tmp_path))
    stages.run_study(spec, Store(tmp_path / "s"), progress=None, max_parallel=8)
    assert len(server.requests) == 2 * len(PAIRS) * 2
    assert server.max_in_flight <= 2, server.max_in_flight
