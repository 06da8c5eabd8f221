"""lm-eval's shipped lambada_openai (a loglikelihood task) and winogrande (a context per choice)
through kind: lm_eval, against simple_evaluate(model=HFLM) with the tiny BPE model over local
documents: requests, per-document log-likelihoods, metrics, aggregates and stderrs equal."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

TOL = 1.5e-5  # per-request log-likelihood, assay's hf scorer vs HFLM (float32)
VOCAB = ("the water number way first people said time could été naïve café über do they one "
         "by as like from write hot").split()


def _words(rnd: random.Random, n: int) -> str:
    return " ".join(rnd.choice(VOCAB) for _ in range(n))


def _lambada_docs(model_dir: Path, n: int) -> list[dict[str, Any]]:
    """Passages whose last word is, for every other one, the tiny model's greedy next token
    (so acc, is_greedy, is neither all 0 nor all 1), the others a random word."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    rnd = random.Random(3)
    out: list[dict[str, Any]] = []
    while len(out) < n:
        ctx = _words(rnd, 5 + len(out) % 4)
        last = rnd.choice(VOCAB)
        if len(out) % 2 == 0:
            with torch.no_grad():
                ids = tok(ctx, return_tensors="pt").input_ids
                nxt = int(model(ids).logits[0, -1].argmax())
            text = tok.decode([nxt])
            # a word lambada's split keeps whole: " word", no other space
            if not (text.startswith(" ") and text[1:].strip() and " " not in text[1:]
                    and text[1:] == text[1:].strip()):
                continue
            last = text[1:]
        out.append({"text": f"{ctx} {last}"})
    return out


def _winogrande_docs(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        a, b = rnd.sample(["Sarah", "Samantha", "the water", "the café", "people", "über"], 2)
        out.append({"sentence": f"{a.capitalize()} said {b} could write because _ "
                                f"{_words(rnd, 3 + i % 3)}.",
                    "option1": a, "option2": b, "answer": "12"[i % 2]})
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """lm-eval's lambada_openai and winogrande YAMLs pointed at local files, the tiny model,
    and simple_evaluate's logged run (its default stderrs: 100,000 bootstrap draws)."""
    pytest.importorskip("lm_eval")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from helpers.tiny_bpe import build_tiny_bpe_lm
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("lmll")
    model = build_tiny_bpe_lm(base / "my-model")
    data, tasks = base / "data", base / "tasks"
    data.mkdir()
    tasks.mkdir()
    rnd = random.Random(0)
    files = {"lambada_test": _lambada_docs(model, 8),
             "wg_validation": _winogrande_docs(rnd, 8), "wg_train": _winogrande_docs(rnd, 5)}
    for name, recs in files.items():
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    shipped = Path(lm_eval.__file__).parent / "tasks"
    # lm-eval's own definitions (the oracle, not copies in this repo): only the data moved
    lam = yaml.safe_load((shipped / "lambada" / "lambada_openai.yaml").read_text())
    assert lam["output_type"] == "loglikelihood"
    for k in ("tag", "dataset_name"):
        lam.pop(k, None)
    lam.update(dataset_path="json",
               dataset_kwargs={"data_files": {"test": str(data / "lambada_test.jsonl")}})
    (tasks / "lambada_openai.yaml").write_text(yaml.safe_dump(lam))
    wg = (shipped / "winogrande" / "default.yaml").read_text()
    wg = wg.replace("dataset_path: allenai/winogrande", "dataset_path: json")
    wg = wg.replace("dataset_name: winogrande_xl\n", "dataset_kwargs:\n  data_files:\n"
                    f"    train: {data / 'wg_train.jsonl'}\n"
                    f"    validation: {data / 'wg_validation.jsonl'}\n")
    (tasks / "winogrande.yaml").write_text(wg)
    shutil.copy(shipped / "winogrande" / "preprocess_winogrande.py", tasks)
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=4, device="cpu")
    old = os.environ.get("DISABLE_MULTIPROC")
    os.environ["DISABLE_MULTIPROC"] = "1"  # lm-eval's bootstrap in-process (same draws)
    try:
        tm = TaskManager(include_path=str(tasks), include_defaults=False)
        res = {t: simple_evaluate(model=lm, tasks=[t], log_samples=True, task_manager=tm,
                                  num_fewshot=k, fewshot_random_seed=1234)
               for t, k in (("lambada_openai", None), ("winogrande", 2))}
    finally:
        if old is None:
            os.environ.pop("DISABLE_MULTIPROC", None)
        else:
            os.environ["DISABLE_MULTIPROC"] = old
    return {"base": base, "tasks": tasks, "model": model, "res": res}


