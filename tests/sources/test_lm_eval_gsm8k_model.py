"""gsm8k through kind: lm_eval with a model that answers: a tiny Llama trained in the test to
recite chosen answers after lm-eval's exact few-shot contexts, some right and some wrong, so
assay and ``simple_evaluate(model=HFLM)`` are compared on a non-zero, non-one exact_match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

SHOTS = 1
MAX_GEN = 40  # room for the longest recited answer and its stop sequence
STEPS = 400

#: (a, b) per test document: "Sam has a pens and buys b more. How many pens?"
PAIRS = [(12, 30), (7, 5), (1200, 50), (9, 4), (21, 21), (3, 8)]


def _answer(a: int, b: int, said: int, strict: bool) -> str:
    """A worked answer; ``strict`` ends it with gsm8k's '#### N' line (what strict-match reads),
    otherwise the number is only in the prose (what flexible-extract still finds)."""
    if strict:
        return f" {a} + {b} = {said:,}.\n#### {said:,}"
    return f" {a} + {b} makes {said:,} pens."


#: what the model is trained to say per test document: (said, strict), gold is a + b
RECITE = [(42, True), (13, True), (1250, False), (14, True), (42, False), (10, False)]
#: the exact_match each of those must get: (strict-match, flexible-extract)
EXPECT = [(1.0, 1.0), (0.0, 0.0), (0.0, 1.0), (0.0, 0.0), (0.0, 1.0), (0.0, 0.0)]


def _docs() -> dict[str, list[dict[str, Any]]]:
    def doc(a: int, b: int) -> dict[str, Any]:
        return {"question": f"Sam has {a} pens and buys {b} more. How many pens?",
                "answer": _answer(a, b, a + b, True).strip()}
    return {"train": [doc(2, 3), doc(40, 2)], "test": [doc(a, b) for a, b in PAIRS]}


def _contexts(tasks: Path) -> dict[int, str]:
    """lm-eval's context per test document (its few-shot draw at the seed both sides use),
    read through simple_evaluate with an LM that only records what it is asked."""
    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    seen: list[str] = []

    class Recorder(LM):  # type: ignore[misc]  # lm-eval's LM base class is untyped
        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            seen.extend(r.args[0] for r in requests)
            return [""] * len(requests)

        def loglikelihood(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> Any:
            raise NotImplementedError

    simple_evaluate(model=Recorder(), tasks=["gsm8k"], num_fewshot=SHOTS,
                    task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
                    fewshot_random_seed=1234)
    out: dict[int, str] = {}
    for c in seen:  # the last question in the context names the document
        i = next(i for i, (a, b) in enumerate(PAIRS)
                 if c.endswith(f"Sam has {a} pens and buys {b} more. How many pens?\nAnswer:"))
        out[i] = c
    assert sorted(out) == list(range(len(PAIRS)))
    return out


def train_reciter(path: Path, contexts: dict[int, str], targets: dict[int, str]) -> Path:
    """Train the tests' tiny BPE Llama until greedy decoding after each context gives its
    target: loss on the target tokens only, the ids as HFLM encodes them (no special tokens;
    context and continuation encoded apart, as generation produces them)."""
    import torch
    from helpers.tiny_bpe import build_tiny_bpe_lm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build_tiny_bpe_lm(path, hidden=64, layers=2, seed=3)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    seqs, masks = [], []
    for i in sorted(contexts):
        c = tok.encode(contexts[i], add_special_tokens=False)
        t = tok.encode(targets[i], add_special_tokens=False)
        seqs.append(c + t)
        masks.append([0] * len(c) + [1] * len(t))
    n = max(map(len, seqs))
    pad = tok.eos_token_id
    ids = torch.tensor([s + [pad] * (n - len(s)) for s in seqs])
    attn = torch.tensor([[1] * len(s) + [0] * (n - len(s)) for s in seqs])
    labels = ids.masked_fill(torch.tensor([m + [0] * (n - len(m)) for m in masks]) == 0, -100)
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for _ in range(STEPS):
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 1e-3:
            break
    model.eval()
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The shipped gsm8k YAML on local documents, the trained reciter, lm-eval's HFLM run."""
    pytest.importorskip("lm_eval")
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    base = tmp_path_factory.mktemp("gsmmodel")
    data = base / "data"
    data.mkdir()
    for split, docs in _docs().items():
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in docs))
    shipped = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    cfg = yaml.safe_load(shipped.read_text())
    cfg.pop("tag", None)
    cfg.pop("dataset_name", None)
    cfg["dataset_path"] = "json"
    cfg["dataset_kwargs"] = {"data_files": {s: str(data / f"{s}.jsonl")
                                            for s in ("train", "test")}}
    tasks = base / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k.yaml").write_text(yaml.safe_dump(cfg))

    contexts = _contexts(tasks)
    # each recitation runs on into the next "Question:", the task's stop sequence
    targets = {i: _answer(*PAIRS[i], said, strict) + "\n\nQuestion:"
               for i, (said, strict) in enumerate(RECITE)}
    model = train_reciter(base / "reciter", contexts, targets)
    lm = HFLM(pretrained=str(model), dtype="float32", batch_size=4, device="cpu")
    res = simple_evaluate(model=lm, tasks=["gsm8k"], num_fewshot=SHOTS, log_samples=True,
                          bootstrap_iters=0, gen_kwargs={"max_gen_toks": MAX_GEN},
                          task_manager=TaskManager(include_path=str(tasks),
                                                   include_defaults=False),
                          fewshot_random_seed=1234)
    return {"base": base, "res": res, "model": model, "targets": targets}


