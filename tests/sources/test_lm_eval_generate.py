"""lm-eval's shipped gsm8k (a generate_until task) through kind: lm_eval and assay's generate
stage, against lm-eval's own ``simple_evaluate(model="hf")`` over the same local documents:
contexts, greedy responses token for token, filtered answers, per-document metrics, means."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

MAX_GEN = 6  # few tokens: the tiny model's text is noise, the point is equality
SHOTS = 1


def _gsm_docs(n: int, start: int) -> list[dict[str, Any]]:
    """gsm8k-shaped records: a question, a worked answer ending in '#### N' (some with a
    thousands comma, a dollar sign or a negative number, which the task's regexes handle)."""
    out = []
    for i in range(start, start + n):
        ans = ["12", "1,250", "-3", "7", "$40", "0"][i % 6]
        out.append({"question": f"what is the number of water {i} + {i % 3} ?",
                    "answer": f"the answer is {i} + {i % 3} = {ans}.\n#### {ans.strip('$')}"})
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The shipped gsm8k YAML pointed at local data, the tiny model, lm-eval's logged run."""
    pytest.importorskip("lm_eval")
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from helpers.tiny_lm import build_tiny_lm
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("lmgen")
    data = base / "data"
    data.mkdir()
    for split, (n, start) in {"train": (4, 100), "test": (6, 0)}.items():
        (data / f"{split}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _gsm_docs(n, start)))
    # lm-eval's own gsm8k definition, only its dataset pointed at the local files
    shipped = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    cfg = yaml.safe_load(shipped.read_text())
    assert cfg["output_type"] == "generate_until" and len(cfg["filter_list"]) == 2
    cfg.pop("tag", None)
    cfg.pop("dataset_name", None)
    cfg["dataset_path"] = "json"
    cfg["dataset_kwargs"] = {"data_files": {s: str(data / f"{s}.jsonl")
                                            for s in ("train", "test")}}
    tasks = base / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k.yaml").write_text(yaml.safe_dump(cfg))
    model = build_tiny_lm(base / "tiny")
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=4, device="cpu")
    res = simple_evaluate(model=lm, tasks=["gsm8k"], num_fewshot=SHOTS, log_samples=True,
                          bootstrap_iters=0, gen_kwargs={"max_gen_toks": MAX_GEN},
                          task_manager=TaskManager(include_path=str(tasks),
                                                   include_defaults=False),
                          fewshot_random_seed=1234)
    return {"base": base, "res": res, "model": model, "tasks": tasks}


def _source(world: dict[str, Any], **over: Any) -> dict[str, Any]:
    src = {"name": "gsm", "kind": "lm_eval", "task": "gsm8k", "include_path": "tasks",
           "num_fewshot": SHOTS, "gen_kwargs": {"max_gen_toks": MAX_GEN},
           "generate": {"model": {"kind": "hf", "path": str(world["model"]),
                                  "dtype": "float32"},
                        "api": "completions",
                        "params": {"temperature": 0.0, "max_tokens": MAX_GEN,
                                   "stop": ["Question:", "</s>", "<|im_end|>"]}}}
    src.update(over)
    return src


@pytest.mark.slow  # lm-eval's import, its task pipeline and two generation runs
def test_gsm8k_equals_simple_evaluate(world: dict[str, Any], tmp_path: Path) -> None:
    """A study with the shipped gsm8k: every context, greedy response, filtered answer
    (strict-match, flexible-extract) and exact_match per document equal lm-eval's logged
    samples, and each metric's mean equals lm-eval's reported number."""
    from assay.spec import parse_spec
    from assay.stages import concat_rows, run_study
    from assay.store import Store

    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "gsm",
                                      "sources": [_source(world)]}),
                      source="gsm.yaml", base_dir=str(world["base"]))
    assert spec.sources[0].mode == "generate" and spec.sources[0].verifier.kind == "lm_eval"
    run = run_study(spec, Store(tmp_path / "store"), progress=None)
    rows = sorted(concat_rows(Store(tmp_path / "store"), run.graded["gsm"]),
                  key=lambda r: int(r["task_id"]))
    # lm-eval logs one sample per document and filter
    by = {(s["doc_id"], s["filter"]): s for s in world["res"]["samples"]["gsm8k"]}
    assert len(rows) == 6 and len(by) == 12
    keys = ["exact_match,strict-match", "exact_match,flexible-extract"]
    for r in rows:
        d = int(r["task_id"])
        s = by[(d, "strict-match")]
        assert r["prompt"] == s["arguments"][0][0], d
        assert r["prompt"].count("Question:") == SHOTS + 1, d  # the few-shot example drawn
        assert r["final_text"] == s["resps"][0][0], d  # HFLM's text, token for token
        for k in keys:
            metric, flt = k.split(",")
            assert r["markers"][k] == by[(d, flt)][metric], (d, k)
            assert [r["judge_meta"]["filtered"][flt]] == by[(d, flt)]["filtered_resps"], (d, k)
        assert r["reward"] == r["markers"]["exact_match,strict-match"], d
    for k in keys:
        assert np.mean([r["markers"][k] for r in rows]) == pytest.approx(
            world["res"]["results"]["gsm8k"][k], abs=1e-12), k
    # the responses are not all empty: the comparison checks generated text
    assert sum(bool(r["final_text"].strip()) for r in rows) >= 3


