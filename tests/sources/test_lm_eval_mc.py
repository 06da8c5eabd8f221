"""lm-eval's own truthfulqa_mc2 (its process_results) and cola (mcc, a corpus metric), as they
ship, over local documents: assay's per-document items and aggregates equal one
``simple_evaluate(model="hf")`` run with the same tiny model, stderr included."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

pytest.importorskip("lm_eval")
pytest.importorskip("sklearn")

WINDOW = 64  # both tools' max_length: truthfulqa's six-question preamble is cut the same way
ITERS = 1000  # simple_evaluate's bootstrap_iters: assay reproduces lm-eval's first 1000 draws
VOCAB = ("the water number way first people said time could do they one by as like from write "
         "hot cold green moon river stone").split()


PAIRS = """task: lmx_pairs
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{sentence}}}}:"
doc_to_choice: "{{{{[a, b]}}}}"
doc_to_target: label
metric_list: [{{metric: f1}}, {{metric: acc}}, {{metric: mcc}}]
"""


def _words(rnd: random.Random, n: int) -> str:
    return " ".join(rnd.choice(VOCAB) for _ in range(n))


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _truthfulqa(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        m = 2 + i % 3
        choices = [_words(rnd, 1) for _ in range(m + 1)]  # one word: comparable masses
        labels = [1] * (1 + i % 2) + [0] * (m + 1 - 1 - i % 2)
        out.append({"question": _words(rnd, 5) + "?",
                    "mc1_targets": {"choices": choices, "labels": [1] + [0] * m},
                    "mc2_targets": {"choices": choices, "labels": labels}})
    return out


def _local(shipped: Path, data: dict[str, Path]) -> str:
    """A shipped task YAML reading local JSON files (split: file) instead of the Hub."""
    text = shipped.read_text()
    head = [ln for ln in text.splitlines() if ln.startswith(("dataset_path:", "dataset_name:"))]
    assert head, shipped
    for ln in head:
        text = text.replace(ln + "\n", "")
    files = ", ".join(f"{k}: {v}" for k, v in data.items())
    return f"dataset_path: json\ndataset_kwargs:\n  data_files: {{{files}}}\n" + text


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """lm-eval's truthfulqa_mc2 and cola YAMLs on local data, the tiny model, and lm-eval's
    logged run of both (one run)."""
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from helpers.tiny_bpe import build_tiny_bpe_lm
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("lmmc")
    rnd = random.Random(0)
    tq = base / "data" / "truthfulqa.jsonl"
    tq.parent.mkdir()
    tq.write_text("".join(json.dumps(r) + "\n" for r in _truthfulqa(rnd, 7)))
    for split, n in (("validation", 16), ("train", 4)):  # cola names a train split (few-shot)
        (base / "data" / f"cola_{split}.jsonl").write_text("".join(json.dumps(
            {"sentence": _words(rnd, 3 + i % 5), "label": i % 2, "idx": i}) + "\n"
            for i in range(n)))
    shipped = Path(lm_eval.__file__).parent / "tasks"
    tasks = base / "tasks"
    tasks.mkdir()
    # lm-eval's own files as they ship (the oracle, not a copy in this repo), data made local
    shutil.copy(shipped / "truthfulqa" / "utils.py", tasks / "utils.py")
    shutil.copy(shipped / "truthfulqa" / "truthfulqa_mc2.yaml", tasks / "truthfulqa_mc2.yaml")
    (tasks / "truthfulqa_mc1.yaml").write_text(
        _local(shipped / "truthfulqa" / "truthfulqa_mc1.yaml", {"validation": tq}))
    (tasks / "cola.yaml").write_text(
        _local(shipped / "glue" / "cola" / "default.yaml",
               {s: base / "data" / f"cola_{s}.jsonl" for s in ("train", "validation")}))
    # the tiny model's " yes" is 4 tokens against " no"'s 1: it answers cola "no" every time
    # (mcc 0); a task whose two choices vary per document gives a corpus metric to check
    pairs = []
    for i in range(16):  # the shorter choice wins; it is the gold one in 12 documents of 16
        label, short = i % 2, (i % 2 if i % 4 != 3 else 1 - i % 2)
        ab = [_words(rnd, 3), _words(rnd, 3)]
        ab[short] = _words(rnd, 1)
        pairs.append({"sentence": _words(rnd, 4), "a": ab[0], "b": ab[1], "label": label})
    _write(base / "data" / "pairs.jsonl", pairs)
    (tasks / "pairs.yaml").write_text(PAIRS.format(data=base / "data" / "pairs.jsonl"))
    # afrixnli (English): f1 aggregated by its YAML's own !function (weighted_f1_score)
    afx = tasks / "afrixnli"
    afx.mkdir()
    shipped_afx = shipped / "afrixnli" / "direct" / "prompt_1"
    shutil.copy(shipped_afx / "utils.py", afx / "utils.py")
    nli = [{"premise": _words(rnd, 5), "hypothesis": _words(rnd, 3), "label": i % 3}
           for i in range(12)]
    _write(base / "data" / "afx.jsonl", nli)
    (afx / "afrixnli_yaml").write_text(_local(shipped_afx / "afrixnli_yaml", {
        s: base / "data" / "afx.jsonl" for s in ("validation", "test")}))
    (afx / "afrixnli_eng.yaml").write_text("\n".join(
        ln for ln in (shipped_afx / "afrixnli_eng.yaml").read_text().splitlines()
        if not ln.startswith("dataset_name:")) + "\n")
    model = build_tiny_bpe_lm(base / "my-model")
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=8, device="cpu",
              max_length=WINDOW)
    res = simple_evaluate(model=lm, tasks=["truthfulqa_mc2", "cola", "lmx_pairs",
                                           "afrixnli_eng_prompt_1"],
                          log_samples=True, bootstrap_iters=ITERS,
                          task_manager=TaskManager(include_path=str(tasks),
                                                   include_defaults=False))
    return {"base": base, "tasks": tasks, "res": res, "model": model}


def _samples(world: dict[str, Any], task: str) -> list[dict[str, Any]]:
    return sorted(world["res"]["samples"][task], key=lambda s: s["doc_id"])


def _source(world: dict[str, Any], name: str, task: str) -> dict[str, Any]:
    model = {"kind": "hf", "path": str(world["model"]), "dtype": "float32",
             "max_length": WINDOW}
    return {"name": name, "kind": "lm_eval", "task": task, "include_path": str(world["tasks"]),
            "choices": {"model": model}}


@pytest.mark.slow  # lm-eval's import, its task pipeline and one simple_evaluate run
def test_items_from_lm_evals_own_results_equal_its_samples(world: dict[str, Any]) -> None:
    """lm-eval's logged log-likelihoods through assay's per-document step: every item equals
    the one lm-eval logged (truthfulqa_mc2's acc is the mc2 mass, cola's mcc a (gold, pred)
    pair), and lm-eval's aggregation of them is its reported number."""
    from lm_eval.api.registry import get_aggregation

    from assay.sources.lm_eval_mc import aggregation_names, document_items, loaded_task
    from assay.spec import parse_spec

    res = world["res"]
    for task_name, metric in (("truthfulqa_mc2", "acc"), ("cola", "mcc"), ("lmx_pairs", "f1"),
                              ("lmx_pairs", "mcc")):
        spec = parse_spec(yaml.safe_dump({"version": 1, "name": "x", "sources": [
            _source(world, "s", task_name)]}), source="x.yaml", base_dir=str(world["base"]))
        task = loaded_task(spec.sources[0], spec.paths)
        aggs = aggregation_names(task)
        assert metric in aggs
        items = []
        for s in _samples(world, task_name):
            resps = [tuple(r) for r in s["filtered_resps"]]
            got = document_items(task, task.eval_docs[s["doc_id"]], [r[0] for r in resps],
                                 [r[1] for r in resps], aggs, "t")
            want = s[metric]
            item = got[f"{metric},none"]
            assert item == (list(want) if isinstance(want, list | tuple) else want), s["doc_id"]
            items.append(tuple(item) if isinstance(item, list) else item)
        agg = get_aggregation(aggs[metric])
        assert agg(items) == pytest.approx(res["results"][task_name][f"{metric},none"],
                                           abs=1e-12)


