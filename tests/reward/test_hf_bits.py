"""An hf reward model's score of an input has the same float64 bits whichever other inputs were
scored with it, in whatever order, at whatever torch thread count (issue 49: a rerun that scores
only an edit's new inputs must equal a cold run byte for byte)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from helpers import reward_fixtures

from assay.reward import HFRewardModel

tiny_rm_dir = reward_fixtures.tiny_rm_dir

# varied lengths (1 to 25 words each side) from the tokenizer's own vocabulary
_WORDS = " ".join(reward_fixtures.SENTENCES).split()
_RNG = random.Random(0)
PROMPTS = [" ".join(_RNG.choice(_WORDS) for _ in range(_RNG.randint(1, 25))) for _ in range(64)]
RESPONSES = [" ".join(_RNG.choice(_WORDS) for _ in range(_RNG.randint(1, 25))) for _ in range(64)]


def bits(a: np.ndarray) -> list[str]:
    return [float(x).hex() for x in a]


@pytest.fixture(scope="module")
def rm(tiny_rm_dir):
    # a budget that puts many mixed-length items in one padded batch under the old scoring
    return HFRewardModel(tiny_rm_dir, device="cpu", batch_tokens=4096)


def test_a_subsets_scores_equal_the_full_sets_bit_for_bit(rm):
    full = rm.score(PROMPTS, RESPONSES)
    assert len({len(s) for s in rm.encode(PROMPTS, RESPONSES)[0]}) > 20  # mixed lengths
    assert np.std(full) > 0
    for pick in ([5], [0, 7, 30], list(range(0, 64, 2)), list(range(63, -1, -3))):
        sub = rm.score([PROMPTS[i] for i in pick], [RESPONSES[i] for i in pick])
        assert bits(sub) == bits(full[pick]), pick
    # shuffled, with an inserted input in front: every old input keeps its bits
    order = list(range(64))
    random.Random(1).shuffle(order)
    again = rm.score(["a new question?"] + [PROMPTS[i] for i in order],
                     ["fresh"] + [RESPONSES[i] for i in order])
    assert bits(again[1:]) == bits(full[order])


def test_scores_equal_an_unpadded_transformers_forward_of_each_input(rm):
    ids, _, _ = rm.encode(PROMPTS[:12], RESPONSES[:12])
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the count the adapter pins by default
    try:
        with torch.inference_mode():
            ref = [rm.model(input_ids=torch.tensor([s])).logits[0, 0].item() for s in ids]
    finally:
        torch.set_num_threads(torch_threads)
    assert bits(rm.score(PROMPTS[:12], RESPONSES[:12])) == bits(np.array(ref))


def test_scoring_runs_at_the_pinned_thread_count_and_restores_the_callers(rm, monkeypatch):
    seen = []
    forward = rm.model.forward

    def spy(*a, **k):
        seen.append(torch.get_num_threads())
        return forward(*a, **k)

    before = torch.get_num_threads()
    monkeypatch.setenv("ASSAY_LOGLIK_THREADS", "1")
    monkeypatch.setattr(rm.model, "forward", spy)
    torch.set_num_threads(3)
    try:
        rm.score(PROMPTS[:4], RESPONSES[:4])
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 1, 1, 1]  # one pass per input, each at one thread


def test_padded_batching_is_an_option_with_its_own_fingerprint(tiny_rm_dir, rm):
    from assay.reward.hf import SCORING_VERSION

    fast = HFRewardModel(tiny_rm_dir, device="cpu", batch_tokens=4096, batching="padded")
    alone = rm.score(PROMPTS, RESPONSES)
    padded = fast.score(PROMPTS, RESPONSES)
    assert fast.last_run is not None and fast.last_run.n_batches < len(PROMPTS)
    assert rm.last_run is not None and rm.last_run.n_batches == len(PROMPTS)
    np.testing.assert_allclose(padded, alone, atol=1e-4)  # close, not bit for bit
    assert fast.fingerprint != rm.fingerprint
    assert rm.info["batching"] == "alone" and SCORING_VERSION >= 2
    # the invariance probe still exercises padded batches of the model
    inv = rm.check_invariance(PROMPTS[:16], RESPONSES[:16])
    assert inv.passed and inv.largest_batch > 1
