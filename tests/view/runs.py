"""Real runs for the page tests: a file source graded by exact_match, run through the chain
(``assay.stages.run_study``, no Prefect) and written as ``assay run`` writes a run directory."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from assay import stages
from assay.report import write_run_dir
from assay.spec import load_spec
from assay.store import Store

#: Text that would run if the page ever parsed row text as HTML or followed it as a URL.
PAYLOADS = [
    "<script>window.__pwned = 'script'; alert('script')</script>",
    "</script><script>window.__pwned = 'close-tag'</script>",
    "<img src=x onerror=\"window.__pwned = 'img'\">",
    "<a href=\"javascript:window.__pwned = 'link'\" id=\"evil-link\">click me</a>",
    "<svg onload=\"window.__pwned = 'svg'\"></svg>",
]

SPEC = """\
version: 1
name: view-demo
description: Arithmetic questions in three topics, four answers each, graded by exact match
  (a grading function that also writes its rationale, as an LLM judge does).
sources:
  - name: model
    kind: file
    path: {data}
    fields: {{prompt: question, completion: response, reference: gold, task_id: id, meta: [topic]}}
    verifier: {{kind: function, function: "view_grader:grade"}}
measure:
  pass_at: {{k: 4, by: topic}}
execution: {{runner: local, shard_rows: 64}}
"""

#: The grading function: exact match, with a reason and a rationale that quote the answer.
GRADER = """\
def grade(completion, reference):
    ok = completion.strip() == reference.strip()
    return {"reward": float(ok), "reason": "exact match" if ok else f"no match: {completion[:80]}",
            "meta": {"judge_text": f"The reference is {reference}; the answer says {completion}."}}
"""

TOPICS = ("algebra", "counting", "geometry")


def records(n_tasks: int = 24, k: int = 4, seed: int = 0, evil: bool = True,
            worse: float = 0.0) -> list[dict[str, Any]]:
    """``n_tasks`` questions, ``k`` answers each; task 3 and 5 carry the planted payloads in the
    question, the answers and the gold answer (so in the prompt, completions and reasons).
    ``worse``: taken off every task's chance of a right answer (a model that regressed)."""
    rng = random.Random(seed)
    out = []
    for t in range(n_tasks):
        a, b = 3 + t, 7 + 2 * t
        q, gold = f"What is {a} + {b}?", str(a + b)
        if evil and t in (3, 5):
            q = q + " " + " ".join(PAYLOADS)
            gold = gold if t == 3 else PAYLOADS[2]
        skill = (t % 5) / 4 - worse
        for j in range(k):
            right = rng.random() < skill
            resp = gold if right else str(a + b + 1 + j)
            if evil and t in (3, 5) and not right:
                resp = PAYLOADS[j % len(PAYLOADS)] + " " + PAYLOADS[1]
            out.append({"id": f"q-{t:03d}", "question": q, "response": resp, "gold": gold,
                        "topic": TOPICS[t % 3]})
    return out


def make_run(base: Path, name: str, recs: list[dict[str, Any]]) -> Path:
    """Run the demo spec on ``recs``; return the run directory ``base/name``. The spec and data
    files keep their paths from run to run (as a nightly's do), so runs share a definition."""
    base.mkdir(parents=True, exist_ok=True)
    data = base / "completions.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    (base / "view_grader.py").write_text(GRADER, encoding="utf-8")
    spec_path = base / "spec.yaml"
    spec_path.write_text(SPEC.format(data=data.name), encoding="utf-8")
    spec = load_spec(spec_path)
    store = Store(base / "store")
    run = stages.run_study(spec, store, progress=None)
    files = stages.report_files(store, run.report)
    rows = {n: stages.concat_rows(store, parts) for n, parts in run.graded.items()}
    out = base / name
    write_run_dir(out, files, rows, {"study": spec.name,
                                     "spec_definition": spec.definition_checksum(),
                                     "spec_checksum": run.spec_checksum})
    return out
