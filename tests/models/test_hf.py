"""The hf backend on a tiny random Llama built offline: greedy outputs equal transformers'
own generate and do not depend on the batch size at fp32, per-row seeds, the weights in the key."""

from __future__ import annotations

import shutil

import pytest

from assay.errors import SpecError
from assay.models import generate
from assay.models.hf import HFBackend
from assay.store import Store

QS = ["what is 2 + 3 ?", "the answer of one", "go",
      "how many people have water in their house and the time of day when you look at it",
      "write a long word", "is it hot", "what number is the first one you call when water is out",
      "she said that they would come at one", "up", "make some sound"]
GREEDY = {"temperature": 0.0, "max_tokens": 10}


@pytest.fixture(scope="module")
def lm(tiny_lm_dir):
    return HFBackend({"kind": "hf", "path": str(tiny_lm_dir), "batch_tokens": 200})


def test_greedy_equals_transformers_generate_one_prompt_at_a_time(lm, tmp_path):
    import torch

    g = generate(QS, lm, params=GREEDY, store=Store(tmp_path))
    for i, q in enumerate(QS):
        text = lm.render([{"role": "user", "content": q}], "chat")
        ids = lm.tok(text, add_special_tokens=False, return_tensors="pt")
        assert int((ids["input_ids"] == lm.tok.bos_token_id).sum()) == 1  # the template's BOS only
        ref = lm.model.generate(**ids, do_sample=False, max_new_tokens=10, pad_token_id=lm.pad_id)
        new = ref[0, ids["input_ids"].shape[1]:].tolist()
        stopped = new[-1] == lm.tok.eos_token_id
        want = lm.tok.decode(new[:-1] if stopped else new, skip_special_tokens=True)
        rec = g.records[i]
        assert rec["completion"] == want and rec["prompt_tokens"] == ids["input_ids"].shape[1]
        assert rec["finish_reason"] == ("stop" if stopped else "length")
        assert rec["completion_tokens"] == len(new)
    assert torch.get_default_dtype() == torch.float32


def test_greedy_outputs_do_not_depend_on_the_batch_size_at_fp32(lm, tiny_lm_dir, tmp_path):
    budget = generate(QS, lm, params=GREEDY, store=Store(tmp_path / "a")).completions
    assert lm.stats["batches"] >= 2  # several sorted batches of different widths
    for fixed in (1, 3, 8):
        b = HFBackend({"kind": "hf", "path": str(tiny_lm_dir)}, fixed_batch=fixed)
        assert generate(QS, b, params=GREEDY,
                        store=Store(tmp_path / f"f{fixed}")).completions == budget


def test_sampling_is_seeded_per_row_not_per_batch(lm, tiny_lm_dir, tmp_path):
    params = {"temperature": 1.0, "top_p": 0.9, "max_tokens": 8}
    together = generate(QS[:6], lm, k=3, params=params, seed=5,
                        store=Store(tmp_path / "a")).completions
    alone = HFBackend({"kind": "hf", "path": str(tiny_lm_dir)}, fixed_batch=1)
    assert generate(QS[:6], alone, k=3, params=params, seed=5,
                    store=Store(tmp_path / "b")).completions == together
    assert any(len(set(c)) > 1 for c in together)  # the k samples of a prompt differ
    other = generate(QS[:6], lm, k=3, params=params, seed=6,
                     store=Store(tmp_path / "c")).completions
    assert other != together
    # a nucleus so small it holds only the top token is greedy decoding
    tiny_p = generate(QS, lm, params={"temperature": 1.0, "top_p": 1e-6, "max_tokens": 10},
                      store=Store(tmp_path / "d")).completions
    assert tiny_p == generate(QS, lm, params=GREEDY, store=Store(tmp_path / "e")).completions


def test_stop_strings_and_length(lm, tmp_path):
    full = generate(QS[:4], lm, params=GREEDY, store=Store(tmp_path / "a"))
    word = full.records[3]["completion"].split()[3]
    cut = generate(QS[:4], lm, params={**GREEDY, "stop": [f" {word}"]}, store=Store(tmp_path / "b"))
    for a, b in zip(full.records, cut.records):
        if f" {word}" in a["completion"]:
            assert b["completion"] == a["completion"][:a["completion"].index(f" {word}")]
            assert b["finish_reason"] == "stop"
        else:
            assert b["completion"] == a["completion"]
    short = generate(QS[:2], lm, params={"temperature": 0.0, "max_tokens": 2},
                     store=Store(tmp_path / "c"))
    assert ([(r["finish_reason"], r["completion_tokens"]) for r in short.records]
            == [("length", 2)] * 2)