def _run(world: dict[str, Any], tmp_path: Path, task: str, **over: Any) -> tuple[list, dict]:
    """A study with one lm_eval source on ``task``: its graded rows (document order) and
    report.json (report.md's text under ``_md``)."""
    from assay.spec import parse_spec
    from assay.stages import concat_rows, report_files, run_study
    from assay.store import Store

    src = {"name": "s", "kind": "lm_eval", "task": task, "include_path": str(world["tasks"]),
           "choices": {"model": {"kind": "hf", "path": str(world["model"]),
                                 "dtype": "float32"}}, **over}
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "ll", "sources": [src],
                                      "measure": {"choice_accuracy": {}}}),
                      source="ll.yaml", base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    rows = sorted(concat_rows(store, run.graded["s"]), key=lambda r: int(r["task_id"]))
    files = report_files(store, run.report)
    md = files["report.md"]
    report = json.loads(files["report.json"])
    report["_md"] = md if isinstance(md, str) else md.decode()
    return rows, report


def _samples(world: dict[str, Any], task: str) -> list[dict[str, Any]]:
    return sorted(world["res"][task]["samples"][task], key=lambda s: s["doc_id"])


@pytest.mark.slow  # lm-eval's import, its task pipeline, a study
def test_lambada_equals_simple_evaluate(world: dict[str, Any], tmp_path: Path) -> None:
    """lambada_openai: every request (context, continuation), log-likelihood (1.5e-5),
    is_greedy, per-document acc and perplexity equal lm-eval's; report.json's
    lm_eval_metrics[s] has perplexity (lm-eval's corpus-level aggregation) and acc under
    lm-eval's names, with lm-eval's stderrs."""
    from lm_eval.api.metrics import perplexity

    rows, report = _run(world, tmp_path, "lambada_openai")
    samples = _samples(world, "lambada_openai")
    assert len(rows) == len(samples) == 8
    for r, s in zip(rows, samples):
        d = s["doc_id"]
        (ctx, cont), = [tuple(a) for a in s["arguments"]]
        assert (r["prompt"], r["privileged"]["choices"]) == (ctx, [cont]), d
        ll, greedy = s["filtered_resps"][0]
        assert abs(r["judge_meta"]["loglik"][0] - ll) <= TOL, d
        assert r["judge_meta"]["is_greedy"] == [greedy], d
        assert r["reward"] == s["acc"] == int(greedy), d  # acc is is_greedy, not argmax
        assert s["perplexity"] == ll, d
    accs = [r["reward"] for r in rows]
    assert 0 < np.mean(accs) < 1  # both kinds of document
    want = world["res"]["lambada_openai"]["results"]["lambada_openai"]
    # choice_accuracy's default sources leave it out: one continuation is no choice
    assert not [m for m in report["measurements"] if m["kind"] == "choice_accuracy"]
    doc, = [m for m in report["measurements"] if m["kind"] == "lm_eval_metrics"]
    assert doc["source"] == "s"
    ests = {e["name"]: (e, se) for e, se in zip(doc["estimates"], doc["data"]["stderr"])}
    assert list(ests) == ["perplexity,none", "acc,none"]
    ppl, ppl_se = ests["perplexity,none"]
    ours = [r["judge_meta"]["loglik"][0] for r in rows]
    assert ppl["value"] == pytest.approx(perplexity(ours), rel=1e-12)  # lm-eval's aggregation
    assert ppl["value"] == pytest.approx(want["perplexity,none"], rel=2 * TOL)
    assert ppl_se == pytest.approx(want["perplexity_stderr,none"], rel=1e-3)
    acc, acc_se = ests["acc,none"]
    assert acc["value"] == pytest.approx(want["acc,none"], abs=1e-12)
    assert acc_se == pytest.approx(want["acc_stderr,none"], abs=1e-12)
    assert acc["n"] == ppl["n"] == 8 and acc["low"] < acc["value"] < acc["high"]
    assert f"lm-eval stderr {want['acc_stderr,none']:.4f}" in doc["report"]
    assert "perplexity,none" in report["_md"] and "acc,none" in report["_md"]


