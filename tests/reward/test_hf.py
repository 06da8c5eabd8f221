"""HFRewardModel through the real transformers path on a tiny local model (random weights)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import reward_fixtures
from helpers.reward_fixtures import CHAT_TEMPLATE, build_tiny_reward_model

from assay.errors import DataError
from assay.reward import HFRewardModel, RewardModel, RewardModelError

tiny_rm_dir = reward_fixtures.tiny_rm_dir
tiny_rm = reward_fixtures.tiny_rm

PROMPTS = ["What is the capital of France?", "How many cups are in a quart?",
           "Please explain photosynthesis in simple words for a child.", "Hi", "Write a poem."]
RESPONSES = ["Paris.", "Four cups make one quart, and here is a long explanation of why.",
             "Plants turn sunlight, water and air into sugar and oxygen.", "Hello!",
             "The sea and the sky at night."]


def test_import_is_torch_free():
    code = ("import sys, assay, assay.reward; "
            "from assay.reward import base, batching, scoring, stats, auditing, runtime, hf, "
            "embedding, function; "
            "print(json.dumps([m for m in ('torch', 'transformers', 'sentence_transformers', "
            "'matplotlib') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True,
                         text=True, check=True)
    assert json.loads(out.stdout) == []


def test_protocol_and_chat_template_single_bos(tiny_rm):
    rm = tiny_rm
    assert isinstance(rm, RewardModel)
    assert rm.template == "chat" and rm.info["attn_implementation"]
    ids, _, truncated = rm.encode(PROMPTS, RESPONSES)
    bos = rm.tokenizer.bos_token_id
    assert truncated == []
    for seq in ids:
        assert seq[0] == bos and seq[1] != bos and seq.count(bos) == 1
    # The naive path (render, then tokenize with special tokens) would put two BOS in front:
    # this is the bug the protocol avoids.
    text = rm.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}], tokenize=False)
    assert rm.tokenizer(text)["input_ids"][:2] == [bos, bos]
    assert rm.tokenizer.decode(ids[0]).endswith("Paris.</s>")


def test_template_without_bos_lets_tokenizer_add_one(tmp_path):
    path = build_tiny_reward_model(tmp_path / "m", chat_template=CHAT_TEMPLATE.replace(
        "{{ bos_token }}", ""))
    rm = HFRewardModel(path, device="cpu")
    ids, _, _ = rm.encode(PROMPTS[:2], RESPONSES[:2])
    assert rm.info["add_special_tokens"] is True
    assert all(s[0] == rm.tokenizer.bos_token_id and s[1] != s[0] for s in ids)


def test_double_bos_template_is_refused(tmp_path):
    path = build_tiny_reward_model(tmp_path / "m", chat_template="{{ bos_token }}" + CHAT_TEMPLATE)
    rm = HFRewardModel(path, device="cpu")
    with pytest.raises(RewardModelError, match="two BOS"):
        rm.score(["Q"], ["A"])


def test_scores_bit_identical_across_runs_and_loads(tiny_rm, tiny_rm_dir):
    a = tiny_rm.score(PROMPTS, RESPONSES)
    b = tiny_rm.score(PROMPTS, RESPONSES)
    c = HFRewardModel(tiny_rm_dir, device="cpu", batch_tokens=256).score(PROMPTS, RESPONSES)
    assert a.dtype == np.float64 and a.shape == (5,)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    assert np.std(a) > 0  # the head is not degenerate, so equality means something


def test_scores_match_a_plain_transformers_forward(tiny_rm):
    import torch

    rm = tiny_rm
    got = rm.score(PROMPTS[:2], RESPONSES[:2])
    for k in range(2):
        text = rm.tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPTS[k]},
             {"role": "assistant", "content": RESPONSES[k]}],
            tokenize=False)
        ids = rm.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            ref = rm.model(input_ids=ids).logits[0, 0].item()
        assert got[k] == pytest.approx(ref, abs=1e-5)


def test_duplicates_scored_once_and_run_record(tiny_rm):
    s = tiny_rm.score(PROMPTS + PROMPTS[:2], RESPONSES + RESPONSES[:2])
    run = tiny_rm.last_run
    assert run.n_items == 7 and run.n_scored == 5 and run.truncated == 0
    assert run.n_batches >= 2  # batch_tokens=256 splits these inputs
    assert s[5] == s[0] and s[6] == s[1]


def test_truncation_left_prompt_keeps_response_and_counts(tiny_rm_dir):
    rm = HFRewardModel(tiny_rm_dir, device="cpu", max_length=40)
    long_prompt = "Please explain photosynthesis in simple words for a child. " * 6
    prompts = [long_prompt, "Hi"]
    responses = ["Plants make sugar.", "Hello!"]
    ids, _, truncated = rm.encode(prompts, responses)
    assert truncated == [0] and len(ids[0]) <= 40
    text = rm.tokenizer.decode(ids[0])
    assert text.startswith("<s><|user|>") and text.endswith("<|assistant|>Plants make sugar.</s>")
    rm.score(prompts * 2, responses * 2)
    assert rm.last_run.truncated == 2 and rm.last_run.truncated_items == (0, 2)
    assert rm.total_truncated == 2


def test_truncation_error_and_right(tiny_rm_dir):
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 8
    strict = HFRewardModel(tiny_rm_dir, device="cpu", max_length=32, truncation="error")
    with pytest.raises(DataError, match=r"item 1 is \d+ tokens, over max_length=32"):
        strict.score(["Hi", long_prompt], ["Hello", "Fox."])
    right = HFRewardModel(tiny_rm_dir, device="cpu", max_length=32, truncation="right")
    ids, _, truncated = right.encode([long_prompt], ["Fox."])
    assert truncated == [0] and len(ids[0]) == 32
    left = HFRewardModel(tiny_rm_dir, device="cpu", max_length=32)
    with pytest.raises(DataError, match="the response alone does not fit"):
        left.score(["Hi"], [long_prompt])
    with pytest.raises(RewardModelError, match="truncation must be one of"):
        HFRewardModel(tiny_rm_dir, device="cpu", truncation="middle")


def test_invariance_probe_passes_and_can_fail(tiny_rm, tiny_rm_dir):
    rep = tiny_rm.check_invariance(PROMPTS, RESPONSES)
    assert rep.passed and rep.largest_batch > 1, str(rep)
    assert rep.single_vs_batched <= rep.atol and rep.padding <= rep.atol
    assert "invariance ok" in str(rep)
    # A model whose output depends on the batch shape must fail the probe.
    broken = HFRewardModel(tiny_rm_dir, device="cpu", batch_tokens=256)
    real = broken.model.forward

    def leaky(*args, **kwargs):
        out = real(*args, **kwargs)
        out.logits = out.logits + 0.01 * kwargs["input_ids"].shape[1]
        return out

    broken.model.forward = leaky
    bad = broken.check_invariance(PROMPTS, RESPONSES)
    assert not bad.passed and bad.padding > bad.atol


def test_config_never_edited_even_without_pad_token(tmp_path):
    path = build_tiny_reward_model(tmp_path / "nopad", pad_token=False)
    on_disk = (path / "config.json").read_bytes()
    rm = HFRewardModel(path, device="cpu", batching="padded")  # alone never pads: nothing to see
    before = rm.model.config.to_dict()
    assert before["pad_token_id"] is None
    s = rm.score(PROMPTS, RESPONSES)
    assert rm.model.config.to_dict() == before and rm.config_unchanged()
    assert rm.model.config.pad_token_id is None
    assert (path / "config.json").read_bytes() == on_disk
    assert any("one item at a time" in n for n in rm.last_run.notes)
    singles = np.array([rm.score([p], [r])[0] for p, r in zip(PROMPTS, RESPONSES)])
    assert np.array_equal(s, singles)
    assert rm.check_invariance(PROMPTS, RESPONSES).passed


def test_bf16_loads_head_in_fp32_from_checkpoint(tiny_rm, tiny_rm_dir):
    import torch
    from safetensors.torch import load_file

    rm = HFRewardModel(tiny_rm_dir, device="cpu", dtype="bfloat16")
    assert rm.model.score.weight.dtype == torch.float32
    assert rm.model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    saved = load_file(str(tiny_rm_dir / "model.safetensors"))["score.weight"]
    assert torch.equal(rm.model.score.weight, saved)  # exact fp32 values, not bf16-rounded
    assert "re-read from the checkpoint" in rm.info["head"]
    lo, hi = rm.score(PROMPTS, RESPONSES), tiny_rm.score(PROMPTS, RESPONSES)
    assert np.allclose(lo, hi, atol=0.1 * (1 + np.abs(hi).max()))
    assert rm.fingerprint != tiny_rm.fingerprint  # dtype is part of the protocol


def test_oom_backoff_halves_the_budget(tiny_rm_dir):
    import torch

    # batches of several inputs are the padded option's (the default scores each input alone)
    rm = HFRewardModel(tiny_rm_dir, device="cpu", batch_tokens=4096, batching="padded")
    ref = rm.score(PROMPTS, RESPONSES)
    real = rm.model.forward

    def small_memory(*args, **kwargs):
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(*args, **kwargs)

    rm.model.forward = small_memory
    got = rm.score(PROMPTS, RESPONSES)
    assert rm.last_run.oom_backoffs >= 1
    assert np.allclose(got, ref, atol=1e-5)

    def always(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    rm.model.forward = always
    with pytest.raises(torch.OutOfMemoryError):
        rm.score(["Q"], ["A"])


def test_device_and_dtype_auto_selection(monkeypatch):
    import torch

    from assay.reward.runtime import resolve_device, resolve_dtype

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda") == "float32"
    with pytest.raises(RewardModelError, match="dtype must be one of"):
        resolve_dtype("int4", "cpu")


def test_fingerprint_tracks_files_and_protocol(tiny_rm, tiny_rm_dir, tmp_path):
    again = HFRewardModel(tiny_rm_dir, device="cpu")
    assert again.fingerprint == tiny_rm.fingerprint  # batch_tokens is not part of it
    assert HFRewardModel(tiny_rm_dir, device="cpu",
                         max_length=64).fingerprint != tiny_rm.fingerprint
    assert HFRewardModel(tiny_rm_dir, device="cpu",
                         truncation="right").fingerprint != tiny_rm.fingerprint
    other = build_tiny_reward_model(tmp_path / "seed1", seed=1)
    assert HFRewardModel(other, device="cpu").fingerprint != tiny_rm.fingerprint


def test_pair_mode_without_chat_template(tmp_path):
    path = build_tiny_reward_model(tmp_path / "pair", chat_template=None)
    rm = HFRewardModel(path, device="cpu")
    assert rm.template == "pair"
    ids, _, _ = rm.encode(["Q?"], ["A."])
    assert ids[0][0] == rm.tokenizer.bos_token_id and ids[0].count(rm.tokenizer.bos_token_id) == 1
    assert np.isfinite(rm.score(["Q?"], ["A."])).all()
    with pytest.raises(RewardModelError, match="no chat template"):
        HFRewardModel(path, device="cpu", template="chat")


def test_bad_inputs_name_the_item(tiny_rm):
    with pytest.raises(DataError, match=r"responses\[1\] is NoneType"):
        tiny_rm.score(["a", "b"], ["x", None])
    with pytest.raises(DataError, match="2 prompts but 1 responses"):
        tiny_rm.score(["a", "b"], ["x"])
    with pytest.raises(DataError, match=r"responses\[0\] is empty"):
        tiny_rm.score(["a"], ["  "])


def test_cli_audits_a_local_hf_model_on_the_diagnostic_set(tmp_path, capsys):
    data = pytest.importorskip("assay.data")
    if not hasattr(data, "load_diagnostic_v3"):
        pytest.skip("assay.data.load_diagnostic_v3 has not landed")
    from assay.reward.__main__ import main

    path = build_tiny_reward_model(tmp_path / "m", max_positions=512)
    assert main(["--hf", str(path), "--out", str(tmp_path / "out"), "--dimensions",
                 "sycophancy", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "sycophancy" in out and "pooled length bias" in out and "sycophancy rate" in out
    assert "helpfulness" not in out
    assert (tmp_path / "out" / "reward_audit.png").stat().st_size > 1000
    assert (tmp_path / "out" / "reward_audit.md").read_text().startswith("# Reward-model audit")
