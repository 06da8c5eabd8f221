"""SentenceEncoder: a sentence-transformers model directory run without sentence-transformers.

Importing sentence-transformers costs 1.5-5 s of CPU before any weight is read (it pulls in
scikit-learn and its training stack), and on a CPU-only box that load sits on a study's critical
path. The common layout of such a directory (``modules.json``: Transformer -> Pooling ->
optional Normalize, plain text, no prompts) is three small steps over an encoder, so
:func:`load_encoder` runs those directly and gives the same bytes as sentence-transformers (the
tests compare them); any other layout (Dense layers, routers, prompts, lower-casing, other
pooling modes) is loaded by sentence-transformers itself, behind the same interface. The encoder
under the direct path is a plain BERT run by torch alone when :func:`assay.reward.bert.bert_reason`
allows (the bundled MiniLM: transformers' import skipped too), else transformers' AutoModel.

Example:
    >>> from assay.reward.embedding import bundled_model_path
    >>> direct_reason(bundled_model_path()) is None    # the bundled MiniLM takes the direct path
    True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from assay.reward.base import RewardModelError
from assay.reward.bert import BertEncoder, bert_reason

if TYPE_CHECKING:
    from torch import Tensor

# Module type names as sentence-transformers 2-5 and 6 write them in modules.json.
_TRANSFORMER = {"sentence_transformers.models.Transformer",
                "sentence_transformers.base.modules.transformer.Transformer"}
_POOLING = {"sentence_transformers.models.Pooling",
            "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}
_NORMALIZE = {"sentence_transformers.models.Normalize",
              "sentence_transformers.base.modules.normalize.Normalize"}
_MODES = ("cls", "mean", "max")
# Legacy pooling-config keys and the mode each turns on.
_POOL_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
              "pooling_mode_max_tokens": "max"}
_POOL_INERT = {"pooling_mode", "word_embedding_dimension", "embedding_dimension", "include_prompt"}
# Transformer options (sentence_bert_config.json) the direct path reproduces, with the only value
# it takes for each (None: any value); anything else is left to sentence-transformers.
_TEXT_FORWARD = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}
_ST_OPTIONS: dict[str, object] = {"max_seq_length": None, "do_lower_case": False,
                               "transformer_task": "feature-extraction",
                               "modality_config": _TEXT_FORWARD,
                               "module_output_name": "token_embeddings"}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RewardModelError(f"{path}: not readable as JSON ({e})") from None


def _pooling_mode(cfg: dict[str, Any]) -> str | None:
    """The one pooling mode a Pooling config asks for (either format), or None."""
    if "pooling_mode" in cfg:  # sentence-transformers 6: a name or a list of names
        mode = cfg["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:  # earlier: one boolean per mode
        modes = [m for k, m in _POOL_KEYS.items() if cfg.get(k)]
    # anything else must be a size, the prompt flag, or another mode's flag left off
    extra = [k for k, v in cfg.items() if k not in _POOL_INERT and k not in _POOL_KEYS
             and not (k.startswith("pooling_mode_") and not v)]
    if len(modes) != 1 or modes[0] not in _MODES or extra:
        return None
    return str(modes[0])


def direct_reason(path: str | Path) -> str | None:
    """Why ``path`` needs sentence-transformers itself, or None when the direct path reproduces it.

    The direct path takes: modules Transformer (at the directory's root, plain text forward) ->
    Pooling (exactly one of cls, mean, max) -> optional Normalize; no lower-casing, no prompts.
    """
    path = Path(path)
    if not (path / "modules.json").is_file():
        return "no modules.json (not a sentence-transformers directory)"
    mods = _read_json(path / "modules.json")
    types = [m.get("type") for m in mods] if isinstance(mods, list) else []
    if not (len(types) in (2, 3) and types[0] in _TRANSFORMER and types[1] in _POOLING
            and (len(types) == 2 or types[2] in _NORMALIZE)):
        return f"modules {types} (only Transformer -> Pooling [-> Normalize] is direct)"
    if mods[0].get("path", "") != "":
        return "the Transformer module is not at the directory's root"
    if (path / "sentence_bert_config.json").is_file():
        cfg = _read_json(path / "sentence_bert_config.json")
        odd = sorted(k for k, v in cfg.items()
                     if k not in _ST_OPTIONS or _ST_OPTIONS[k] not in (None, v))
        if odd:
            return f"Transformer options {odd}"
    if (path / "config_sentence_transformers.json").is_file():
        cfg = _read_json(path / "config_sentence_transformers.json")
        if any(cfg.get("prompts", {}).values()) or cfg.get("default_prompt_name") or \
                cfg.get("similarity_fn_name") not in (None, "cosine"):
            return "prompts or a non-cosine similarity in config_sentence_transformers.json"
    pool = _read_json(path / mods[1].get("path", "") / "config.json")
    if _pooling_mode(pool) is None or pool.get("include_prompt") is False:
        return f"pooling {pool} (only one of cls, mean, max is direct)"
    return None


def _hf_lengths(tokenizer: Callable[..., Mapping[str, Sequence[Sized]]], texts: Sequence[str]
                ) -> np.ndarray:
    """Token counts with special tokens, before truncation, from a transformers tokenizer."""
    # verbose=False: over-long texts are expected here (they are counted, not warned about)
    enc = tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)
    return np.array([len(x) for x in enc["input_ids"]], dtype=np.int64)


class SentenceEncoder:
    """Transformer -> Pooling -> [Normalize] over a BERT run by torch (``backend == "torch"``)
    or a transformers AutoModel (``"transformers"``, with the reason in ``backend_reason``).

    ``features(texts)`` tokenizes as sentence-transformers does (pad to the longest, truncate at
    ``max_seq_length``); ``forward(features)`` returns the sentence embeddings as a torch tensor;
    ``encode(texts)`` is sentence-transformers' ``encode(..., normalize_embeddings=True)``.
    """

    def __init__(self, path: str | Path, device: str = "cpu", *, torch_bert: bool = True) -> None:
        self.path = Path(path)
        self.device = device
        mods = _read_json(self.path / "modules.json")
        pool = _read_json(self.path / mods[1].get("path", "") / "config.json")
        self.pooling = _pooling_mode(pool)
        self.normalize = len(mods) == 3
        st_cfg = (_read_json(self.path / "sentence_bert_config.json")
                  if (self.path / "sentence_bert_config.json").is_file() else {})
        limit = st_cfg.get("max_seq_length")
        # A plain BERT (the bundled MiniLM) runs in torch alone, without transformers' seconds
        # of import; why another folder does not is kept in `backend_reason`.
        self.backend_reason = (bert_reason(self.path) if torch_bert
                               else "backend='transformers' asked for")
        if self.backend_reason is None:
            self.backend = "torch"
            self.bert = BertEncoder(self.path, device, limit)
            self.max_seq_length = self.bert.max_seq_length
            hidden = self.bert.hidden_size
        else:
            self.backend = "transformers"
            hidden = self._load_transformers(limit)
        self.dim = int(pool.get("embedding_dimension") or pool.get("word_embedding_dimension")
                       or hidden)

    def _load_transformers(self, limit: int | None) -> int:
        from transformers import AutoModel, AutoTokenizer

        from assay.reward.runtime import quiet_loading

        quiet_loading()
        kw: dict[str, object] = {"local_files_only": True}
        if limit is not None:
            kw["model_max_length"] = int(limit)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), **kw)
        self.model = AutoModel.from_pretrained(str(self.path), local_files_only=True)
        self.model.to(self.device)
        self.model.eval()
        # As sentence-transformers does: the tokenizer's limit never exceeds the position table.
        max_pos = getattr(self.model.config, "max_position_embeddings", None)
        if max_pos is not None:
            self.tokenizer.model_max_length = min(self.tokenizer.model_max_length, max_pos)
        self.max_seq_length = int(self.tokenizer.model_max_length)
        return int(self.model.config.hidden_size)

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Token count of each text with special tokens, before truncation."""
        if self.backend == "torch":
            return self.bert.token_lengths(texts)
        return _hf_lengths(self.tokenizer, texts)

    def features(self, texts: Sequence[str]) -> dict[str, Tensor]:
        if self.backend == "torch":
            return self.bert.features(texts)
        enc = self.tokenizer(list(texts), padding=True, truncation="longest_first",
                             return_tensors="pt")
        return {k: v.to(self.device) for k, v in enc.items()}

    def forward(self, features: Mapping[str, Tensor]) -> Tensor:
        import torch
        import torch.nn.functional as F

        with torch.inference_mode():
            tokens = (self.bert.hidden(features) if self.backend == "torch" else
                      self.model(**features, return_dict=True).last_hidden_state)
            mask = features["attention_mask"]
            # The same operations, in the same order and dtypes, as sentence-transformers'
            # Pooling, so the floats come out bit for bit the same.
            if self.pooling == "mean":
                acc = torch.float32 if tokens.dtype in (torch.float16, torch.bfloat16) \
                    else tokens.dtype
                m = mask.unsqueeze(-1).to(tokens.dtype)
                total = (tokens * m).sum(dim=1, dtype=acc)
                emb = (total / torch.clamp(m.sum(dim=1, dtype=acc), min=1e-9)).to(tokens.dtype)
            elif self.pooling == "cls":
                first = mask.to(torch.int).argmax(dim=1)
                idx = first.unsqueeze(-1).unsqueeze(1).expand(-1, 1, tokens.shape[-1])
                emb = torch.gather(tokens, 1, idx).squeeze(1)
            else:  # max
                m = mask.unsqueeze(-1).expand_as(tokens).to(tokens.dtype)
                emb = tokens.masked_fill(m == 0, float("-inf")).max(dim=1).values
            return F.normalize(emb, p=2, dim=-1) if self.normalize else emb

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Unit-norm float32 embeddings, batched longest-first as sentence-transformers does."""
        import torch.nn.functional as F

        texts = list(texts)
        order = np.argsort([-len(t) for t in texts])
        out: list[Tensor] = []
        for a in range(0, len(texts), batch_size):
            emb = self.forward(self.features([texts[i] for i in order[a:a + batch_size]]))
            out.extend(F.normalize(emb, p=2, dim=1).cpu())
        back = [out[i] for i in np.argsort(order)]
        if not back:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([t.float().numpy() for t in back])


class STEncoder:
    """The same interface over sentence-transformers, for layouts the direct path does not take."""

    def __init__(self, path: str | Path, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        self.path = Path(path)
        self.device = device
        self.st = SentenceTransformer(str(self.path), device=device, local_files_only=True)
        self.st.eval()
        self.tokenizer = self.st.tokenizer
        self.max_seq_length = int(self.st.max_seq_length or 512)
        dim = (self.st.get_embedding_dimension() if hasattr(self.st, "get_embedding_dimension")
               else self.st.get_sentence_embedding_dimension())
        if dim is None:
            raise RewardModelError(f"{self.path}: the model does not declare its embedding size")
        self.dim = int(dim)

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        return _hf_lengths(self.tokenizer, texts)

    def features(self, texts: Sequence[str]) -> dict[str, Any]:
        import torch

        feats = self.st.preprocess(list(texts))
        return {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in feats.items()}

    def forward(self, features: dict[str, Any]) -> Tensor:
        import torch

        with torch.inference_mode():
            return self.st(features)["sentence_embedding"]

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return np.asarray(self.st.encode(list(texts), batch_size=batch_size,
                                         normalize_embeddings=True, convert_to_numpy=True,
                                         show_progress_bar=False), dtype=np.float32)


BACKENDS = ("auto", "transformers", "sentence-transformers")


def load_encoder(path: str | Path, device: str = "cpu",
                 backend: str = "auto") -> SentenceEncoder | STEncoder:
    """The encoder for a sentence-transformers directory: direct when its layout allows
    (``backend="auto"``: its BERT run by torch alone when :func:`assay.reward.bert.bert_reason`
    allows, else transformers' AutoModel), ``"transformers"`` for the direct layout always over
    AutoModel, or ``"sentence-transformers"`` to force the library. All three give the same
    bytes where they apply (tested).

    Example:
        >>> from assay.reward.embedding import bundled_model_path
        >>> enc = load_encoder(bundled_model_path())
        >>> type(enc).__name__, enc.backend, enc.encode(["Hi", "Hello there"]).shape
        ('SentenceEncoder', 'torch', (2, 384))
    """
    from assay.reward.runtime import quiet_loading

    if backend not in BACKENDS:
        raise RewardModelError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if backend != "sentence-transformers" and direct_reason(path) is None:
        return SentenceEncoder(path, device, torch_bert=backend == "auto")
    quiet_loading()
    return STEncoder(path, device)
