"""Builds a tiny causal LM offline for the hf backend tests: a random 2-layer Llama and a
hand-made WordLevel tokenizer with a chat template, saved to a directory (about 100 KB)."""

from __future__ import annotations

from pathlib import Path

WORDS = ("the a is what answer of to and in it you that was for on are with as his they be at one "
         "have this from or had by hot word but some we can out other were all there when up use "
         "your how said an each she which do their time if will way about many then them write "
         "would like so these her long make thing see him two has look more day could go come did "
         "number sound no most people my over know water than call first who may down side been "
         "now find 0 1 2 3 4 5 6 7 8 9 + = ? . ,").split()
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} "
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Punctuation()])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=SPECIALS[4:])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_lm(path: str | Path, *, seed: int = 0, layers: int = 2, hidden: int = 32) -> Path:
    """Save a random-init LlamaForCausalLM and the tokenizer to ``path``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    path = Path(path)
    tok = build_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # spread the logits so greedy argmax is never a near-tie
        model.lm_head.weight.normal_(0.0, 1.0)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id,
                                               eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
