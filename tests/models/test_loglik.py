"""Log-likelihood scoring on tiny local models: equal to lm-evaluation-harness's HFLM (per choice,
acc/acc_norm, rolling perplexity), independent of the batch size, journalled and resumable."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from assay.models.hf_loglik import HFScorer, rolling_windows
from assay.models.loglik import loglikelihoods, rolling_loglikelihoods

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "configs" / "data" / "mmlu_tiny"


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers.tiny_bpe import build_tiny_bpe_lm

    return build_tiny_bpe_lm(tmp_path_factory.mktemp("bpe"))


@pytest.fixture(scope="module")
def short_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model with a 16-token context: documents need several rolling windows."""
    from helpers.tiny_bpe import build_tiny_bpe_lm

    return build_tiny_bpe_lm(tmp_path_factory.mktemp("short"), max_positions=16, seed=3)


def _spec(path: Path, **kw) -> dict:
    return {"kind": "hf", "path": str(path), "dtype": "float32", **kw}


def _mmlu_source(model: dict, k: int = 2):
    from assay.spec import parse_spec

    spec = parse_spec(f"""
version: 1
name: t
sources:
  - name: base
    kind: hf_dataset
    path: {FIXTURE}
    split: test
    prompt_template: "{{{{ question }}}}\\nA. {{{{ choices[0] }}}}\\nB. {{{{ choices[1] }}}}\\n\\
      C. {{{{ choices[2] }}}}\\nD. {{{{ choices[3] }}}}\\nAnswer:"
    choices:
      model: {model}
      templates: ["A", "B", "C", "D"]
      fewshot: {{k: {k}, split: dev}}
measure:
  choice_accuracy: {{by: subject}}
""", source="t.yaml", base_dir=str(ROOT))
    return spec


def _lmeval(path: Path, batch_size: int = 8):
    pytest.importorskip("lm_eval")
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(path), dtype="float32", batch_size=batch_size, device="cpu")


def _instances(kind: str, args: list[tuple]) -> list:
    from lm_eval.api.instance import Instance

    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


@pytest.mark.slow  # ~30 s: lm-eval's import and model load
def test_choices_equal_lm_eval(bpe_dir: Path) -> None:
    """Per-choice log-likelihoods and is-greedy of an MMLU-shaped 2-shot set, plus contexts that
    end in a space and an empty context, equal lm-eval's HFLM on the same model directory; so do
    acc and acc_norm computed as lm-eval's multiple_choice task does."""
    from assay.stages.score_choices import score_choice_rows

    spec = _mmlu_source(_spec(bpe_dir))
    src = spec.sources[0]
    prompt_rows, _ = src.build(spec.paths)
    import json

    priv = [json.loads(p) for p in prompt_rows.to_arrow().column("privileged").to_pylist()]
    ctxs = prompt_rows.to_arrow().column("prompt").to_pylist()
    assert "Answer: " in ctxs[0] and ctxs[0].endswith("Answer:")  # the shots carry solved answers
    pairs = [(c, " " + x) for c, p in zip(ctxs, priv) for x in p["choices"]]
    pairs += [("Answer: ", "B"), ("water is ", "the answer"), ("", "the answer of it")]
    ours = loglikelihoods(pairs, _spec(bpe_dir))
    theirs = _lmeval(bpe_dir).loglikelihood(_instances("loglikelihood", pairs))
    np.testing.assert_allclose([o.logprob for o in ours], [t[0] for t in theirs], atol=1e-4, rtol=0)
    assert [o.is_greedy for o in ours] == [bool(t[1]) for t in theirs]

    graded = score_choice_rows(prompt_rows, _spec(bpe_dir))
    i = 0
    acc, acc_norm = [], []
    for p in priv:
        lls = np.array([t[0] for t in theirs[i:i + len(p["choices"])]])
        i += len(p["choices"])
        lens = np.array([float(len(c)) for c in p["choices"]])
        acc.append(float(np.argmax(lls) == p["gold"]))
        acc_norm.append(float(np.argmax(lls / lens) == p["gold"]))
    rows = list(graded)
    assert [r["reward"] for r in rows] == acc
    assert [r["markers"]["acc_norm"] for r in rows] == acc_norm
    assert 0 < sum(acc) < len(acc)  # not a degenerate model: some right, some wrong


def test_batch_size_does_not_change_results(bpe_dir: Path) -> None:
    pairs = [(f"what is the answer {'of it ' * i}?", c) for i in range(6)
             for c in (" A", " B", " the water", " number")]
    small = HFScorer(_spec(bpe_dir, batch_tokens=16))
    large = HFScorer(_spec(bpe_dir, batch_tokens=100_000))
    a, b = small.score(pairs), large.score(pairs)
    assert small.stats["batches"] > large.stats["batches"] == 1
    # the same bits, not only close ones (issue 52; tests/models/test_loglik_bits.py)
    assert [x.logprob.hex() for x in a] == [x.logprob.hex() for x in b]
    assert [x.is_greedy for x in a] == [x.is_greedy for x in b]
    # one-token continuations after one context share one forward row, as lm-eval's logits cache
    assert large.stats["forward_rows"] == 6 * 3


