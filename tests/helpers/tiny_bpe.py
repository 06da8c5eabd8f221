"""A tiny causal LM with a byte-level BPE tokenizer (GPT-2 style: a leading space is part of the
next word's token), trained offline on the MMLU-shaped fixture, for the log-likelihood tests:
unlike the WordLevel fixture it has the boundary-space subtleties lm-eval's tokenization handles."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def corpus() -> list[str]:
    out = []
    for f in sorted((ROOT / "configs" / "data" / "mmlu_tiny").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            out.append(r["question"] + " " + " ".join(r["choices"]) + " A B C D Answer:")
    return out


def build_tiny_bpe_lm(path: str | Path, *, seed: int = 0, max_positions: int = 512,
                      hidden: int = 32, layers: int = 2, vocab: int | None = None) -> Path:
    """Save a random GPT-2-style BPE tokenizer and a Llama to ``path``; ``vocab``: the model's
    output size when larger than the tokenizer's (padded, as many checkpoints are)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    config = LlamaConfig(vocab_size=max(vocab or 0, len(fast)), hidden_size=hidden,
                         intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=max_positions, bos_token_id=fast.bos_token_id,
                         eos_token_id=fast.eos_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # spread the logits so choices differ clearly
        model.lm_head.weight.normal_(0.0, 1.0)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path
