"""Builds a tiny local transformers reward model for the reward tests (no download).

A 2-layer LLaMA-style sequence classifier with random weights, a BPE tokenizer trained here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SENTENCES = [
    "What is the capital of France? Paris is the capital of France.",
    "How many cups are in a quart? Four cups make one quart.",
    "The quick brown fox jumps over the lazy dog.",
    "Please explain photosynthesis in simple words for a child.",
    "Plants turn sunlight, water and air into sugar and oxygen.",
    "I think the moon is made of cheese, right? No, the moon is rock.",
    "Write a short poem about the sea and the sky at night.",
    "Sorry, I cannot help with that request because it is unsafe.",
    "The answer is 42, and here is a long explanation of why it is so.",
]

# One BOS at the start (from the template, not the tokenizer), a role tag per turn, EOS after each.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}"
    "{% endfor %}"
)


def build_tokenizer(chat_template: str | None = CHAT_TEMPLATE):
    """A fast BPE tokenizer trained on SENTENCES whose post-processor adds BOS (like LLaMA's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        unk_token="<unk>", additional_special_tokens=["<|user|>", "<|assistant|>"],
        model_max_length=512,
    )
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


def build_tiny_reward_model(path: str | Path, *, pad_token: bool = True, seed: int = 0,
                            chat_template: str | None = CHAT_TEMPLATE,
                            max_positions: int = 128) -> Path:
    """Save a random-init 2-layer LlamaForSequenceClassification (num_labels=1) + tokenizer.

    ``pad_token=False`` leaves ``config.pad_token_id`` unset (as some reward models ship).
    """
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    path = Path(path)
    tokenizer = build_tokenizer(chat_template)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
        num_labels=1, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if pad_token else None,
    )
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification(config)
    with torch.no_grad():  # a visible head: random init at std 0.02 gives scores ~1e-3
        model.score.weight.normal_(0.0, 1.0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny reward model with a chat template and a pad token, built once per session."""
    return build_tiny_reward_model(tmp_path_factory.mktemp("tiny_rm"))


@pytest.fixture(scope="session")
def tiny_rm(tiny_rm_dir: Path):
    """The tiny model loaded through HFRewardModel on CPU (fp32)."""
    from assay.reward import HFRewardModel

    return HFRewardModel(tiny_rm_dir, device="cpu", batch_tokens=256)
