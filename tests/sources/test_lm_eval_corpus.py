"""lm-eval's shipped wmt16-de-en (bleu, ter, chrf: corpus-level aggregations) through a study,
against ``simple_evaluate`` on the same written translations: every document's (reference,
prediction) item, and each aggregate and stderr equal lm-eval's; never a mean under their names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

#: German "sentences" (numbered, so a canned model can tell which document it is asked) and
#: the written English answers, some exact, some partial, one empty
PAIRS = [("das haus ist klein", "the house is small", "the house is small"),
         ("der hund schläft", "the dog sleeps", "the dog is sleeping"),
         ("ich trinke wasser", "i drink water", "i drink the water"),
         ("es regnet heute", "it is raining today", "today it rains"),
         ("wir gehen nach hause", "we are going home", "we go to the house"),
         ("die katze ist schwarz", "the cat is black", "the cat is black"),
         ("er liest ein buch", "he is reading a book", ""),
         ("das wetter ist schön", "the weather is nice", "the weather is beautiful")]


def _docs() -> list[dict[str, Any]]:
    return [{"translation": {"de": f"{de} nr {i}", "en": en}}
            for i, (de, en, _) in enumerate(PAIRS)]


CANNED = {i: out for i, (_, _, out) in enumerate(PAIRS)}

CANNED_MODULE = '''
import re

CANNED = {canned!r}


def answer(prompts):
    return [CANNED[int(re.findall(r"nr (\\d+)", p)[-1])] for p in prompts]
'''


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """lm-eval's own wmt16-de-en definition (its include merged), only its dataset pointed at
    local files, and simple_evaluate's results for the written translations."""
    pytest.importorskip("lm_eval")
    pytest.importorskip("sacrebleu")
    import lm_eval
    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("lmbleu")
    data = base / "data"
    data.mkdir()
    for split in ("train", "validation", "test"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _docs()))
    shipped = Path(lm_eval.__file__).parent / "tasks" / "translation"
    cfg = yaml.safe_load((shipped / "wmt_common_yaml").read_text())
    cfg.update(yaml.safe_load((shipped / "wmt16_de-en.yaml").read_text()))
    assert [m["metric"] for m in cfg["metric_list"]] == ["bleu", "ter", "chrf"]
    for k in ("include", "tag", "dataset_name"):
        cfg.pop(k, None)
    cfg["dataset_path"] = "json"
    cfg["dataset_kwargs"] = {"data_files": {s: str(data / f"{s}.jsonl")
                                            for s in ("train", "validation", "test")}}
    tasks = base / "tasks"
    tasks.mkdir()
    (tasks / "wmt16-de-en.yaml").write_text(yaml.safe_dump(cfg))

    class Canned(LM):  # type: ignore[misc]  # lm-eval's LM base class is untyped
        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            return [CANNED[int(re.findall(r"nr (\d+)", r.args[0])[-1])] for r in requests]

        def loglikelihood(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

    res = simple_evaluate(model=Canned(), tasks=["wmt16-de-en"], num_fewshot=0,
                          log_samples=True,
                          task_manager=TaskManager(include_path=str(tasks),
                                                   include_defaults=False))
    return {"base": base, "res": res, "tasks": tasks}


def _source() -> dict[str, Any]:
    return {"name": "wmt", "kind": "lm_eval", "task": "wmt16-de-en", "include_path": "tasks",
            "num_fewshot": 0,
            "generate": {"model": {"kind": "function", "callable": "wmt_canned:answer"},
                         "api": "completions",
                         "params": {"temperature": 0.0, "max_tokens": 256, "stop": ["\n"]}}}


@pytest.mark.slow  # lm-eval's import, its task pipeline, its bootstrap over 100 draws
def test_bleu_ter_chrf_equal_simple_evaluate(world: dict[str, Any], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row keeps lm-eval's per-document item for bleu, ter and chrf (the logged sample's),
    has no reward (lm-eval gives no per-document score), and report.json's lm_eval_metrics
    gives each corpus aggregate and its bootstrap stderr equal to simple_evaluate's, with an
    interval over the documents; the run is not "nothing judged". Before, the task was
    refused ("aggregated by 'bleu'")."""
    from assay.spec import parse_spec
    from assay.stages import concat_rows, report_files, run_study
    from assay.store import Store

    lm = world["res"]["results"]["wmt16-de-en"]
    (tmp_path / "wmt_canned.py").write_text(CANNED_MODULE.format(canned=CANNED))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "wmt", "sources": [_source()]}),
                      source="wmt.yaml", base_dir=str(world["base"]))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    rows = sorted(concat_rows(store, run.graded["wmt"]), key=lambda r: int(r["task_id"]))
    samples = {s["doc_id"]: s for s in world["res"]["samples"]["wmt16-de-en"]}
    assert len(rows) == len(PAIRS) == len(samples)
    keys = ["bleu,none", "ter,none", "chrf,none"]
    for r in rows:
        d = int(r["task_id"])
        assert r["final_text"] == CANNED[d]
        assert r["reward"] is None and r["judge_status"] == "no_verdict", d
        got = r["judge_meta"]["lm_eval"]
        assert got["keys"] == keys
        for k in keys:
            assert got["items"][k] == json.loads(json.dumps(samples[d][k.split(",")[0]])), (d, k)
    files = report_files(store, run.report)
    report = json.loads(files["report.json"])
    doc = [m for m in report["measurements"] if m["kind"] == "lm_eval_metrics"][0]
    ests = {e["name"]: e for e in doc["estimates"]}
    assert list(ests) == keys
    for i, k in enumerate(keys):
        metric = k.split(",")[0]
        assert ests[k]["value"] == pytest.approx(lm[k], abs=1e-9), k
        assert ests[k]["n"] == len(PAIRS), k
        assert ests[k]["low"] <= ests[k]["value"] <= ests[k]["high"], k
        se = lm[f"{metric}_stderr,none"]
        assert se > 0 and doc["data"]["stderr"][i] == pytest.approx(se, abs=1e-9), k
    # the corpus bleu is not the mean of sentence bleus (the number a mean would have given)
    from lm_eval.api.metrics import bleu

    items = [tuple(r["judge_meta"]["lm_eval"]["items"]["bleu,none"]) for r in rows]
    sentence_mean = sum(bleu([it]) for it in items) / len(items)
    assert abs(sentence_mean - lm["bleu,none"]) > 1.0
    # judged, though no row has a reward: the run is not "nothing judged" (exit 4)
    from assay.stages.measure import nothing_judged

    assert nothing_judged(spec, {"wmt": concat_rows(store, run.graded["wmt"])}) == {}
    # and so says the run directory's run.json, whose facts read only some columns of the rows
    from assay.stages.finish import finish_run

    info = finish_run(store, spec, run, tmp_path / "run")
    assert "nothing_judged" not in info  # (exit 4 otherwise)
