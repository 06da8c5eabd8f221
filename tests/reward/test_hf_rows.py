"""A transformers reward model scoring a study's rows: chat prompts (system + user turns) go
through the model's chat template once, single-turn rows as (prompt, response); every score
equals a plain transformers forward of the rendered conversation; the model scores inside the
device slot; over-long conversations lose their oldest turns first.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import reward_fixtures

from assay import stages
from assay.errors import DataError
from assay.reward import HFRewardModel, RewardModelError
from assay.spec import load_spec
from assay.store import Store

tiny_rm_dir = reward_fixtures.tiny_rm_dir
tiny_rm = reward_fixtures.tiny_rm

CHATS = [
    ([{"role": "system", "content": "Answer briefly."},
      {"role": "user", "content": "What is the capital of France?"}], "Paris.", 1),
    ([{"role": "system", "content": "Answer briefly."},
      {"role": "user", "content": "What is the capital of France?"}], "The moon is rock.", 0),
    ([{"role": "user", "content": "How many cups are in a quart?"},
      {"role": "assistant", "content": "Four."},
      {"role": "user", "content": "And in a gallon?"}], "Sixteen cups.", 1),
    ("Write a poem.", "The sea and the sky at night.", 1),
    ("Write a poem.", "No.", 0),
]


def reference_score(rm: HFRewardModel, prompt, response: str) -> float:
    """Independent of the adapter: render the conversation with the template, tokenize without
    added specials (the template writes the BOS), one unpadded forward."""
    import torch

    conv = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    text = rm.tokenizer.apply_chat_template(conv + [{"role": "assistant", "content": response}],
                                            tokenize=False)
    ids = rm.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert ids[0, 0] == rm.tokenizer.bos_token_id != ids[0, 1]
    with torch.no_grad():
        return rm.model(input_ids=ids).logits[0, 0].item()


def test_chat_rows_scored_through_the_template_once(tmp_path: Path, tiny_rm_dir: Path,
                                                    tiny_rm) -> None:
    (tmp_path / "own.jsonl").write_text("".join(
        json.dumps({"prompt": p, "completion": c, "score": y}) + "\n" for p, c, y in CHATS))
    (tmp_path / "spec.yaml").write_text(f"""
name: chat-rows
sources:
  - {{name: own, kind: file, path: own.jsonl, fields: {{reward: score}}}}
reward:
  models:
    - {{name: tiny, kind: hf, path: {tiny_rm_dir}, params: {{device: cpu}}}}
  data: null
  score: {{sources: [own]}}
""")
    spec = load_spec(tmp_path / "spec.yaml")
    store = Store(tmp_path / "store")
    run = stages.run_study(spec, store, progress=None)
    rows = stages.concat_rows(store, run.graded["own"])
    got = [r["markers"]["rm:tiny"] for r in rows]
    want = [reference_score(tiny_rm, p, c) for p, c, _ in CHATS]
    assert got == pytest.approx(want, abs=1e-5)
    # the system prompt is read: the same last turn without it scores differently
    assert got[0] != pytest.approx(reference_score(tiny_rm, CHATS[0][0][1]["content"], "Paris."),
                                   abs=1e-6)

    seen = []

    @contextlib.contextmanager
    def slot(device: str):
        seen.append(device)
        yield

    from assay.stages.score_rows import clear_model_cache

    clear_model_cache()
    def call(fn, ctx, *args, **kwargs):  # what the Prefect task does: pass its gpu slot
        if fn is stages.run_score_rows:
            ctx = replace(ctx, device_slot=slot)
        return fn(ctx, *args, **kwargs)

    # `call` is the chain's hook (the graph holds its own slots): the chain shows the task's path
    again = stages.run_study(spec, Store(tmp_path / "s2"), call=call, progress=None,
                             mode="chain")
    (res,) = [r for r in again.results if r.stage == "score-rows"]
    assert seen == ["cpu"] and res.summary["scores"] == {"rm:tiny": "computed"}


def test_long_conversations_drop_oldest_turns_first(tiny_rm_dir: Path) -> None:
    rm = HFRewardModel(tiny_rm_dir, device="cpu", max_length=40)
    conv = [{"role": "system", "content": "Be brief."}]
    for i in range(6):
        conv += [{"role": "user", "content": f"question {i} about the sea"},
                 {"role": "assistant", "content": f"answer {i}"}]
    conv.append({"role": "user", "content": "last question?"})
    rm.score_conversations([conv], ["yes"])
    assert rm.last_run.truncated == 1
    ids, _, _ = rm.encode([tuple((m["role"], m["content"]) for m in conv)], ["yes"])
    text = rm.tokenizer.decode(ids[0])
    assert len(ids[0]) <= 40 and "Be brief." in text and "last question?" in text
    assert "question 0" not in text


def test_conversation_input_errors(tiny_rm) -> None:
    with pytest.raises(DataError, match=r"conversations\[0\]\[0\] must be a dict"):
        tiny_rm.score_conversations([["hi"]], ["a"])
    with pytest.raises(DataError, match="2 conversations for 1 responses"):
        tiny_rm.score_conversations([[{"role": "user", "content": "a"}]] * 2, ["a"])
    with pytest.raises(DataError, match=r"responses\[0\] is empty"):
        tiny_rm.score_conversations([[{"role": "user", "content": "a"}]], [" "])


def test_pair_mode_model_refuses_conversations(tmp_path: Path) -> None:
    path = reward_fixtures.build_tiny_reward_model(tmp_path / "m", chat_template=None)
    rm = HFRewardModel(path, device="cpu")
    with pytest.raises(RewardModelError, match="no chat template"):
        rm.score_conversations([[{"role": "user", "content": "a"}]], ["b"])
