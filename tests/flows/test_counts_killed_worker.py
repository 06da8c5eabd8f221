"""run.json's request counts after a killed worker: the rerun's ``generation.total`` holds the
requests the killed worker sent before its last journalled answer (issue 47: "400 reported,
412 reached the server").

A child process runs the study (two generate shards, side by side) and exits hard the moment its
K-th answer is journalled; the rerun here writes run.json. The loopback server counts what
reached it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.openai_server import OpenAIServer

N, K, CONNS = 16, 5, 3

CHILD = textwrap.dedent("""
    import os, sys
    from assay import stages
    from assay.models import journal
    from assay.spec import load_spec
    from assay.store import Store

    spec, root, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    answers = [0]
    append = journal.Journal.append

    def append_then_die(self, rec):
        append(self, rec)
        if str(rec.get("key", "")).startswith("gen:"):
            answers[0] += 1
            if answers[0] == k:
                os._exit(9)  # no finally, no flush: as a SIGKILL leaves it

    journal.Journal.append = append_then_die
    stages.run_study(load_spec(spec), Store(root), progress=None)
    os._exit(3)  # never reached
""")


def test_run_json_counts_the_requests_of_a_killed_worker(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from assay import stages
    from assay.spec import load_spec
    from assay.stages.finish import finish_run
    from assay.store import Store

    monkeypatch.setenv("ASSAY_CLAIM_LEASE_S", "1")  # the dead worker's claims lapse in a second
    srv = OpenAIServer(["tiny-ckpt"], latency=0.02).start()
    (tmp_path / "p.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "q": f"What is {i} + 2?", "gold": str(i + 2)}) + "\n"
        for i in range(N)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
name: killedcounts
execution: {{shard_rows: {N // 2}}}
sources:
  - name: g
    kind: file
    path: p.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{srv.base_url}", model: tiny-ckpt, max_retries: 2}}
      k: 1
      params: {{temperature: 0.7, max_tokens: 8}}
      max_connections: {CONNS}
    verifier: {{kind: numeric}}
measure: {{pass_at: {{k: 1}}}}
""")
    root = tmp_path / "store"
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, str(spec), str(root), str(K)],
                               env={**os.environ}, cwd=tmp_path, capture_output=True, text=True,
                               timeout=300)
        assert child.returncode == 9, child.stderr[-3000:]
        killed = srv.settle()
        store = Store(root)
        run = stages.run_study(load_spec(spec), store, progress=None)
        finish_run(store, load_spec(spec), run, tmp_path / "out", 0.0)
        total_reached = srv.settle()
        samples = [json.dumps([b["messages"], b["seed"]]) for b in srv.requests]
    finally:
        srv.stop()
    gen = json.loads((tmp_path / "out" / "run.json").read_text())["generation"]
    total = gen["total"]
    # no faults: a sample the server saw twice was in flight when the worker died (sent, never
    # journalled) and asked again by the rerun; those are the only requests run.json leaves out
    assert len(set(samples)) == N and total_reached == len(samples)
    unanswered = total_reached - N
    assert 0 <= unanswered <= 2 * CONNS  # two shards, each its own connections
    assert total["requests"] == total_reached - unanswered == N
    # completions received by this run; the K the killed worker received are journalled rows
    assert total["recovered"] == K and total["completions"] == N - K
    assert total["requests"] - total["recovered"] == total_reached - killed  # the rerun's own
    shards = gen["shards"].values()
    assert len(shards) == 2 and sum(s["requests"] for s in shards) == total["requests"]
    assert sum(s["recovered"] for s in shards) == K