def test_gsm8k_declared_params_must_be_the_tasks(world: dict[str, Any]) -> None:
    """generate.params that differ from the task's generation_kwargs (after gen_kwargs) are
    refused with the params to write; a task with repeats is refused at validate."""
    from assay.errors import SpecError
    from assay.spec import parse_spec

    bad = _source(world)
    bad["generate"] = {**bad["generate"], "params": {"temperature": 0.0, "max_tokens": 99,
                                                     "stop": ["Question:"]}}
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "g", "sources": [bad]}),
                      source="g.yaml", base_dir=str(world["base"]))
    with pytest.raises(SpecError, match=r"write generate: \{api: completions, k: 1, params: "
                       r'\{"temperature": 0.0, "top_p": 1.0, "max_tokens": 6'):
        spec.sources[0].build(spec.paths)
    with pytest.raises(Exception, match="drop verifier"):
        parse_spec(yaml.safe_dump({"version": 1, "name": "g", "sources": [
            _source(world, verifier={"kind": "exact_match"})]}))


def test_gsm8k_filters_and_exact_match_options(world: dict[str, Any]) -> None:
    """The verifier on written answers (the tiny model's text has no numbers): gsm8k's strict
    regex needs '#### ', the flexible one takes the last number, and exact_match ignores the
    thousands comma, the '$' and case as the YAML's options say."""
    from assay.verify.spec import VerifierSpec

    v = VerifierSpec(kind="lm_eval", params={"task": "gsm8k", "include_path": "tasks",
                                             "gen_kwargs": {}}).build(str(world["base"]))
    docs = _gsm_docs(6, 0)
    cases = [  # doc, answer, strict, flexible
        (1, "so it is 1250 .\n#### 1,250", 1.0, 1.0),
        (1, "so it is 1,250", 0.0, 1.0),
        (1, "#### 125", 0.0, 0.0),
        (2, "we get -3", 0.0, 1.0),
        (2, "we get 3", 0.0, 0.0),  # the sign counts
        (4, "it costs $40 in all", 0.0, 1.0),
        (0, "12 then 13", 0.0, 0.0),  # the last number is the flexible answer
    ]
    for d, text, strict, flexible in cases:
        got = v.check(text, docs[d]["answer"], {"task_id": str(d)})
        assert (got.markers["exact_match,strict-match"],
                got.markers["exact_match,flexible-extract"]) == (strict, flexible), text
        assert got.reward == strict


#: written answers per test document: (text, strict-match, flexible-extract) by gsm8k's YAML
CANNED = {0: "#### 12", 1: "it is 1,250", 2: "we get 3", 3: "so\n#### 7", 4: "costs $40",
          5: "#### 1"}

CANNED_MODULE = '''
import re

CANNED = {canned!r}


def answer(prompts):
    # the question asked last in lm-eval's context (after the few-shot example) names the doc
    return [CANNED[int(re.findall(r"water (\\d+) \\+", p)[-1])] for p in prompts]
'''


