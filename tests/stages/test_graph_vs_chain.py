"""The graph gives the chain's bytes: report.json, report.md, every rows Parquet and every cache
key (in the chain's order) are equal when the same study runs both ways in fresh stores."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from assay import stages
from assay.report import write_run_dir
from assay.spec import load_spec
from assay.stages.score_rows import clear_model_cache
from assay.store import Store

ROOT = Path(__file__).resolve().parents[2]

SPEC = """
name: graphtest
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {prompt: q, completion: c, reference: gold, task_id: id}
    verifier: {kind: exact_match}
    steps: [{op: slice, start: 0, stop: 10}]
  - name: b
    kind: file
    path: b.jsonl
    fields: {prompt: q, completion: c, task_id: id, reference: gold}
    verifier: {kind: exact_match}
  - name: c
    kind: file
    path: b.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
decontaminate:
  corpus: [corpus.jsonl]
  text_field: text
  id_field: id
  sources: [a, b]
  n: 5
reward:
  models:
    - {name: lenrm, kind: function, function: "g_lenrm:score", params: {batched: true}}
  score: {sources: [a, c]}
measure:
  pass_at: {k: 2}
  compare: [{before: a, after: b}]
  select: {source: a}
execution: {shard_rows: 8}
"""


def write_study(tmp: Path) -> Path:
    with open(tmp / "a.jsonl", "w") as f, open(tmp / "b.jsonl", "w") as g:
        for i in range(12):
            for j in range(3):
                gold = str(i * 7)
                c = gold if (i + j) % 3 else str(i * 7 + 1)
                f.write(json.dumps({"id": f"t{i}", "q": f"What is 7 * {i}?", "c": c,
                                    "gold": gold}) + "\n")
                g.write(json.dumps({"id": f"t{i}", "q": f"What is 7 * {i}?", "c": c[::-1],
                                    "gold": gold, "r": int((i * j) % 4 != 1)}) + "\n")
    (tmp / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": f"Quiz: What is 7 * {i}? Answer below."}) + "\n"
        for i in range(0, 12, 3)))
    (tmp / "g_lenrm.py").write_text(
        "def score(prompts, responses):\n    return [float(len(r)) for r in responses]\n")
    p = tmp / "spec.yaml"
    p.write_text(SPEC)
    return p


def outputs(spec_path: Path, store: Store, out: Path, mode: str) -> tuple[list, dict[str, bytes]]:
    """(the (stage, label, key) of every result in order, every file of the run directory)."""
    clear_model_cache()
    run = stages.run_study(load_spec(spec_path), store, mode=mode, progress=None)
    rows = {name: stages.concat_rows(store, parts) for name, parts in run.graded.items()}
    write_run_dir(out, stages.report_files(store, run.report), rows, {})
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
             if p.is_file() and p.name != "run.json"}
    return [(r.stage, r.label, r.key) for r in run.results], files


def compare_modes(spec: Path, tmp: Path) -> tuple[list, dict[str, bytes]]:
    keys_c, files_c = outputs(spec, Store(tmp / "s-chain"), tmp / "chain", "chain")
    keys_g, files_g = outputs(spec, Store(tmp / "s-graph"), tmp / "graph", "graph")
    assert keys_g == keys_c
    assert sorted(files_g) == sorted(files_c)
    for name in files_c:
        assert files_g[name] == files_c[name], name
    return keys_c, files_c


def test_graph_equals_chain_bytes_and_keys(tmp_path: Path) -> None:
    sys.path.insert(0, str(tmp_path))
    try:
        keys, files = compare_modes(write_study(tmp_path), tmp_path)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("g_lenrm", None)
    stages_seen = [k[0] for k in keys]
    for s in ("grade", "decontaminate", "score-rows", "measure", "report"):
        assert s in stages_seen, s
    assert stages_seen.count("grade") == 4 + 4  # 30 and 36 rows, shards of 8+ rows by task
    assert {"report.json", "report.md", "rows/a.parquet", "rows/c.parquet"} <= set(files)
    assert b"rm:lenrm" in files["report.json"]


@pytest.mark.slow
def test_graph_equals_chain_on_the_quickstart(tmp_path: Path) -> None:
    """The (sliced) quickstart: sandboxed grading, decontamination, the bundled model's audit."""
    doc = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    for s in doc["sources"]:
        s["steps"] = [{"op": "slice", "start": 0, "stop": 12}]
    doc["decontaminate"]["corpus"] = [str(ROOT / "configs" / "data" / "quickstart_corpus.jsonl")]
    doc["reward"]["data"]["dimensions"] = ["verbosity"]
    doc["execution"]["shard_rows"] = 16
    doc.pop("output")
    spec = tmp_path / "quickstart.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    keys, _ = compare_modes(spec, tmp_path)
    assert [k[0] for k in keys].count("score-reward-model") == 1


def test_measure_and_report_skip_the_slow_imports(tmp_path: Path) -> None:
    # Measure and report run last, after everything else: an import there is wall time no
    # other node hides. scipy.stats (~1 s) and matplotlib.pyplot (~0.5 s) were both imported
    # there for nothing (the reward audit's Spearman rho; figures need no pyplot). The audit
    # runs apart from the sources, so it is left out here. Fresh interpreter.
    import subprocess

    spec = write_study(tmp_path)
    spec.write_text(SPEC.replace("  score:", "  data: null\n  score:"))
    code = (
        "import json, sys; from assay import stages; from assay.spec import load_spec; "
        "from assay.store import Store; st = Store(sys.argv[2]); "
        "run = stages.run_study(load_spec(sys.argv[1]), st, progress=None); "
        "files = stages.report_files(st, run.report); "
        "print(json.dumps([sorted(n for n in files if n.endswith('.png')), "
        "[m for m in ('scipy.stats', 'matplotlib.pyplot') if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code, str(spec), str(tmp_path / "s")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    pngs, slow = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(pngs) >= 2 and slow == []
