"""Two runs of one spec at once on one store (two cron entries, a deployment and a CLI run) send
each request once (issue 49 item 3): one claims it, the other waits for its answer.

Each run is its own process, as in production. The loopback server holds every completion until
both processes have a claim document in the store (a latch, not a sleep): so the runs overlap
for certain, and on the old code (no claims) both send every request, which the count shows.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.openai_server import Fault, OpenAIServer

from assay.store import Store

ROOT = Path(__file__).resolve().parents[2]
RECORDS = [{"id": f"q{i}", "question": f"What is {i} + {2 * i + 1}?", "gold": str(3 * i + 1)}
           for i in range(8)]
K = 2
SPEC = """
name: overlap
sources:
  - name: ckpt
    kind: file
    path: prompts.jsonl
    fields: {{prompt: question, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt, max_retries: 0, timeout_s: 120}}
      k: {k}
      params: {{temperature: 0.7, max_tokens: 8}}
      max_connections: 4
    verifier: {{kind: numeric}}
measure:
  pass_at: {{k: 2}}
execution: {{shard_rows: 8}}
"""
#: one run in a process of its own: its report files and graded rows, hashed, on stdout
RUN = """
import hashlib, json, sys
from assay import stages
from assay.spec import load_spec
from assay.store import Store
store = Store(sys.argv[2])
done = stages.run_study(load_spec(sys.argv[1]), store, progress=None)
files = stages.report_files(store, done.report)
rows = stages.concat_rows(store, done.graded["ckpt"]).to_arrow().to_pylist()
print(json.dumps({"report": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())},
                  "rows": hashlib.sha256(json.dumps(rows, sort_keys=True, default=str)
                                         .encode()).hexdigest()}))
"""


def claimants(store: Store) -> set[int]:
    """The processes with a claim document in ``store`` now."""
    pids = set()
    for e in store.entries("claims"):
        data = store.read_file(e.rel)
        try:
            pids.add(json.loads(data)["pid"]) if data else None
        except (ValueError, KeyError):
            continue
    return pids


@pytest.fixture
def gated_server(request: pytest.FixtureRequest) -> Iterator[tuple[OpenAIServer, threading.Event,
                                                                    list[Store]]]:
    """A server whose completions wait until ``opened`` is set: by a watcher thread once two
    processes hold claims in the store put in the list. The cap only bounds the old code (which
    never claims); it is long enough that two processes starting on a loaded machine (imports,
    a cold S3 client) reach their claims well inside it: the gate opens on the claims, not on it."""
    srv = OpenAIServer(["tiny-ckpt"]).start()
    opened, done = threading.Event(), threading.Event()
    watched: list[Store] = []
    srv.faults = lambda n, body: Fault(None, until=opened.is_set, until_s=100)

    def watch() -> None:
        while not done.wait(0.05):
            if watched and len(claimants(watched[0])) >= 2:
                opened.set()
                return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    yield srv, opened, watched
    done.set()
    t.join()
    srv.stop()


def two_runs_at_once(tmp_path: Path, server: OpenAIServer, location: str) -> list[dict]:
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(url=server.base_url, k=K))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
           "ASSAY_CLAIM_POLL_S": "0.05"}
    procs = [subprocess.Popen([sys.executable, "-c", RUN, str(spec), location], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def asked_by_key(server: OpenAIServer) -> Counter[str]:
    """Completion requests the server received, by what the request asks (prompt and seed)."""
    return Counter(hashlib.sha256(json.dumps([b["messages"], b["seed"]]).encode()).hexdigest()
                   for b in server.requests)


def check(server: OpenAIServer, opened: threading.Event, outs: list[dict]) -> None:
    asked = asked_by_key(server)
    assert len(asked) == len(RECORDS) * K  # every request reached the server...
    assert max(asked.values()) == 1, f"asked twice: {sum(n > 1 for n in asked.values())} keys"
    assert opened.is_set()  # ...while both runs held claims: they overlapped
    assert server.gate_timeouts == 0
    assert outs[0] == outs[1]  # both runs' report files and graded rows, byte for byte


def test_two_runs_at_once_on_a_local_store_ask_each_request_once(tmp_path, gated_server):
    server, opened, watched = gated_server
    watched.append(Store(tmp_path / "store"))
    check(server, opened, two_runs_at_once(tmp_path, server, str(tmp_path / "store")))
    assert claimants(watched[0]) == set()  # released at the end


def test_two_runs_at_once_on_s3_ask_each_request_once(tmp_path, gated_server, s3):
    server, opened, watched = gated_server
    watched.append(Store(s3.url("overlap")))
    check(server, opened, two_runs_at_once(tmp_path, server, s3.url("overlap")))
    assert claimants(watched[0]) == set()
