"""End to end: a spec whose sources generate their completions, through assay.stages.run_study,
against the OpenAI-protocol server on 127.0.0.1 (and a function backend for HumanEval)."""

from __future__ import annotations

import json

from helpers.openai_server import Fault

from assay import stages
from assay.spec import parse_spec
from assay.store import Store

PAIRS = [(2, 3), (7, 6), (10, 20), (1, 1), (40, 2), (9, 9), (12, 30), (5, 8)]


def write_prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {a} + {b}?",
                                        "gold": str(a + b)}) + "\n"
                            for i, (a, b) in enumerate(PAIRS)))
    return path


def spec_text(server, model="tiny-ckpt", k=4):
    return f"""
name: gen-e2e
sources:
  - name: ckpt
    kind: file
    path: prompts.jsonl
    fields: {{prompt: question, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{server.base_url}", model: {model}, max_retries: 1}}
      api: chat
      k: {k}
      params: {{temperature: 0.7, top_p: 0.95, max_tokens: 4, stop: ["\\n\\n"]}}
      seed: 0
      max_connections: 8
      system: "Answer briefly."
    verifier: {{kind: numeric}}
measure:
  pass_at: {{k: 2}}
execution: {{shard_rows: 12}}
"""


def run(server, tmp_path, store, **kw):
    spec = parse_spec(spec_text(server, **kw), base_dir=str(tmp_path))
    return stages.run_study(spec, store, progress=None)


def graded_rows(store, run_):
    return stages.concat_rows(store, run_.graded["ckpt"])


def test_generate_then_grade_then_report(server, tmp_path):
    write_prompts(tmp_path)
    store = Store(tmp_path / "store")
    first = run(server, tmp_path, store)
    rows = graded_rows(store, first)
    assert len(rows) == 32 and len(server.requests) == 32
    # 12 rows / k=4
    assert [r["stage"] for r in map(lambda x: x.to_dict(), first.results)].count("generate") == 3
    for body in server.requests:
        assert body["messages"][0] == {"role": "system", "content": "Answer briefly."}
        assert ((body["temperature"], body["top_p"], body["max_tokens"], body["stop"])
                == (0.7, 0.95, 4, ["\n\n"]))
    # the scripted model slips on a quarter of the seeds: the grade must say exactly that
    for r in rows:
        seed = r["privileged"]["generation"]["seed"]
        assert r["reward"] == (0.0 if seed % 4 == 0 else 1.0), r
        assert r["privileged"]["reference"] == str(sum(PAIRS[int(r["task_id"][1:])]))
        assert r["markers"]["truncated"] == 1.0 and r["markers"]["completion_tokens"] == 4.0
    assert sorted({r["rollout_index"] for r in rows}) == [0, 1, 2, 3]
    files = stages.report_files(store, first.report)
    md = files["report.md"].decode()
    assert "## Generation" in md and "| ckpt | openai:tiny-ckpt | 4 | 32 | 0 | 100.0% |" in md
    doc = json.loads(files["report.json"])
    assert doc["sources"][0]["generation"]["completion_tokens_total"] == 32 * 4
    # a rerun is served from the caches: no request reaches the model
    again = run(server, tmp_path, store)
    assert len(server.requests) == 32 and not again.computed_stages
    # a new model name recomputes every completion
    other = run(server, tmp_path, store, model="other-ckpt")
    assert (len(server.requests) == 64
            and {b["model"] for b in server.requests[32:]} == {"other-ckpt"})
    assert any(s.startswith("generate") for s in other.computed_stages)