@pytest.mark.slow
def test_study_reports_lm_evals_mc2_and_mcc(world: dict[str, Any], tmp_path: Path) -> None:
    """kind: lm_eval sources on lm-eval's truthfulqa_mc2 and cola, scored by assay's hf backend
    in a study: report's lm_eval_metrics give mc2 (lm-eval's ``acc,none``) and ``mcc,none``
    equal to simple_evaluate's, with lm-eval's stderr (its closed form; its bootstrap for mcc
    under its seeds), and never the argmax accuracy under truthfulqa_mc2's name. Before this
    both tasks were refused at validate."""
    from assay.spec import parse_spec
    from assay.stages import concat_rows, load_doc, run_study
    from assay.store import Store

    sources = [_source(world, "tq", "truthfulqa_mc2"), _source(world, "cola", "cola"),
               _source(world, "pairs", "lmx_pairs")]
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "lmmc", "sources": sources,
                                      "measure": {"choice_accuracy": {}}}),
                      source="lmmc.yaml", base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    res = world["res"]["results"]
    measured = next(x for x in run.results if x.stage == "measure")
    docs = {d["label"]: d for d in load_doc(store, measured, "measurements")}

    tq = {e["name"]: e for e in docs["lm_eval_metrics[tq]"]["estimates"]}
    assert list(tq) == ["acc,none"]
    assert tq["acc,none"]["value"] == pytest.approx(res["truthfulqa_mc2"]["acc,none"], abs=1e-5)
    assert tq["acc,none"]["n"] == 7
    se = docs["lm_eval_metrics[tq]"]["data"]["stderr"][0]
    assert se == pytest.approx(res["truthfulqa_mc2"]["acc_stderr,none"], abs=1e-5)
    # the rows' reward is the task's own acc, so choice_accuracy is lm-eval's number too
    rows = sorted(concat_rows(store, run.graded["tq"]), key=lambda r: int(r["task_id"]))
    for r, s in zip(rows, _samples(world, "truthfulqa_mc2")):
        assert r["reward"] == pytest.approx(s["acc"], abs=1e-5)
        np.testing.assert_allclose(r["judge_meta"]["loglik"],
                                   [x[0] for x in s["filtered_resps"]], atol=1e-4, rtol=0)
    ca = docs["choice_accuracy[tq]"]["estimates"][0]["value"]
    assert ca == pytest.approx(res["truthfulqa_mc2"]["acc,none"], abs=1e-5)
    argmax = np.mean([float(np.argmax(r["judge_meta"]["loglik"]) == 0) for r in rows])
    assert abs(ca - argmax) > 1e-3  # the number assay reported before differs

    # cola's number is mcc: no accuracy under its name, the report says where its number is
    assert docs["choice_accuracy[cola]"]["kind"] == "not_measured"
    assert "lm-eval reports mcc,none" in docs["choice_accuracy[cola]"]["text"]
    co = docs["lm_eval_metrics[cola]"]
    est = {e["name"]: e for e in co["estimates"]}
    assert list(est) == ["mcc,none"]
    assert est["mcc,none"]["value"] == pytest.approx(res["cola"]["mcc,none"], abs=1e-12)
    assert co["data"]["stderr"][0] == pytest.approx(res["cola"]["mcc_stderr,none"], abs=1e-12)
    assert est["mcc,none"]["method"].startswith("percentile bootstrap over documents")

    # f1, acc and mcc of one task, in lm-eval's order, its model answering both ways
    pairs = docs["lm_eval_metrics[pairs]"]
    got = [(e["name"], e["value"]) for e in pairs["estimates"]]
    assert [n for n, _ in got] == ["f1,none", "acc,none", "mcc,none"]
    for (name, value), se in zip(got, pairs["data"]["stderr"]):
        assert value == pytest.approx(res["lmx_pairs"][name], abs=1e-12), name
        metric = name.split(",")[0]
        assert se == pytest.approx(res["lmx_pairs"][f"{metric}_stderr,none"], abs=1e-12), name
    items = [tuple(s["mcc"]) for s in _samples(world, "lmx_pairs")]
    assert len({p for _, p in items}) == 2, "the model predicts one class: mcc is trivially 0"
    assert abs(dict(got)["mcc,none"]) > 0.05 and dict(got)["f1,none"] > 0, items


