"""A BERT encoder run by torch alone: transformers' BertModel forward over the safetensors weights.

Importing transformers costs 3.5-6 s of CPU on a 2-core box before a weight is read, twice what
importing torch does, and the bundled MiniLM's load sits on a study's critical path (row scoring
and semantic decontamination wait for it, and the import holds the GIL the generation client
needs). A BERT encoder is 30 lines of torch: this module runs exactly the operations of
transformers' ``BertModel`` on its ``sdpa`` path (embeddings word + token type, then position;
LayerNorm; per layer query/key/value projections, ``scaled_dot_product_attention`` with a
materialized boolean padding mask or none when nothing is padded, residual LayerNorms, exact GELU)
in the same order, so ``last_hidden_state`` comes out bit for bit the same
(tests/reward/test_bert.py compares them on the bundled model and on tiny random ones). The
tokenizer is ``tokenizer.json`` run by the ``tokenizers`` library, taken only when it agrees with
what transformers' BertTokenizer builds from the folder's ``tokenizer_config.json``.

Anything else (another architecture, relative positions, another activation, half-precision or
``.bin`` weights, a tokenizer with other options or extra tokens) is named by :func:`bert_reason`
and left to transformers.

Example:
    >>> from assay.reward.embedding import bundled_model_path
    >>> bert_reason(bundled_model_path()) is None
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

_WEIGHTS = "model.safetensors"
_ACTS = ("gelu",)  # transformers' ACT2FN["gelu"] is torch's exact (erf) GELU
_TOKENIZER_CLASSES = (None, "BertTokenizer", "BertTokenizerFast")
# Special tokens BertTokenizer takes from tokenizer_config.json, with its defaults.
_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
             "cls_token": "[CLS]", "mask_token": "[MASK]"}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _token(value: Any) -> Any:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    return value.get("content") if isinstance(value, dict) else value


def _tokenizer_reason(path: Path, tok_cfg: dict[str, Any]) -> str | None:
    """Why tokenizer.json would not tokenize as transformers' BertTokenizer does here."""
    tj = _json(path / "tokenizer.json")
    if not isinstance(tj, dict):
        return "no readable tokenizer.json"
    if tok_cfg.get("tokenizer_class") not in _TOKENIZER_CLASSES:
        return f"tokenizer_class {tok_cfg.get('tokenizer_class')!r}"
    if tok_cfg.get("padding_side", "right") != "right" or \
            tok_cfg.get("truncation_side", "right") != "right":
        return "padding or truncation on the left"
    specials = {k: _token(tok_cfg.get(k, v)) for k, v in _SPECIALS.items()}
    model = tj.get("model") or {}
    vocab = model.get("vocab")
    if model.get("type") != "WordPiece" or not isinstance(vocab, dict) or \
            model.get("continuing_subword_prefix", "##") != "##" or \
            model.get("max_input_chars_per_word", 100) != 100 or \
            model.get("unk_token") != specials["unk_token"]:
        return "tokenizer.json's model is not BERT's WordPiece"
    if any(not isinstance(t, str) or t not in vocab for t in specials.values()):
        return "a special token is missing from the vocabulary"
    norm = tj.get("normalizer") or {}
    want = {"type": "BertNormalizer", "clean_text": True,
            "handle_chinese_chars": tok_cfg.get("tokenize_chinese_chars", True),
            "strip_accents": tok_cfg.get("strip_accents"),
            "lowercase": tok_cfg.get("do_lower_case", True)}
    if any(norm.get(k) != v for k, v in want.items()):
        return "tokenizer.json's normalizer differs from tokenizer_config.json"
    if (tj.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
        return "tokenizer.json's pre-tokenizer is not BERT's"
    cls, sep = specials["cls_token"], specials["sep_token"]
    post = tj.get("post_processor") or {}
    single = [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": sep, "type_id": 0}}]
    ids = {k: v.get("ids") for k, v in (post.get("special_tokens") or {}).items()}
    if not (post.get("type") == "TemplateProcessing" and post.get("single") == single
            and ids.get(cls) == [vocab[cls]] and ids.get(sep) == [vocab[sep]]):
        return "tokenizer.json does not wrap a text in [CLS] ... [SEP] as BERT does"
    added = tj.get("added_tokens") or []
    if any(not a.get("special") or a.get("content") not in specials.values()
           or vocab.get(a.get("content")) != a.get("id") for a in added):
        return "tokenizer.json adds tokens beyond BERT's special ones"
    if tok_cfg.get("added_tokens_decoder") and any(
            _token(t) not in specials.values()
            for t in tok_cfg["added_tokens_decoder"].values()):
        return "tokenizer_config.json adds tokens beyond BERT's special ones"
    return None


def _weights_reason(path: Path, cfg: dict[str, Any]) -> str | None:
    """Why the weights file would not give transformers' fp32 BertModel (header only)."""
    if not (path / _WEIGHTS).is_file():
        return f"no {_WEIGHTS} (sharded or .bin weights)"
    try:
        from safetensors import safe_open

        with safe_open(str(path / _WEIGHTS), framework="pt") as f:
            meta = {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape())
                    for k in f.keys()}
    except Exception as e:  # a corrupt file: transformers will say what is wrong with it
        return f"{_WEIGHTS} unreadable ({type(e).__name__})"
    prefix = "" if "embeddings.word_embeddings.weight" in meta else "bert."
    for key, shape in _shapes(cfg).items():
        got = meta.get(prefix + key)
        if got is None:
            return f"{_WEIGHTS} lacks {key}"
        if got[0] != "F32" or list(got[1]) != list(shape):
            return f"{_WEIGHTS}: {key} is {got[0]} {list(got[1])}, not F32 {list(shape)}"
    return None


def _shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor BertModel's last_hidden_state reads, with its shape."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    out: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (cfg["vocab_size"], h),
        "embeddings.position_embeddings.weight": (cfg["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": (cfg.get("type_vocab_size", 2), h),
        "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,)}
    for n in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            out[p + name + ".weight"], out[p + name + ".bias"] = (h, h), (h,)
        out[p + "intermediate.dense.weight"], out[p + "intermediate.dense.bias"] = (i, h), (i,)
        out[p + "output.dense.weight"], out[p + "output.dense.bias"] = (h, i), (h,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            out[p + name + ".weight"], out[p + name + ".bias"] = (h,), (h,)
    return out


def bert_reason(path: str | Path) -> str | None:
    """Why the folder needs transformers, or None when :class:`BertEncoder` reproduces it.

    Taken: ``model_type: bert`` encoders (not decoders), absolute positions, exact GELU, fp32
    ``model.safetensors`` (keys bare or under ``bert.``), and a tokenizer.json that agrees
    with tokenizer_config.json (see :func:`_tokenizer_reason`).
    """
    path = Path(path)
    cfg = _json(path / "config.json")
    if not isinstance(cfg, dict):
        return "no readable config.json"
    if cfg.get("model_type") != "bert":
        return f"model_type {cfg.get('model_type')!r} (only bert runs without transformers)"
    odd = [k for k, ok in (
        ("is_decoder", not cfg.get("is_decoder")),
        ("add_cross_attention", not cfg.get("add_cross_attention")),
        ("position_embedding_type", cfg.get("position_embedding_type", "absolute") == "absolute"),
        ("hidden_act", cfg.get("hidden_act", "gelu") in _ACTS),
        ("chunk_size_feed_forward", not cfg.get("chunk_size_feed_forward")),
        ("dtype", (cfg.get("dtype") or cfg.get("torch_dtype") or "float32") == "float32"),
        ("sizes", all(isinstance(cfg.get(k), int) for k in (
            "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "vocab_size", "max_position_embeddings"))
            and cfg["hidden_size"] % cfg["num_attention_heads"] == 0),
    ) if not ok]
    if odd:
        return f"config.json: {', '.join(odd)}"
    tok_cfg = _json(path / "tokenizer_config.json") or {}
    return _tokenizer_reason(path, tok_cfg) or _weights_reason(path, cfg)


class BertEncoder:
    """Tokenizer and BertModel forward for a folder :func:`bert_reason` takes.

    ``features(texts)`` pads to the longest and cuts at ``max_seq_length`` (right side), as
    transformers' tokenizer does with ``padding=True, truncation="longest_first"``;
    ``token_lengths(texts)`` counts tokens with [CLS] and [SEP] before any cut;
    ``hidden(features)`` is ``BertModel(**features).last_hidden_state``.
    """

    def __init__(self, path: str | Path, device: str = "cpu",
                 max_seq_length: int | None = None) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        self.path = Path(path)
        self.device = device
        cfg = _json(self.path / "config.json")
        tok_cfg = _json(self.path / "tokenizer_config.json") or {}
        self.hidden_size = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        # As transformers and sentence-transformers: the folder's limit (or the tokenizer's),
        # never past the position table.
        limit = max_seq_length if max_seq_length is not None else tok_cfg.get("model_max_length")
        pos = int(cfg["max_position_embeddings"])
        self.max_seq_length = min(int(limit), pos) if isinstance(limit, (int, float)) else pos

        raw = load_file(str(self.path / _WEIGHTS))
        prefix = "" if "embeddings.word_embeddings.weight" in raw else "bert."
        self.w = {k: raw[prefix + k].to(device) for k in _shapes(cfg)}
        self.positions = torch.arange(pos, device=device).unsqueeze(0)

        # Two tokenizers, not one reconfigured per call: scoring threads may share the encoder.
        # tokenizer.json's own truncation and padding (often a fixed 128) are replaced, as
        # transformers replaces them with the call's.
        self.counter = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self.counter.no_truncation()
        self.counter.no_padding()
        pad = _token(tok_cfg.get("pad_token", _SPECIALS["pad_token"]))
        self.batcher = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self.batcher.enable_truncation(self.max_seq_length, strategy="longest_first")
        self.batcher.enable_padding(direction="right", pad_id=self.counter.token_to_id(pad),
                                    pad_type_id=0, pad_token=pad)

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        enc = self.counter.encode_batch(list(texts))
        return np.array([len(e.ids) for e in enc], dtype=np.int64)

    def features(self, texts: Sequence[str]) -> dict[str, Tensor]:
        import torch

        enc = self.batcher.encode_batch(list(texts))
        return {name: torch.tensor([getattr(e, attr) for e in enc], dtype=torch.long,
                                   device=self.device)
                for name, attr in (("input_ids", "ids"), ("token_type_ids", "type_ids"),
                                   ("attention_mask", "attention_mask"))}

    def hidden(self, features: Mapping[str, Tensor]) -> Tensor:
        """last_hidden_state, the operations of transformers' BertModel (sdpa) in its order."""
        import torch
        import torch.nn.functional as F

        w, h = self.w, self.hidden_size
        ids, mask = features["input_ids"], features["attention_mask"]
        types = features.get("token_type_ids")
        b, n = ids.shape
        if types is None:
            types = torch.zeros_like(ids)

        def linear(x: Tensor, name: str) -> Tensor:
            return F.linear(x, w[name + ".weight"], w[name + ".bias"])

        def norm(x: Tensor, name: str) -> Tensor:
            return F.layer_norm(x, (h,), w[name + ".weight"], w[name + ".bias"], self.eps)

        x = (F.embedding(ids, w["embeddings.word_embeddings.weight"])
             + F.embedding(types, w["embeddings.token_type_embeddings.weight"]))
        x = x + F.embedding(self.positions[:, :n], w["embeddings.position_embeddings.weight"])
        x = norm(x, "embeddings.LayerNorm")
        # transformers skips the mask when nothing is padded (a faster kernel, same numbers
        # only if we skip it too); otherwise a [b, 1, n, n] boolean mask, True = attend.
        attend = None if bool(mask.all()) else (
            (torch.arange(n, device=ids.device)[None, None, :, None] >= 0)
            & mask.bool()[:, None, None, :])
        d = h // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (linear(x, p + "attention.self." + s).view(b, n, -1, d).transpose(1, 2)
                       for s in ("query", "key", "value"))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, dropout_p=0.0,
                                               scale=d ** -0.5, is_causal=False)
            a = a.reshape(a.shape[0], -1, n, d).transpose(1, 2).contiguous()
            a = a.reshape(b, n, -1).contiguous()
            x = norm(linear(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            m = F.gelu(linear(x, p + "intermediate.dense"))
            x = norm(linear(m, p + "output.dense") + x, p + "output.LayerNorm")
        return x