def test_failed_requests_are_ungraded_then_retried_to_the_clean_result(server, tmp_path):
    write_prompts(tmp_path)
    clean = run(server, tmp_path, Store(tmp_path / "clean"))
    clean_report = stages.report_files(Store(tmp_path / "clean"), clean.report)
    server.requests.clear()
    server.faults = lambda n, body: (Fault(500, message="oom")
                                     if "7 + 6" in body["messages"][-1]["content"] else None)
    store = Store(tmp_path / "store")
    broken = run(server, tmp_path, store)
    rows = graded_rows(store, broken)
    bad = [r for r in rows if r["task_id"] == "q1"]
    assert (len(bad) == 4
            and all(r["judge_status"] == "gen_error" and r["reward"] is None for r in bad))
    assert all("HTTP 500: oom" in r["reason"] for r in bad)
    md = stages.report_files(store, broken.report)["report.md"].decode()
    assert "| ckpt | openai:tiny-ckpt | 4 | 28 | 4 (HTTP 500: 4) |" in md
    assert "retries by status and requests that gave up are facts of each run" in md
    # run.json's facts: every request the server saw, the retries by status, the gave-ups
    facts = stages.generation_facts([r for r in broken.results if r.stage == "generate"])
    assert facts["total"] == {"sent": 32, "requests": len(server.requests), "recovered": 0,
                              "completions": 28, "failures": {"HTTP 500": 4},
                              "retries": {"500": 4}, "gave_up": 4, "not_sent": 0, "errors": 4,
                              "stop_trimmed": 0, "differ_at_t0": 0, "breaker": []}
    server.faults = []
    n = len(server.requests)
    fixed = run(server, tmp_path, store)
    assert len(server.requests) - n == 4  # only the failed samples are asked again
    assert stages.report_files(store, fixed.report) == clean_report
    facts = stages.generation_facts([r for r in fixed.results if r.stage == "generate"])
    assert facts["total"]["requests"] == 4 and facts["total"]["retries"] == {}
    assert sum(d["cached"] for d in facts["shards"].values()) == 2  # the two clean shards


def canonical(prompts):
    """A 'model' answering each HumanEval problem with its canonical solution (or a wrong one)."""
    from assay.offline import humaneval

    by_prompt = {p.prompt: p.canonical_solution for p in humaneval().problems}
    return [by_prompt[p] if i % 2 == 0 else "    return None\n" for i, p in enumerate(prompts)]


