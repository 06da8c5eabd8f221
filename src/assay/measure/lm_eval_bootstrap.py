"""Bootstrap figures of an lm-eval corpus metric (f1, mcc, bleu...): lm-eval's own stderr
replayed on its draws, and assay's percentile interval over documents.

lm-eval's stderr for an aggregation it bootstraps is the sample standard deviation of the
aggregate over its first chunk of ``random.Random(0).choices`` resamples
(``lm_eval.api.metrics.bootstrap_stderr``); replaying those draws gives its figure exactly.
assay's own interval is the percentile bootstrap over documents (Efron & Tibshirani 1993, ch. 13).

Example:
    >>> from lm_eval.api.metrics import matthews_corrcoef
    >>> from assay.results import Interval
    >>> items = [(i % 2, int(i < 5)) for i in range(12)]
    >>> se, iv = corpus_bootstrap("matthews_corrcoef", matthews_corrcoef, items, 0.95, Interval)
    >>> se > 0 and iv.low <= matthews_corrcoef(items) <= iv.high
    True
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from assay.results import Interval

#: lm-eval's bootstrap draws assay reproduces for a corpus metric's stderr (f1, mcc, nanmean):
#: one of lm-eval's chunks, seeded 0 as lm-eval seeds its first, so the figure equals
#: ``simple_evaluate(bootstrap_iters=1000)``'s; lm-eval's default 100,000 draws take minutes
LM_EVAL_DRAWS = 1000

#: assay's own interval for a corpus metric: a percentile bootstrap over documents, fixed seed
DOC_BOOTSTRAP = 1000
DOC_BOOTSTRAP_METHOD = f"percentile bootstrap over documents ({DOC_BOOTSTRAP} resamples, seed 0)"
#: fewer where lm-eval's function runs once per resample (bleu: sacrebleu over the corpus)
SLOW_DOC_BOOTSTRAP = 200
SLOW_DOC_BOOTSTRAP_METHOD = (f"percentile bootstrap over documents ({SLOW_DOC_BOOTSTRAP} "
                             "resamples, seed 0)")


def corpus_bootstrap(agg: str, fn: Callable[[list[object]], float], items: list[object],
                     level: float, interval: type[Interval], *,
                     draws: int | None = LM_EVAL_DRAWS) -> tuple[float | None, Interval | None]:
    """A corpus metric's lm-eval stderr and assay's interval: ``fn`` over lm-eval's own first
    ``draws`` resamples (``random.Random(0).choices``, its first chunk's seed: their sample
    standard deviation is lm-eval's figure; ``draws`` None: no stderr) and over
    :data:`DOC_BOOTSTRAP` numpy resamples (:data:`SLOW_DOC_BOOTSTRAP` where ``fn`` is called
    per resample; seed 0; the percentile interval, None when a resample gives no finite
    value)."""
    from lm_eval.api.metrics import sample_stddev

    n = len(items)
    fast = agg in ("matthews_corrcoef", "f1")
    b = DOC_BOOTSTRAP if fast else SLOW_DOC_BOOTSTRAP
    doc_idx = np.random.default_rng(0).integers(0, n, size=(b, n))
    se = None if draws is None else \
        float(sample_stddev(list(_resampled(agg, fn, items, _lm_eval_draws(n, draws)))))
    stats = _resampled(agg, fn, items, doc_idx)
    if not np.all(np.isfinite(stats)):
        return se, None
    a = (1 - level) / 2
    lo, hi = np.quantile(stats, [a, 1 - a])
    method = DOC_BOOTSTRAP_METHOD if fast else SLOW_DOC_BOOTSTRAP_METHOD
    return se, interval(float(lo), float(hi), level, method)


@functools.lru_cache(maxsize=4)
def _lm_eval_draws(n: int, draws: int = LM_EVAL_DRAWS) -> np.ndarray:
    """lm-eval's first bootstrap chunk as document indices: ``random.Random(0).choices`` over
    ``n`` documents, ``draws`` times (the Python draws are most of the cost: made once for
    every corpus metric of a task)."""
    import random

    rnd = random.Random(0)
    idx = np.array([rnd.choices(range(n), k=n) for _ in range(draws)])
    idx.setflags(write=False)
    return idx


def _resampled(agg: str, fn: Callable[[list[object]], float], items: list[object],
               idx: np.ndarray) -> np.ndarray:
    """``fn`` (lm-eval's aggregation ``agg``) over each row of document indices ``idx``: mcc
    and a binary f1 from each resample's confusion counts, by sklearn's formulas (2,000
    sklearn calls took 4.8 s at cola's 1,043 documents); others call ``fn`` on each."""
    import warnings as _w

    pairs = np.asarray(items) if agg in ("matthews_corrcoef", "f1") else None
    binary = pairs is not None and pairs.ndim == 2 and set(np.unique(pairs)) <= {0, 1}
    if agg == "matthews_corrcoef" and pairs is not None and pairs.ndim == 2:
        labels, codes = np.unique(pairs, return_inverse=True)
        k = len(labels)
        cell = codes.reshape(pairs.shape) @ np.array([k, 1])  # gold * k + pred
        c = _confusions(cell, idx, k)
        t, p = c.sum(axis=2), c.sum(axis=1)
        s = p.sum(axis=1)
        cov_tp = np.trace(c, axis1=1, axis2=2) * s - (t * p).sum(axis=1)
        cov_pp_tt = (s ** 2 - (p * p).sum(axis=1)) * (s ** 2 - (t * t).sum(axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(cov_pp_tt == 0, 0.0, cov_tp / np.sqrt(cov_pp_tt))
    if agg == "f1" and binary:  # sklearn's binary f1 (pos_label 1), 0 where it is undefined
        assert pairs is not None
        c = _confusions(pairs @ np.array([2, 1]), idx, 2)
        tp, fp, fn_ = c[:, 1, 1], c[:, 0, 1], c[:, 1, 0]
        den = 2 * tp + fp + fn_
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den == 0, 0.0, 2 * tp / den)
    with _w.catch_warnings():  # sklearn warns on a resample with one class
        _w.simplefilter("ignore")
        return np.array([float(fn([items[i] for i in row])) for row in idx])


def _confusions(cell: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    """Each resample's k x k confusion counts (float64, as sklearn sums them) from each
    document's cell index ``gold * k + pred``."""
    b = idx.shape[0]
    flat = (cell[idx] + (np.arange(b) * k * k)[:, None]).ravel()
    return np.bincount(flat, minlength=b * k * k).reshape(b, k, k).astype(np.float64)
