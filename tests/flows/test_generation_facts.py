"""Retries and failures of generation are facts of the run: run.json, the report's Generation
table and the generate task run's artifact, through ``run_spec`` on a real Prefect server and a
real OpenAI-protocol server on 127.0.0.1 that answers some first attempts with 429 and one
prompt always with 500."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from helpers.openai_server import Fault, OpenAIServer  # noqa: E402


def test_requests_retries_and_failures_reach_run_json_the_report_and_the_task_run(
        prefect_server: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType

    from assay.flows.study import run_spec

    srv = OpenAIServer(["tiny-ckpt"]).start()
    seen: set = set()
    lock = threading.Lock()

    def faults(n, body):
        q = body["messages"][-1]["content"]
        if q == "What is 3 + 1?":
            return Fault(500, message="engine died")
        with lock:
            key = (q, body["seed"])
            if key in seen or "+ 1?" not in q:
                return None
            seen.add(key)
        return Fault(429, retry_after="0")

    srv.faults = faults
    (tmp_path / "p.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "q": f"What is {i} + {1 if i % 2 else 2}?",
                    "gold": str(i + (1 if i % 2 else 2))}) + "\n" for i in range(8)))
    (tmp_path / "spec.yaml").write_text(f"""
name: genfacts
sources:
  - name: g
    kind: file
    path: p.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{srv.base_url}", model: tiny-ckpt, max_retries: 2}}
      k: 2
      params: {{temperature: 0.7, max_tokens: 8}}
      max_connections: 4
    verifier: {{kind: numeric}}
measure: {{pass_at: {{k: 1}}}}
""")
    try:
        info = run_spec(str(tmp_path / "spec.yaml"), str(tmp_path / "out"), str(tmp_path / "store"))
    finally:
        srv.stop()
    run_json = json.loads((tmp_path / "out" / "run.json").read_text())
    total = run_json["generation"]["total"]
    # odd prompts 1, 5, 7 x 2 samples: one 429 each; prompt 3's 2 samples: 500 on 3 attempts
    assert total["requests"] == srv.count() == 16 + 6 + 4
    assert total["retries"] == {"429": 6, "500": 4}
    assert total["gave_up"] == 2 and total["errors"] == 2 and total["breaker"] == []
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| 14 | 2 (HTTP 500: 2) |" in md
    assert info["generation"] == run_json["generation"]
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["table"])))
    gen = [a for a in arts if (a.description or "").startswith("generate g shard")]
    assert gen and gen[0].task_run_id is not None
    rows = json.loads(gen[0].data) if isinstance(gen[0].data, str) else gen[0].data
    assert rows[0]["gave_up"] == 2 and "500: 4" in rows[0]["retries"]