def test_humaneval_takes_generate_in_place_of_the_seeded_policy(tmp_path):
    spec = parse_spec(f"""
name: he-gen
sources:
  - name: he
    kind: humaneval
    steps: [{{op: slice, start: 0, stop: 3}}]
    generate:
      model: {{kind: function, callable: "{__name__}:canonical"}}
      api: completions
      k: 2
measure: {{pass_at: {{k: 1}}}}
""", base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    res = stages.run_study(spec, store, progress=None)
    rows = graded_rows_he(store, res)
    assert len(rows) == 6
    assert [r["reward"] for r in rows] == [1.0, 0.0] * 3  # the sandbox ran the generated code
    assert rows[0]["task_id"] == "HumanEval/0" and rows[0]["privileged"]["reference"]["entry_point"]


def graded_rows_he(store, res):
    return stages.concat_rows(store, res.graded["he"])


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_the_shipped_openai_config_runs_against_a_server(server, tmp_path, monkeypatch):
    text = (ROOT / "configs" / "generate_openai.yaml").read_text()
    text = text.replace("http://127.0.0.1:8000/v1", server.base_url).replace("my-ckpt", "tiny-ckpt")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    spec = parse_spec(text, base_dir=str(ROOT / "configs"))
    store = Store(tmp_path / "store")
    res = stages.run_study(spec, store, progress=None)
    rows = graded_rows(store, res)
    assert len(rows) == 160 and len(server.requests) == 160
    assert {b["max_tokens"] for b in server.requests} == {512}
    assert {b["_auth"] for b in server.requests} == {"Bearer test-key"}
    md = stages.report_files(store, res.report)["report.md"].decode()
    assert "| ckpt | openai:tiny-ckpt@step-2000 | 4 | 160 | 0 | 0.0% |" in md


def test_the_shipped_hf_config_runs_on_a_tiny_local_model(tiny_lm_dir, tmp_path):
    text = (ROOT / "configs" / "generate_hf.yaml").read_text()
    text = (text.replace("./checkpoints/step-2000", str(tiny_lm_dir)).replace("stop: 20", "stop: 2")
            .replace("max_tokens: 384", "max_tokens: 8"))
    spec = parse_spec(text, base_dir=str(ROOT / "configs"))
    store = Store(tmp_path / "store")
    res = stages.run_study(spec, store, progress=None)
    rows = graded_rows_he(store, res)
    assert len(rows) == 4 and all(r["reward"] == 0.0 for r in rows)  # random weights write no code
    assert all(r["markers"]["completion_tokens"] <= 8 for r in rows)
    assert res.computed_stages and not stages.run_study(spec, store, progress=None).computed_stages


KILL_SCRIPT = """
import sys
from assay import stages
from assay.spec import parse_spec
from assay.store import Store
spec = parse_spec(open(sys.argv[1]).read(), base_dir=sys.argv[2])
stages.run_study(spec, Store(sys.argv[3]), progress=None)
"""


def test_sigkill_inside_the_generate_stage_then_resume(server, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    server.latency = 0.05
    (tmp_path / "prompts.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "question": f"What is {i} + {2 * i}?", "gold": str(3 * i)})
        + "\n"
        for i in range(60)))
    text = (spec_text(server, k=2).replace("shard_rows: 12", "shard_rows: 1000")
            .replace("max_connections: 8", "max_connections: 4"))
    (tmp_path / "spec.yaml").write_text(text)
    (tmp_path / "run.py").write_text(KILL_SCRIPT)
    store = Store(tmp_path / "store")
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "spec.yaml"),
                             str(tmp_path), str(store.root)], env=env)
    deadline = time.monotonic() + 120
    journal = store.root / "journals"
    while time.monotonic() < deadline:
        files = list(journal.glob("*.jsonl")) if journal.exists() else []
        if files and files[0].read_bytes().count(b"\n") >= 40:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    seen = server.settle()  # every request the killed run had sent has arrived
    (jfile,) = journal.glob("*.jsonl")
    committed = jfile.read_bytes().count(b"\n")
    assert 40 <= committed < 120 and seen - committed <= 4
    spec = parse_spec(text, base_dir=str(tmp_path))
    resumed = stages.run_study(spec, store, progress=None)
    assert len(server.requests) - seen == 120 - committed  # only what the journal lacked
    clean = stages.run_study(spec, Store(tmp_path / "clean"), progress=None)
    assert (stages.report_files(store, resumed.report)
            == stages.report_files(Store(tmp_path / "clean"), clean.report))
    assert graded_rows(store, resumed) == graded_rows(Store(tmp_path / "clean"), clean)


def test_a_judge_verifier_in_a_spec_regrades_when_its_checkpoint_changes(server, tmp_path):
    (tmp_path / "answers.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "q": f"What is {a} + {b}?", "a": str(a + b + (i % 2)),
                    "gold": str(a + b)}) + "\n"
        for i, (a, b) in enumerate(PAIRS)))
    text = f"""
name: judged
sources:
  - name: answers
    kind: file
    path: answers.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier:
      kind: judge
      params:
        model: {{kind: openai, base_url: "{server.base_url}", model: tiny-ckpt}}
        store: "{tmp_path / 'judge-store'}"
measure: {{pass_at: {{k: 1}}}}
"""
    spec = parse_spec(text, base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    res = stages.run_study(spec, store, progress=None)
    rows = stages.concat_rows(store, res.graded["answers"])
    assert [r["reward"] for r in rows] == [1.0, 0.0] * 4 and len(server.requests) == 8
    assert {b["temperature"] for b in server.requests} == {0.0}
    assert not stages.run_study(spec, store, progress=None).computed_stages
    # a judge's requests carry no empty stop list, no null, no n
    assert all("stop" not in b and "n" not in b
               and None not in [v for f, v in b.items() if not f.startswith("_")]
               for b in server.requests)
    # the same served name, another checkpoint behind it: the user declares it (the server's
    # listing proves nothing about weights), and the judge grades again
    text = text.replace("model: tiny-ckpt}", "model: tiny-ckpt, revision: step-900}")
    spec = parse_spec(text, base_dir=str(tmp_path))
    again = stages.run_study(spec, store, progress=None)
    assert any(s.startswith("grade") for s in again.computed_stages) and len(server.requests) == 16