def test_journal_resumes_and_new_checkpoint_recomputes(bpe_dir: Path, tmp_path: Path) -> None:
    from assay.store import Store

    store = Store(tmp_path / "store")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(bpe_dir, ckpt)
    pairs = [("water is", " the"), ("water is", " a"), ("who can", " call")]
    first = HFScorer(_spec(ckpt))
    a = loglikelihoods(pairs, first, store=store)
    again = HFScorer(_spec(ckpt))
    b = loglikelihoods(pairs + [("who can", " go")], again, store=store)
    assert again.stats["forward_rows"] == 1  # only the new pair was scored
    assert [x.logprob for x in b[:3]] == [x.logprob for x in a]
    from helpers.tiny_bpe import build_tiny_bpe_lm

    build_tiny_bpe_lm(ckpt, seed=7)  # new weights under the same path
    fresh = HFScorer(_spec(ckpt))
    c = loglikelihoods(pairs, fresh, store=store)
    assert fresh.stats["forward_rows"] == 2
    assert c[0].logprob != a[0].logprob


def test_rolling_windows_match_lm_eval_helpers() -> None:
    lm_utils = pytest.importorskip("lm_eval.utils")
    for n in (1, 3, 4, 5, 9, 17):
        toks = list(range(10, 10 + n))
        for L in (1, 2, 4, 8):
            want = [lm_utils.make_disjoint_window(w) for w in
                    lm_utils.get_rolling_token_windows(toks, 0, L, 1)]
            assert rolling_windows(toks, 0, L) == [tuple(w) for w in want], (n, L)


def test_rolling_loglikelihood_equals_lm_eval(short_dir: Path) -> None:
    docs = [(FIXTURE / "dev.jsonl").read_text()[:400], "water is the answer", "A"]
    ours = rolling_loglikelihoods(docs, _spec(short_dir))
    theirs = _lmeval(short_dir).loglikelihood_rolling(_instances("loglikelihood_rolling",
                                                                 [(d,) for d in docs]))
    np.testing.assert_allclose([o.logprob for o in ours], theirs, atol=1e-4, rtol=0)
    assert ours[0].tokens > 16 and all(math.isfinite(o.logprob) for o in ours)


LM_EVAL_TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question.strip()}}}}\\nA. {{{{choices[0]}}}}\\nB. {{{{choices[1]}}}}\\n\\
  C. {{{{choices[2]}}}}\\nD. {{{{choices[3]}}}}\\nAnswer:"
doc_to_choice: {choices}
doc_to_target: answer
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
  - {{metric: acc_norm, aggregation: mean, higher_is_better: true}}
"""


@pytest.mark.slow  # ~40 s: lm-eval's own task pipeline (datasets, simple_evaluate)
def test_study_equals_lm_eval_tasks(bpe_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """lm-eval's own multiple_choice tasks (zero-shot; letters and choice texts) on the fixture
    through simple_evaluate, and the same questions as a choices: source scored by assay: the
    contexts, every choice's log-likelihood, each question's acc and acc_norm and the means."""
    pytest.importorskip("lm_eval")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from assay.spec import parse_spec
    from assay.stages.score_choices import score_choice_rows

    forms = {"letters": '["A", "B", "C", "D"]', "texts": '"{{choices}}"'}
    for name, choices in forms.items():
        (tmp_path / f"{name}.yaml").write_text(LM_EVAL_TASK.format(
            name=f"assay_mc_{name}", data=FIXTURE / "test.jsonl", choices=choices))
    res = simple_evaluate(model=_lmeval(bpe_dir), tasks=[f"assay_mc_{n}" for n in forms],
                          num_fewshot=0, task_manager=TaskManager(include_path=str(tmp_path)),
                          log_samples=True)
    for name in forms:
        choice = ('templates: ["A", "B", "C", "D"]' if name == "letters" else "field: choices")
        spec = parse_spec(f"""
version: 1
name: t
sources:
  - name: s
    kind: file
    path: {FIXTURE / "test.jsonl"}
    prompt_template: "{{{{ question.strip() }}}}\\nA. {{{{ choices[0] }}}}\\nB. \\
      {{{{ choices[1] }}}}\\nC. {{{{ choices[2] }}}}\\nD. {{{{ choices[3] }}}}\\nAnswer:"
    choices: {{model: {{kind: hf, path: "{bpe_dir}", dtype: float32}}, {choice}}}
""", source="t.yaml", base_dir=str(tmp_path))
        rows = list(score_choice_rows(spec.sources[0].build(spec.paths)[0], _spec(bpe_dir)))
        samples = sorted(res["samples"][f"assay_mc_{name}"], key=lambda s: s["doc_id"])
        assert len(samples) == len(rows) == 36
        for r, s in zip(rows, samples):
            assert r["prompt"] == s["arguments"][0][0]
            np.testing.assert_allclose(r["judge_meta"]["loglik"],
                                       [x[0] for x in s["filtered_resps"]], atol=1e-4, rtol=0)
            assert r["judge_meta"]["is_greedy"] == [bool(x[1]) for x in s["filtered_resps"]]
            assert (r["reward"], r["markers"]["acc_norm"]) == (s["acc"], s["acc_norm"])
        got = res["results"][f"assay_mc_{name}"]
        assert np.mean([r["reward"] for r in rows]) == pytest.approx(got["acc,none"])
        assert np.mean([r["markers"]["acc_norm"] for r in rows]) == pytest.approx(
            got["acc_norm,none"])
    texts = res["results"]["assay_mc_texts"]
    assert texts["acc,none"] != texts["acc_norm,none"]  # the length normalization matters here
