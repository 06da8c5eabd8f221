"""Statistics of the reward audit: seed-cluster pair accuracy, length bias, 2x2 contrasts, cycles.

Every interval counts independent seeds, not rows; each function names its method and source.
The interval arithmetic itself (Wilson, t, Fisher z) is in :mod:`assay.intervals`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from assay.errors import MeasureError
from assay.intervals import (
    cluster_t_interval,
    fisher_z_interval,
    normal_quantile,
    t_quantile,
    wilson,
)
from assay.results import Estimate, Interval

ACCURACY_METHOD = "Wilson, seed-cluster design effect (Korn-Graubard 1998)"
SPEARMAN_METHOD = "Spearman on seed means, Fisher z, SE sqrt(1.06/(k-3)) (Fieller et al. 1957)"
MEAN_METHOD = "seed-cluster t"


def _clusters(clusters: Sequence[str] | np.ndarray) -> tuple[np.ndarray, int]:
    _, codes = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    return codes, int(codes.max()) + 1 if len(codes) else 0


def cluster_proportion(outcomes: Sequence[float] | np.ndarray, clusters: Sequence[str] | np.ndarray,
                       weights: Sequence[float] | np.ndarray | None = None, *,
                       name: str = "accuracy", level: float = 0.95) -> Estimate:
    """A proportion over clustered outcomes (pairs grouped by seed) with an honest interval.

    Outcomes are in [0, 1] (a tie counts 0.5); ``weights`` are item weights (duplicate counts
    from ``collapse_duplicates``). The estimate is the weighted mean. Its interval is the Wilson
    score interval evaluated at an effective sample size, as Korn & Graubard (1998, Survey
    Methodology 24:193) do for Clopper-Pearson: ``n_eff = p(1-p) / v`` with ``v`` the
    cluster-robust (linearization) variance of the ratio mean over seeds, capped at the number
    of items, and scaled by ``(z / t_{k-1})^2`` so few seeds widen the interval. With one item
    per seed this is the Wilson interval at ``n (k-1)/k`` times that factor. When every outcome
    is equal ``v`` is 0, and ``n_eff`` falls back to the number of seeds (an all-correct result
    never claims certainty). ``n`` of the estimate is the number of seeds.

    Example:
        >>> e = cluster_proportion([1, 1, 0, 1], ["a", "a", "b", "c"])
        >>> e.n, e.n_rows, round(e.value, 2)
        (3, 4, 0.75)
    """
    y = np.asarray(outcomes, dtype=np.float64)
    if y.ndim != 1 or y.shape[0] != len(clusters):
        raise MeasureError(f"{name}: {len(y)} outcomes but {len(clusters)} cluster ids")
    if np.any(~np.isfinite(y)) or np.any((y < 0) | (y > 1)):
        raise MeasureError(f"{name}: outcomes must be finite numbers in [0, 1]")
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != y.shape or np.any(~np.isfinite(w)) or np.any(w <= 0):
        raise MeasureError(f"{name}: weights must be positive finite numbers, one per outcome")
    n = len(y)
    if n == 0:
        return Estimate(name, math.nan, None, 0, "seeds", 0, "no items")
    codes, k = _clusters(clusters)
    W = float(w.sum())
    p = float((w * y).sum() / W)
    Yc = np.bincount(codes, weights=w * y, minlength=k)
    Wc = np.bincount(codes, weights=w, minlength=k)
    note = None
    if k < 2:
        return Estimate(name, p, Interval(0.0, 1.0, level, ACCURACY_METHOD), k, "seeds", n,
                        "one seed: no interval")
    v = k / (k - 1) * float(((Yc - p * Wc) ** 2).sum()) / (W * W)
    n_items = float(W) if weights is not None else float(n)
    if v <= 0 or p in (0.0, 1.0):
        n_eff = float(min(k, n_items))
        if v <= 0:
            note = "no variation: effective n = seeds"
    else:
        n_eff = min(p * (1 - p) / v, n_items)
    n_eff *= (normal_quantile(level) / t_quantile(level, k - 1)) ** 2
    lo, hi = wilson(p * n_eff, n_eff, level)
    return Estimate(name, p, Interval(lo, hi, level, ACCURACY_METHOD), k, "seeds", n, note)


def seed_means(values: np.ndarray, clusters: Sequence[str] | np.ndarray,
               weights: np.ndarray | None = None) -> np.ndarray:
    """Weighted mean of ``values`` (rows x columns or a vector) per cluster, clusters in sorted
    order of their ids."""
    codes, k = _clusters(clusters)
    v = np.asarray(values, dtype=np.float64)
    w = np.ones(len(codes)) if weights is None else np.asarray(weights, dtype=np.float64)
    wc = np.bincount(codes, weights=w, minlength=k)
    if v.ndim == 1:
        return np.bincount(codes, weights=w * v, minlength=k) / wc
    return np.column_stack([np.bincount(codes, weights=w * v[:, j], minlength=k) / wc
                            for j in range(v.shape[1])])


def spearman_interval(x: np.ndarray, y: np.ndarray, level: float = 0.95
                      ) -> tuple[float, float, float]:
    """Spearman's rho with the Fisher-z interval of Fieller, Hartley & Pearson (1957), standard
    error ``sqrt(1.06 / (k - 3))`` (Bonett & Wright 2000 recommend it for rho). NaN when k < 5
    or either variable is constant.

    Example:
        >>> r, lo, hi = spearman_interval(np.arange(10.0), np.arange(10.0) ** 2)
        >>> round(r, 6), round(lo, 2) > 0.8
        (1.0, True)
    """
    k = len(x)
    if k < 5 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return (math.nan, math.nan, math.nan)
    # imported here: scipy.stats costs ~1 s to import, and the row measurements that import
    # this module (cluster means) do not need it; only the audit's length bias does
    from scipy import stats as sps

    rho = float(sps.spearmanr(x, y).statistic)
    return (rho, *fisher_z_interval(rho, k, level, variance=1.06))


def length_bias(score_diff: Sequence[float] | np.ndarray,
                length_diff: Sequence[float] | np.ndarray,
                clusters: Sequence[str] | np.ndarray,
                weights: Sequence[float] | np.ndarray | None = None, *,
                level: float = 0.95, name: str = "length bias") -> Estimate:
    """How much the score difference of a pair follows its length difference.

    Spearman correlation, over seeds, of the seed-mean score difference (chosen - rejected)
    with the seed-mean length difference (characters), with a Fisher-z interval (see
    :func:`spearman_interval`). Positive: the model's margin grows when the chosen answer is
    the longer one (it rewards length); an interval excluding 0 flags a bias. Rank-based, so
    the score scale and outliers do not matter. Unlike the length-only baseline it is blind to
    the label: a model that prefers chosen by a constant margin shows no length bias.

    Example:
        >>> e = length_bias([1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60], list("abcdef"))
        >>> e.value, e.n
        (1.0, 6)
    """
    ds = np.asarray(score_diff, dtype=np.float64)
    dl = np.asarray(length_diff, dtype=np.float64)
    if ds.shape != dl.shape or len(ds) != len(clusters):
        raise MeasureError(f"{name}: score and length differences and cluster ids differ in length")
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if len(ds) == 0:
        return Estimate(name, math.nan, None, 0, "seeds", 0, "no pairs")
    m = seed_means(np.column_stack([ds, dl]), clusters, w)
    k = m.shape[0]
    rho, lo, hi = spearman_interval(m[:, 0], m[:, 1], level)
    if math.isnan(rho):
        why = "fewer than 5 seeds" if k < 5 else (
            "length differences do not vary" if np.ptp(m[:, 1]) == 0 else "scores do not vary")
        return Estimate(name, math.nan, None, k, "seeds", len(ds), f"undefined: {why}")
    return Estimate(name, rho, Interval(lo, hi, level, SPEARMAN_METHOD), k, "seeds", len(ds))


def cluster_mean(values: Sequence[float] | np.ndarray, clusters: Sequence[str] | np.ndarray, *,
                 name: str = "mean", level: float = 0.95, unit: str = "seeds") -> Estimate:
    """Mean over seeds of the seed-mean value, with a Student t interval on the k seed means.

    Example:
        >>> e = cluster_mean([1.0, 3.0, 2.0, 2.0], ["a", "b", "c", "d"])
        >>> e.value, round(e.interval.low, 2)
        (2.0, 0.7)
    """
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return Estimate(name, math.nan, None, 0, unit, 0, "no items")
    m = seed_means(v, clusters)
    k = len(m)
    mean = float(m.mean())
    if k < 2:
        return Estimate(name, mean, None, k, unit, len(v), "one seed: no interval")
    return Estimate(name, mean, cluster_t_interval(m, level, method=MEAN_METHOD), k, unit, len(v))


def cyclic_triads(pref: np.ndarray) -> tuple[int, int]:
    """(cyclic, complete) triads of a majority-preference matrix: ``pref[i, j]`` is +1 when i
    beats j, -1 when j beats i, 0 for a tie or no comparison. A triad is complete when all
    three pairs have a strict majority; cyclic when those majorities form a cycle
    (Kendall & Babington Smith 1940).

    Example:
        >>> P = np.array([[0, 1, -1], [-1, 0, 1], [1, -1, 0]])
        >>> cyclic_triads(P)
        (1, 1)
    """
    k = pref.shape[0]
    cyc = complete = 0
    for a, b, c in itertools.combinations(range(k), 3):
        ab, bc, ca = pref[a, b], pref[b, c], pref[c, a]
        if ab and bc and ca:
            complete += 1
            if ab == bc == ca:
                cyc += 1
    return cyc, complete


def best_order_agreement(n_resp: int, edges: Sequence[tuple[int, int, float, float, float]]
                         ) -> float:
    """The highest comparison agreement any strict scalar ranking of ``n_resp`` responses can
    reach on ``edges`` (``(i, j, wins_i, wins_j, ties)``; a tie counts half): the ceiling a
    reward model faces when the observed preferences are cyclic. Exact search over orders
    (up to 8 responses); NaN above that.

    Example:
        >>> best_order_agreement(3, [(0, 1, 1, 0, 0), (1, 2, 1, 0, 0), (2, 0, 1, 0, 0)])
        0.6666666666666666
    """
    if n_resp > 8:
        return math.nan
    total = sum(wi + wj + t for _, _, wi, wj, t in edges)
    if total <= 0:
        return math.nan
    best = 0.0
    for order in itertools.permutations(range(n_resp)):
        rank = np.empty(n_resp, dtype=int)
        rank[list(order)] = np.arange(n_resp)
        got = sum((wi if rank[i] < rank[j] else wj) + 0.5 * t for i, j, wi, wj, t in edges)
        best = max(best, got)
    return best / total
