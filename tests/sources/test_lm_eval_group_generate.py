"""A group of generate_until tasks (lm-eval's shipped gsm8k definition over two local document
sets of unequal size): the group's exact_match for each filter lm-eval discovers, and its
pooled stderr, equal simple_evaluate's on the same canned answers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("lm_eval")

MAX_GEN = 6
CANNED = {0: "#### 12", 1: "it is 1,250", 2: "we get 3", 3: "so\n#### 7", 4: "costs $40",
          5: "#### 1"}
CANNED_MODULE = '''
import re

CANNED = {canned!r}


def answer(prompts):
    # the question asked last in lm-eval's context (after the few-shot example) names the doc
    return [CANNED[int(re.findall(r"water (\\d+) \\+", p)[-1])] for p in prompts]
'''
SIZES = {"gsm_a": 6, "gsm_b": 4}


def _docs(n: int, start: int) -> list[dict[str, Any]]:
    out = []
    for i in range(start, start + n):
        ans = ["12", "1,250", "-3", "7", "$40", "0"][i % 6]
        out.append({"question": f"what is the number of water {i} + {i % 3} ?",
                    "answer": f"the answer is {i} + {i % 3} = {ans}.\n#### {ans.strip('$')}"})
    return out


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.slow  # lm-eval's import and its task pipeline, twice
def test_generate_group_equals_simple_evaluate(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import lm_eval
    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    from assay.sources.lm_eval_index import forget
    from assay.spec import parse_spec
    from assay.stages import report_files, run_study
    from assay.store import Store

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    forget()
    shipped = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    train = _write(tmp_path / "train.jsonl", _docs(4, 100))
    for name, n in SIZES.items():
        cfg = yaml.safe_load(shipped.read_text())
        cfg.pop("tag", None)
        cfg.pop("dataset_name", None)
        cfg.update(task=name, dataset_path="json", dataset_kwargs={"data_files": {
            "train": str(train), "test": str(_write(tmp_path / f"{name}.jsonl", _docs(n, 0)))}})
        (tasks / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    (tasks / "grp.yaml").write_text(yaml.safe_dump({
        "group": "gsm_grp", "task": list(SIZES),
        "aggregate_metric_list": [{"metric": "exact_match", "weight_by_size": True}]}))

    class Canned(LM):  # type: ignore[misc]  # lm-eval's LM base class is untyped
        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            return [CANNED[int(re.findall(r"water (\d+) \+", r.args[0])[-1])]
                    for r in requests]

        def loglikelihood(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

    want = simple_evaluate(model=Canned(), tasks=["gsm_grp"], num_fewshot=1,
                           gen_kwargs={"max_gen_toks": MAX_GEN},
                           task_manager=TaskManager(include_path=str(tasks),
                                                    include_defaults=False),
                           fewshot_random_seed=1234)["results"]

    (tmp_path / "gsm_canned.py").write_text(CANNED_MODULE.format(canned=CANNED))
    monkeypatch.syspath_prepend(str(tmp_path))
    src = {"name": "gsm", "kind": "lm_eval", "task": "gsm_grp", "include_path": "tasks",
           "num_fewshot": 1, "gen_kwargs": {"max_gen_toks": MAX_GEN},
           "generate": {"model": {"kind": "function", "callable": "gsm_canned:answer"},
                        "api": "completions",
                        "params": {"temperature": 0.0, "max_tokens": MAX_GEN,
                                   "stop": ["Question:", "</s>", "<|im_end|>"]}}}
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "gsm", "sources": [src]}),
                      source="gsm.yaml", base_dir=str(tmp_path))
    assert [s.name for s in spec.sources] == ["gsm.gsm_a", "gsm.gsm_b"]
    store = Store(tmp_path / "store")
    files = report_files(store, run_study(spec, store, progress=None).report)
    report = json.loads(files["report.json"])
    (doc,) = [m for m in report["measurements"] if m["kind"] == "lm_eval_group"]
    aggregated = [e for e in doc["estimates"] if ": " not in e["name"]]
    # lm-eval's filter discovery: both of gsm8k's filters, in sorted order
    assert [e["name"] for e in aggregated] == ["exact_match,flexible-extract",
                                               "exact_match,strict-match"]
    for i, e in enumerate(aggregated):
        metric, flt = e["name"].split(",")
        assert e["value"] == pytest.approx(want["gsm_grp"][e["name"]], abs=1e-12), e["name"]
        assert doc["data"]["stderr"][i] == pytest.approx(
            want["gsm_grp"][f"{metric}_stderr,{flt}"], rel=1e-9), e["name"]
        assert e["n"] == 10
    # size-weighted, not the members' plain mean: the two differ on these answers
    strict = [want[t]["exact_match,strict-match"] for t in SIZES]
    assert want["gsm_grp"]["exact_match,strict-match"] != pytest.approx(sum(strict) / 2)
    assert "lm_eval_group[gsm: gsm_grp]" in files["report.md"].decode()