def test_new_weights_in_the_same_directory_recompute(tiny_lm_dir, tmp_path):
    from helpers.tiny_lm import build_tiny_lm

    d = tmp_path / "ckpt"
    shutil.copytree(tiny_lm_dir, d)
    store = Store(tmp_path / "store")
    first = generate(QS[:3], HFBackend({"kind": "hf", "path": str(d)}), params=GREEDY, store=store)
    assert first.sent == 3
    assert generate(QS[:3], HFBackend({"kind": "hf", "path": str(d)}), params=GREEDY,
                    store=store).sent == 0
    build_tiny_lm(d, seed=1)  # another checkpoint written over the same path
    again = generate(QS[:3], HFBackend({"kind": "hf", "path": str(d)}), params=GREEDY, store=store)
    assert again.sent == 3 and again.completions != first.completions


def test_clear_errors(tiny_lm_dir, tmp_path):
    d = tmp_path / "nochat"
    shutil.copytree(tiny_lm_dir, d)
    cfg = d / "tokenizer_config.json"
    import json

    doc = json.loads(cfg.read_text())
    doc.pop("chat_template", None)
    cfg.write_text(json.dumps(doc))
    for extra in d.glob("chat_template.*"):
        extra.unlink()
    b = HFBackend({"kind": "hf", "path": str(d)})
    with pytest.raises(SpecError, match="no chat template; use api: completions"):
        generate(["hi"], b, store=Store(tmp_path / "s"))
    assert generate(["what is"], b, api="completions", params=GREEDY,
                    store=Store(tmp_path / "s")).sent == 1
    with pytest.raises(SpecError, match="not a local directory"):
        HFBackend({"kind": "hf", "path": str(tmp_path / "missing" / "x")})


def test_sampled_first_tokens_follow_the_models_distribution(lm, tmp_path):
    """Against an independent reference: softmax of the logits of a plain forward pass."""
    import numpy as np
    import torch
    from scipy import stats

    q = QS[0]
    text = lm.render([{"role": "user", "content": q}], "chat")
    ids = lm.tok(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        p = torch.softmax(lm.model(**ids).logits[0, -1].double() / 0.8, -1).numpy()
    n = 600
    g = generate([q], lm, k=n, params={"temperature": 0.8, "max_tokens": 1},
                 store=Store(tmp_path / "a"))
    # special tokens (pad, bos, eos, role tags) decode to nothing: they are one category
    special = sorted(set(lm.tok.all_special_ids) | {lm.tok.eos_token_id})
    plain = np.setdiff1d(np.arange(len(p)), special)
    toks = [(lm.tok(c, add_special_tokens=False)["input_ids"] or [-1])[0] for c in g.completions[0]]
    counts = np.bincount([t for t in toks if t >= 0], minlength=len(p))
    obs = np.append(counts[plain], sum(t < 0 for t in toks))
    exp = np.append(p[plain], p[special].sum()) * n
    big = exp >= 5
    obs, exp = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    # a nucleus of 0.5 draws only from the top tokens that reach it
    nucleus = np.argsort(-p)[: int(np.searchsorted(np.cumsum(np.sort(p)[::-1]), 0.5) + 1)]
    g = generate([q], lm, k=200, params={"temperature": 0.8, "top_p": 0.5, "max_tokens": 1},
                 store=Store(tmp_path / "b"))
    drawn = {(lm.tok(c, add_special_tokens=False)["input_ids"] or [-1])[0]
             for c in g.completions[0]}
    allowed = {-1 if t in special else t for t in nucleus.tolist()}
    assert drawn == allowed


def test_every_sample_advances_the_progress_unit_once(lm, tmp_path):
    from assay.progress import listen

    seen = []
    stop = listen(lambda s: seen.append(s) if s.label == "hf-progress" else None)
    try:
        g = generate(QS[:5], lm, k=2, params={"temperature": 0.0, "max_tokens": 3},
                     store=Store(tmp_path), label="hf-progress")
    finally:
        stop()
    assert [s.done for s in seen if not s.finished] == list(range(1, 11))
    assert seen[-1].finished and seen[-1].total == 10 and not g.errors
    assert seen[-1].counts.get("errors", 0) == 0
