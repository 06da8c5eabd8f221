"""The ``function`` reward-model kind scores a batch per call (issue 19: documented as
``(prompts, responses)`` but called per pair); per-pair functions still work when asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.reward import FunctionRewardModel, RewardModelError, length_reward, length_rewards
from assay.spec import load_spec

CALLS: list[tuple[int, int]] = []


def scorer(prompts: list[str], responses: list[str]) -> list[float]:
    CALLS.append((len(prompts), len(responses)))
    return [float(len(r)) for r in responses]


def test_batched_calls_once_per_batch() -> None:
    prompts, responses = ["Q"] * 10, [f"r{'x' * i}" for i in range(10)]
    want = [length_reward(p, r) for p, r in zip(prompts, responses)]
    CALLS.clear()
    m = FunctionRewardModel(scorer, name="s", batched=True)
    assert m.score(prompts, responses).tolist() == want and CALLS == [(10, 10)]
    assert m.last_run.n_batches == 1
    CALLS.clear()
    m = FunctionRewardModel(scorer, name="s", batched=True, batch_size=4)
    assert m.score(prompts, responses).tolist() == want and CALLS == [(4, 4), (4, 4), (2, 2)]
    assert m.last_run.n_batches == 3
    per_pair = FunctionRewardModel(length_reward, name="l")
    assert per_pair.score(prompts, responses).tolist() == want and per_pair.last_run.n_batches == 10
    assert FunctionRewardModel(length_rewards, name="l",
                               batched=True).score(prompts, responses).tolist() == want


def test_batched_function_returning_the_wrong_count_is_an_error() -> None:
    m = FunctionRewardModel(lambda ps, rs: [1.0], name="short", version="1", batched=True)
    with pytest.raises(RewardModelError, match=r"returned 1 scores for a batch of 2"):
        m.score(["a", "b"], ["x", "y"])
    with pytest.raises(RewardModelError, match="batch_size"):
        FunctionRewardModel(scorer, batched=True, batch_size=0)


def test_spec_function_kind_is_batched(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nsources: [{name: a, kind: humaneval}]\nreward:\n  models:\n"
                    f"    - {{name: f, kind: function, function: '{__name__}:scorer'}}\n"
                    f"    - {{name: g, kind: function, function: '{__name__}:scorer', "
                    "params: {batch_size: 3}}\n"
                    "    - {name: h, kind: function, "
                    "function: 'assay.reward.function:length_reward', "
                    "params: {batched: false}}\n"
                    "  data: {dataset: diagnostic_v3}\n")
    s = load_spec(spec)
    f, g, h = (m.build(s.paths) for m in s.reward.models)
    CALLS.clear()
    assert f.score(["p"] * 7, ["ab"] * 7).tolist() == [2.0] * 7 and CALLS == [(7, 7)]
    CALLS.clear()
    assert g.score(["p"] * 7, ["ab"] * 7).tolist() == [2.0] * 7 \
        and CALLS == [(3, 3), (3, 3), (1, 1)]
    assert h.score(["p"] * 2, ["ab", "c"]).tolist() == [2.0, 1.0]