def test_report_has_every_lm_eval_metric_and_stderr(world: dict[str, Any], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The same written answers through simple_evaluate (a canned lm-eval LM) and through a
    study (a canned function model): report.json carries both gsm8k metrics under lm-eval's
    names, each mean and stderr equal to lm-eval's (strict 2/6, flexible 4/6: they differ), with
    an interval over the 6 documents."""
    import re

    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    from assay.spec import parse_spec
    from assay.stages import report_files, run_study
    from assay.store import Store

    class Canned(LM):  # type: ignore[misc]  # lm-eval's LM base class is untyped
        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            return [CANNED[int(re.findall(r"water (\d+) \+", r.args[0])[-1])]
                    for r in requests]

        def loglikelihood(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

    res = simple_evaluate(model=Canned(), tasks=["gsm8k"], num_fewshot=SHOTS,
                          gen_kwargs={"max_gen_toks": MAX_GEN},
                          task_manager=TaskManager(include_path=str(world["tasks"]),
                                                   include_defaults=False),
                          fewshot_random_seed=1234)["results"]["gsm8k"]
    assert res["exact_match,strict-match"] == pytest.approx(2 / 6)
    assert res["exact_match,flexible-extract"] == pytest.approx(4 / 6)

    (tmp_path / "gsm_canned.py").write_text(CANNED_MODULE.format(canned=CANNED))
    monkeypatch.syspath_prepend(str(tmp_path))
    src = _source(world)
    src["generate"] = {**src["generate"],
                       "model": {"kind": "function", "callable": "gsm_canned:answer"}}
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "gsm", "sources": [src],
                                      "measure": {"pass_at": {}}}),
                      source="gsm.yaml", base_dir=str(world["base"]))
    store = Store(tmp_path / "store")
    files = report_files(store, run_study(spec, store, progress=None).report)
    report = json.loads(files["report.json"])
    docs = [m for m in report["measurements"] if m["kind"] == "lm_eval_metrics"]
    assert [d["source"] for d in docs] == ["gsm"]
    doc = docs[0]
    ests = {e["name"]: e for e in doc["estimates"]}
    assert list(ests) == ["exact_match,strict-match", "exact_match,flexible-extract"]
    for i, (k, e) in enumerate(ests.items()):
        metric, flt = k.split(",")
        assert e["value"] == pytest.approx(res[k], abs=1e-12), k
        assert e["n"] == 6 and e["unit"] == "documents", k
        assert e["low"] < e["value"] < e["high"], k
        stderr = res[f"{metric}_stderr,{flt}"]
        assert stderr > 0 and doc["data"]["stderr"][i] == pytest.approx(stderr, abs=1e-12), k
        assert f"lm-eval stderr {stderr:.4f}" in doc["report"], k
    md = files["report.md"]
    assert "exact_match,flexible-extract" in (md if isinstance(md, str) else md.decode())


def test_lm_eval_means_by_hand() -> None:
    """Means, n and stderr (sample sd / sqrt(n), as statistics computes it) per metric marker;
    a reward model's rm: marker is not a metric; an ungraded row is left out with a warning."""
    import math
    import statistics

    pytest.importorskip("lm_eval")
    from assay.measure.lm_eval_means import lm_eval_means

    strict, flexible = [1, 0, 0, 1, 0], [1, 1, 0, 1, 1]
    rows = [{"task_id": str(i), "reward": float(s),
             "markers": {"exact_match,strict-match": float(s),
                         "exact_match,flexible-extract": float(f), "rm:m": 3.0}}
            for i, (s, f) in enumerate(zip(strict, flexible))]
    rows.append({"task_id": "5", "reward": None, "markers": {}})
    r = lm_eval_means(rows)
    assert [e.name for e in r.metrics] == ["exact_match,strict-match",
                                           "exact_match,flexible-extract"]
    for e, se, vals in zip(r.metrics, r.stderr, (strict, flexible)):
        assert (e.value, e.n, e.n_rows) == (pytest.approx(sum(vals) / 5), 5, 5)
        assert se == pytest.approx(statistics.stdev(vals) / math.sqrt(5), abs=1e-12)
    assert r.n_tasks == 5 and r.n_rows == 6
    assert any("1 rows without it" in w for w in r.warnings)