@pytest.mark.slow
def test_winogrande_equals_simple_evaluate(world: dict[str, Any], tmp_path: Path) -> None:
    """winogrande (2-shot): each choice's own context and the shared continuation equal
    lm-eval's requests, every log-likelihood (1.5e-5), per-document acc and the mean."""
    rows, report = _run(world, tmp_path, "winogrande", num_fewshot=2)
    samples = _samples(world, "winogrande")
    assert len(rows) == len(samples) == 8
    for r, s in zip(rows, samples):
        d = s["doc_id"]
        p = r["privileged"]
        assert [[c, p["continuation"]] for c in p["contexts"]] == \
            [list(a) for a in s["arguments"]], d
        assert all(c.startswith(r["prompt"]) for c in p["contexts"]), d
        assert p["contexts"][0] != p["contexts"][1], d
        assert r["prompt"].count("\n\n") == 2, d  # the two examples lm-eval drew
        np.testing.assert_allclose(r["judge_meta"]["loglik"],
                                   [x[0] for x in s["filtered_resps"]], atol=TOL, rtol=0)
        assert r["reward"] == s["acc"], d
    want = world["res"]["winogrande"]["results"]["winogrande"]["acc,none"]
    assert np.mean([r["reward"] for r in rows]) == pytest.approx(want, abs=1e-12)
    doc, = [m for m in report["measurements"] if m["kind"] == "choice_accuracy"]
    assert doc["estimates"][0]["name"] == "acc"
    assert doc["estimates"][0]["value"] == pytest.approx(want, abs=1e-12)
    # lm-eval's metrics of the task (its process_results per document): acc, its stderr
    lm, = [m for m in report["measurements"] if m["kind"] == "lm_eval_metrics"]
    assert [(e["name"], e["value"]) for e in lm["estimates"]] == [("acc,none", pytest.approx(
        want, abs=1e-12))]


def test_perplexity_stderr_is_lm_evals_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replayed bootstrap equals lm-eval's own bootstrap_stderr(perplexity) on the same
    log-likelihoods (the same draws, not just close)."""
    pytest.importorskip("lm_eval")
    from lm_eval.api.metrics import bootstrap_stderr, perplexity

    from assay.measure.lm_eval_loglik import perplexity_stderr

    monkeypatch.setenv("DISABLE_MULTIPROC", "1")
    rnd = random.Random(5)
    for n in (2, 7, 40):
        xs = [-3 * rnd.random() for _ in range(n)]
        assert perplexity_stderr(xs, 3000) == pytest.approx(
            bootstrap_stderr(perplexity, xs, 3000), rel=1e-12), n


def test_loglik_results_refuses_other_numbers() -> None:
    """process_results must give lm-eval's perplexity (the log-likelihood) and acc (is_greedy
    as 0/1); anything else is named."""
    from assay.sources.lm_eval_loglik import loglik_results

    assert loglik_results({"acc": 1}, {"acc": 0}) == ["acc"]
    assert "'ppl'" in loglik_results({"ppl": -1.5}, {"ppl": -2.5})
    assert "not lm-eval's" in loglik_results({"acc": 0}, {"acc": 0})
    assert "not lm-eval's" in loglik_results({"perplexity": 1.5}, {"perplexity": 2.5})
    assert "different metrics" in loglik_results({"acc": 1}, {})
    assert "no metric" in loglik_results({}, {})


@pytest.mark.slow
def test_loglikelihood_task_with_other_process_results_refused(world: dict[str, Any],
                                                               tmp_path: Path) -> None:
    """A loglikelihood task whose own process_results gives another number (a probability,
    not the log-likelihood) is one error naming the source, the task and the document; in
    perplexity mode it is refused by output type with the mode to use."""
    from assay.errors import SpecError
    from assay.spec import parse_spec

    tasks = tmp_path / "tasks"
    shutil.copytree(world["tasks"], tasks)
    cfg = yaml.safe_load((tasks / "lambada_openai.yaml").read_text())
    cfg.update(task="lmx_lambada_prob", process_results="!function odd.process_results")
    text = yaml.safe_dump(cfg).replace("'!function odd.process_results'",
                                       "!function odd.process_results")
    (tasks / "lmx_lambada_prob.yaml").write_text(text)
    (tasks / "odd.py").write_text("import math\n\n\ndef process_results(doc, results):\n"
                                  "    ll, greedy = results[0]\n"
                                  "    return {'perplexity': math.exp(ll), 'acc': int(greedy)}\n")

    def build(task: str, mode: str = "choices") -> Any:
        spec = parse_spec(yaml.safe_dump({"version": 1, "name": "x", "sources": [
            {"name": "s", "kind": "lm_eval", "task": task, "include_path": str(tasks),
             mode: {"model": {"kind": "hf", "path": str(world["model"])}}}]}),
            source="x.yaml", base_dir=str(tmp_path))
        return spec.sources[0].build(spec.paths)

    with pytest.raises(SpecError, match=r"source 's' \(lm-eval task 'lmx_lambada_prob'\) "
                       r"document 0: its process_results returns 'perplexity'"):
        build("lmx_lambada_prob")
    with pytest.raises(SpecError, match="output_type is 'loglikelihood'.*choices: .*loglik"):
        build("lambada_openai", "perplexity")