@pytest.mark.slow
def test_task_function_aggregation_equals_simple_evaluate(world: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """afrixnli's f1 is aggregated by its YAML's ``!function`` (weighted_f1_score): each row
    keeps lm-eval's (gold, pred) item, and report.json's f1 and acc equal simple_evaluate's; its
    f1 has no lm-eval stderr (lm-eval prints N/A) but an interval over documents. Before, the
    task was refused ("aggregated by ...weighted_f1_score")."""
    from assay.spec import parse_spec
    from assay.stages import concat_rows, load_doc, run_study
    from assay.store import Store

    task = "afrixnli_eng_prompt_1"
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "afx", "sources": [
        _source(world, "afx", task)]}), source="afx.yaml", base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    res = world["res"]["results"][task]
    rows = sorted(concat_rows(store, run.graded["afx"]), key=lambda r: int(r["task_id"]))
    samples = _samples(world, task)
    assert len(rows) == len(samples) == 12
    for r, s in zip(rows, samples):
        items = r["judge_meta"]["lm_eval"]["items"]
        assert items["f1,none"] == list(s["f1"]) and items["acc,none"] == s["acc"], s["doc_id"]
    measured = next(x for x in run.results if x.stage == "measure")
    doc = next(d for d in load_doc(store, measured, "measurements")
               if d["label"] == "lm_eval_metrics[afx]")
    est = {e["name"]: e for e in doc["estimates"]}
    assert list(est) == ["f1,none", "acc,none"]
    assert est["f1,none"]["value"] == pytest.approx(res["f1,none"], abs=1e-12)
    assert est["acc,none"]["value"] == pytest.approx(res["acc,none"], abs=1e-12)
    assert res["f1_stderr,none"] == "N/A" and doc["data"]["stderr"][0] is None
    assert est["f1,none"]["low"] <= est["f1,none"]["value"] <= est["f1,none"]["high"]
    # the window cuts the context to the prompt's fixed ending: one predicted class, yet the
    # weighted f1 is neither 0 nor the accuracy (what a mean of the items would not give)
    assert 0 < est["f1,none"]["value"] < 1
    assert est["f1,none"]["value"] != pytest.approx(est["acc,none"]["value"], abs=1e-6)
