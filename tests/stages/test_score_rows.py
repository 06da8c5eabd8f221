"""Reward models in the chain: a function reward model scores the (sliced) quickstart arms'
completions, the scores land in the rows Parquet as rm:<model>, the report carries best-of-n
with intervals, and the caches recompute only what changed (counted stages and model calls).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from assay import stages
from assay.report import write_run_dir
from assay.rows import Rows
from assay.spec import load_spec
from assay.stages.score_rows import clear_model_cache
from assay.store import Store

ROOT = Path(__file__).resolve().parents[2]

# A reward model as a user writes one: a module next to the spec. CALLS counts what it scores.
RM_MODULE = '''
CALLS = []


def score(prompts, responses):
    CALLS.append(len(responses))
    return [float(len(r)) for r in responses]
'''


def sliced_quickstart(tmp: Path, *, sources: list[str], tasks: int = 12,
                      timeout: float = 3) -> Path:
    """The quickstart spec on its first ``tasks`` problems, with a function reward model scoring
    ``sources`` and no audit, no decontamination (not what these tests are about)."""
    doc = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    for s in doc["sources"]:
        s["steps"] = [{"op": "slice", "start": 0, "stop": tasks}]
        s["verifier"]["params"]["timeout"] = timeout
    doc.pop("decontaminate")
    doc["reward"] = {"models": [{"name": "lenrm", "kind": "function", "function": "qs_lenrm:score",
                                 "params": {"batched": True}}],
                     "data": None, "score": {"sources": sources}}
    doc["measure"] = {"pass_at": {"k": 4}}
    if len(sources) == 2:
        doc["measure"]["compare"] = [{"before": "base", "after": "tuned", "proxy": "rm:lenrm"}]
    doc["output"] = str(tmp / "run")
    (tmp / "qs_lenrm.py").write_text(RM_MODULE)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def rm_calls(tmp_path: Path):
    # each test imports its own copy of the module: adapters built by an earlier test (same
    # identity, so reusable) would count into that test's CALLS
    clear_model_cache()
    sys.modules.pop("qs_lenrm", None)
    yield lambda: importlib.import_module("qs_lenrm").CALLS
    sys.modules.pop("qs_lenrm", None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def distinct_inputs(run_dir: Path, sources: list[str]) -> int:
    """How many distinct (prompt, completion) inputs the sources' rows hold: each is scored once
    (a score is cached per input, so a completion two samples or two sources share is one)."""
    seen = set()
    for src in sources:
        rows = Rows.read_parquet(run_dir / "rows" / f"{src}.parquet").to_pandas()
        seen.update((p, t) for p, t in zip(rows["prompt"], rows["final_text"]) if t.strip())
    return len(seen)


def _run(spec_path: Path, store: Store, out: Path) -> stages.StudyRun:
    spec = load_spec(spec_path)
    run = stages.run_study(spec, store, progress=None)
    rows = {name: stages.concat_rows(store, parts) for name, parts in run.graded.items()}
    write_run_dir(out, stages.report_files(store, run.report), rows, {})
    return run


def test_function_rm_scores_quickstart_rows_and_report_matches_brute_force(tmp_path, rm_calls):
    spec = sliced_quickstart(tmp_path, sources=["base", "tuned"])
    run = _run(spec, Store(tmp_path / "store"), tmp_path / "run")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    docs = {m["label"]: m for m in report["measurements"]}
    for src in ("base", "tuned"):
        rows = Rows.read_parquet(tmp_path / "run" / "rows" / f"{src}.parquet").to_pandas()
        assert len(rows) == 48
        # every completion scored, and the score is what the function gives
        assert all(m["rm:lenrm"] == float(len(t))
                   for m, t in zip(rows["markers"], rows["final_text"]))
        # brute force from the Parquet: best-of-n (ties split) and ranking accuracy per task
        by_task = defaultdict(list)
        for tid, m, y in zip(rows["task_id"], rows["markers"], rows["reward"]):
            by_task[tid].append((y, m["rm:lenrm"]))
        bon, rank = [], []
        for items in by_task.values():
            top = max(s for _, s in items)
            win = [y for y, s in items if s == top]
            bon.append(sum(win) / len(win))
            pairs = [1.0 if sp > sf else 0.5 if sp == sf else 0.0
                     for yp, sp in items for yf, sf in items if yp == 1 and yf == 0]
            if pairs:
                rank.append(sum(pairs) / len(pairs))
        doc = docs[f"reward_rows[{src}, rm:lenrm]"]
        est = {e["name"]: e for e in doc["estimates"]}
        assert est["best-of-n"]["value"] == pytest.approx(sum(bon) / len(bon))
        assert est["ranking accuracy"]["value"] == pytest.approx(sum(rank) / len(rank))
        assert est["ranking accuracy"]["n"] == len(rank)
        for name in ("best-of-n", "pass@1", "pass@4", "ranking accuracy"):
            assert est[name]["low"] < est[name]["high"] and est[name]["n"] > 0
    md = (tmp_path / "run" / "report.md").read_text()
    assert "### reward_rows[base, rm:lenrm]" in md and "best-of-n " in md
    assert "reward_rows.png" in report["plots"] and (tmp_path / "run" / "reward_rows.png").is_file()
    # compare reads rm:lenrm like any marker, and the spec's proxy names it
    cmp = docs["compare[base -> tuned]"]
    assert "marker:rm:lenrm" in cmp["report"] and "proxy check: marker:rm:lenrm" in cmp["report"]
    assert sum(rm_calls()) == distinct_inputs(tmp_path / "run", ["base", "tuned"]) < 96
    assert [r.label for r in run.results if r.stage == "score-rows"] == ["base", "tuned"]


def test_one_more_source_computes_only_that_sources_scores(tmp_path, rm_calls):
    store = Store(tmp_path / "store")
    _run(sliced_quickstart(tmp_path, sources=["base"]), store, tmp_path / "r1")
    assert sum(rm_calls()) == distinct_inputs(tmp_path / "r1", ["base"])
    run = _run(sliced_quickstart(tmp_path, sources=["base", "tuned"]), store, tmp_path / "r2")
    computed = [s for s in run.computed_stages if s.startswith("score-rows")]
    assert computed == ["score-rows[tuned]"]
    assert "score-rows[base]" in run.cached_stages
    assert not any(s.startswith(("grade", "build-rows")) for s in run.computed_stages)
    # only tuned's completions base did not have were scored
    assert sum(rm_calls()) == distinct_inputs(tmp_path / "r2", ["base", "tuned"])


def test_new_verifier_reattaches_cached_scores(tmp_path, rm_calls):
    store = Store(tmp_path / "store")
    _run(sliced_quickstart(tmp_path, sources=["base"]), store, tmp_path / "r1")
    run = _run(sliced_quickstart(tmp_path, sources=["base"], timeout=0.02), store, tmp_path / "r2")
    assert any(s.startswith("grade") for s in run.computed_stages)
    scored = [r for r in run.results if r.stage == "score-rows"]
    # the verdicts changed, so the rows did: the stage reruns, but the model scores nothing new
    assert not scored[0].cached and scored[0].summary["scores"] == {"rm:lenrm": "cached"}
    assert sum(rm_calls()) == distinct_inputs(tmp_path / "r1", ["base"])


def test_score_models_subset_and_empty_completions_get_no_marker(tmp_path: Path) -> None:
    from assay.reward.rowstats import reward_rows
    from assay.spec import parse_spec

    recs = [{"q": f"Q{t}", "a": "x" * (j + 1) if (t, j) != (0, 0) else " ", "s": float(j == 1)}
            for t in range(6) for j in range(3)]
    (tmp_path / "own.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    spec = parse_spec("""
name: subset
sources:
  - {name: own, kind: file, path: own.jsonl, fields: {prompt: q, completion: a, reward: s}}
reward:
  models:
    - {name: len, kind: function, function: "assay.reward.function:length_rewards"}
    - {name: other, kind: function, function: "assay.reward.function:length_rewards"}
  data: null
  score: {sources: [own], models: [len]}
""", base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    run = stages.run_study(spec, store, progress=None)
    rows = list(stages.concat_rows(store, run.graded["own"]))
    assert [sorted(r["markers"]) for r in rows] == [[]] + [["rm:len"]] * 17
    (res,) = [r for r in run.results if r.stage == "score-rows"]
    assert res.summary["unscored"] == 1
    doc = next(d for d in stages.load_doc(store, run.results[-2], "measurements")
               if d["kind"] == "reward_rows")
    assert doc["marker"] == "rm:len" and "1 graded rows have no rm:len score" in doc["report"]
    # the same numbers straight from the library on the stored rows
    from assay.results import line_of

    assert doc["text"] == line_of(reward_rows(rows, "rm:len"))
