"""Word perplexity, byte perplexity and bits per byte over documents, with intervals over
documents, from rows scored by the score-documents stage (markers loglik, words, bytes).

Each is lm-eval's aggregate: a ratio of sums over documents, ``R = sum(-loglik) / sum(units)``
(units: words or UTF-8 bytes), then ``exp(R)`` for a perplexity and ``R / ln 2`` for bits per
byte. The interval is the ratio estimator's delta-method (linearization) interval over documents
(Cochran 1977, *Sampling Techniques*, 6.4): ``se(R)^2 = sum(d_i^2) / (n (n - 1))`` with
``d_i = (a_i - R b_i) / mean(b)``, ``R +- t(n-1) se``, mapped through the monotone transform.
Documents are the independent units; its coverage is checked by simulation in the tests.

Example:
    >>> rows = [{"task_id": str(i), "markers": {"loglik": -2.0 * w, "words": w, "bytes": 5 * w}}
    ...         for i, w in enumerate([3.0, 5.0, 8.0])]
    >>> p = perplexity(rows)
    >>> round(p.word_perplexity.value, 4), round(p.bits_per_byte.value, 4)
    (7.3891, 0.5771)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from assay.errors import MeasureError
from assay.results import Estimate, Interval, Result

if TYPE_CHECKING:
    from assay.rows import RowsLike

METHOD = "delta-method ratio over documents (Cochran 6.4), t on n-1 df"


@dataclass(frozen=True)
class Perplexity(Result):
    """word_perplexity, byte_perplexity and bits_per_byte over documents."""

    word_perplexity: Estimate
    byte_perplexity: Estimate
    bits_per_byte: Estimate
    n_documents: int
    tokens: int
    words: int
    bytes: int
    warnings: tuple[str, ...] = ()

    _headline_field = "word_perplexity"

    def __str__(self) -> str:
        return f"{self.word_perplexity} | {self.byte_perplexity} | {self.bits_per_byte}"

    def report(self) -> str:
        lines = [self._line(), f"{self.n_documents} documents: {self.tokens} tokens, {self.words} "
                 f"words, {self.bytes} bytes; intervals: {METHOD}"]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def ratio_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95
                   ) -> tuple[float, tuple[float, float] | None]:
    """``sum(a) / sum(b)`` and its delta-method interval over the units (module docstring);
    None below 2 units.

    Example:
        >>> r, (lo, hi) = ratio_interval(np.array([2.0, 4.0, 9.0]), np.array([1.0, 2.0, 3.0]))
        >>> round(r, 3), lo < r < hi
        (2.5, True)
    """
    n = len(a)
    r = float(a.sum() / b.sum())
    if n < 2:
        return r, None
    d = (a - r * b) / b.mean()
    se = math.sqrt(float((d ** 2).sum()) / (n * (n - 1)))
    t = float(stats.t.ppf(0.5 + level / 2, n - 1))
    return r, (r - t * se, r + t * se)


def perplexity(rows: RowsLike, *, level: float = 0.95) -> Perplexity:
    """Word and byte perplexity and bits per byte over the rows' documents (module docstring)."""
    from assay.rows import as_table

    table = as_table(rows, require=("markers",))
    if table.num_rows == 0:
        raise MeasureError("perplexity: no rows")
    got: dict[str, list[float]] = {"loglik": [], "words": [], "bytes": [], "tokens": []}
    for i, mk in enumerate(table.column("markers").to_pylist()):
        m = dict(mk or [])
        for k in ("loglik", "words", "bytes"):
            if m.get(k) is None:
                raise MeasureError(f"perplexity: row {i} has no {k!r} marker; these are not rows "
                                   "scored by a perplexity: source")
            got[k].append(m[k])
        got["tokens"].append(m.get("tokens", 0.0))
    nll = -np.asarray(got["loglik"])
    words, nbytes = np.asarray(got["words"]), np.asarray(got["bytes"])
    n = len(nll)

    def est(name: str, units: np.ndarray, f: Callable[[float], float]) -> Estimate:
        r, iv = ratio_interval(nll, units, level)
        ci = None if iv is None else Interval(f(iv[0]), f(iv[1]), level, METHOD)
        return Estimate(name, f(r), ci, n, unit="documents")

    warnings = (f"only {n} documents: intervals are wide",) if n < 10 else ()
    return Perplexity(est("word_perplexity", words, math.exp),
                      est("byte_perplexity", nbytes, math.exp),
                      est("bits_per_byte", nbytes, lambda x: x / math.log(2)), n,
                      int(sum(got["tokens"])), int(words.sum()), int(nbytes.sum()), warnings)