@pytest.mark.slow  # trains a model (~110 steps, 5-7 s) and runs lm-eval's pipeline three times
def test_gsm8k_answers_equal_simple_evaluate(world: dict[str, Any], tmp_path: Path) -> None:
    """kind: hf greedy through a study and HFLM through simple_evaluate on the same trained
    model: the same responses token for token, the same answer per filter, exact_match per
    document, and means strictly between 0 and 1 (the model answers some right, some wrong)."""
    from assay.spec import parse_spec
    from assay.stages import concat_rows, run_study
    from assay.store import Store

    samples = world["res"]["samples"]["gsm8k"]
    by = {(s["doc_id"], s["filter"]): s for s in samples}
    # the model says what it was trained to (else the test below would compare noise)
    for i, target in world["targets"].items():
        assert by[(i, "strict-match")]["resps"][0][0] == target.removesuffix("Question:"), i

    src = {"name": "gsm", "kind": "lm_eval", "task": "gsm8k", "include_path": "tasks",
           "num_fewshot": SHOTS, "gen_kwargs": {"max_gen_toks": MAX_GEN},
           "generate": {"model": {"kind": "hf", "path": str(world["model"]),
                                  "dtype": "float32"},
                        "api": "completions",
                        "params": {"temperature": 0.0, "max_tokens": MAX_GEN,
                                   "stop": ["Question:", "</s>", "<|im_end|>"]}}}
    spec = parse_spec(yaml.safe_dump({"version": 1, "name": "gsm", "sources": [src]}),
                      source="gsm.yaml", base_dir=str(world["base"]))
    store = Store(tmp_path / "store")
    run = run_study(spec, store, progress=None)
    rows = sorted(concat_rows(store, run.graded["gsm"]), key=lambda r: int(r["task_id"]))
    assert len(rows) == len(PAIRS)
    keys = ["exact_match,strict-match", "exact_match,flexible-extract"]
    for r in rows:
        d = int(r["task_id"])
        assert r["prompt"] == by[(d, "strict-match")]["arguments"][0][0], d
        assert r["final_text"] == by[(d, "strict-match")]["resps"][0][0], d
        for k, want in zip(keys, EXPECT[d]):
            metric, flt = k.split(",")
            assert [r["judge_meta"]["filtered"][flt]] == by[(d, flt)]["filtered_resps"], (d, k)
            assert r["markers"][k] == by[(d, flt)][metric] == want, (d, k)
    for k in keys:
        mean = float(np.mean([r["markers"][k] for r in rows]))
        assert mean == pytest.approx(world["res"]["results"]["gsm8k"][k], abs=1e-12), k
        assert 0.0 < mean < 1.0, k


def test_sampled_task_warns_at_validate(tmp_path: Path) -> None:
    """A generate_until task that samples (do_sample: true) validates with a warning naming
    why its results are not HFLM's; the same task greedy has no such warning."""
    pytest.importorskip("lm_eval")
    import lm_eval

    from assay.spec import check_data, parse_spec

    data = tmp_path / "data"
    data.mkdir()
    for split, docs in _docs().items():
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in docs))
    cfg = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml")
                         .read_text())
    cfg.pop("tag", None)
    cfg.pop("dataset_name", None)
    cfg.update(dataset_path="json", dataset_kwargs={"data_files": {
        s: str(data / f"{s}.jsonl") for s in ("train", "test")}})
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k.yaml").write_text(yaml.safe_dump(cfg))
    (tasks / "gsm8k_sampled.yaml").write_text(yaml.safe_dump({
        **cfg, "task": "gsm8k_sampled",
        "generation_kwargs": {**cfg["generation_kwargs"], "do_sample": True,
                              "temperature": 0.7}}))
    (tmp_path / "model").mkdir()

    def warnings_for(task: str, temperature: float) -> list[str]:
        src = {"name": "gsm", "kind": "lm_eval", "task": task, "include_path": "tasks",
               "num_fewshot": SHOTS, "gen_kwargs": {"max_gen_toks": 8},
               "generate": {"model": {"kind": "hf", "path": "model"}, "api": "completions",
                            "params": {"temperature": temperature, "max_tokens": 8,
                                       "stop": ["Question:", "</s>", "<|im_end|>"]}}}
        spec = parse_spec(yaml.safe_dump({"version": 1, "name": "g", "sources": [src]}),
                          source="g.yaml", base_dir=str(tmp_path))
        problems, warnings = check_data(spec)
        assert problems == []
        return warnings

    assert not [w for w in warnings_for("gsm8k", 0.0) if "samples" in w]
    got = [w for w in warnings_for("gsm8k_sampled", 0.7) if "samples" in w]
    assert len(got) == 1, got
    assert got[0].startswith("sources[0].generate.params.temperature: 0.7: the task samples")
    assert "HFLM from torch's one global stream" in got[0] and "top 50" in got[0]
