"""Every confidence interval assay reports, in one place: Wilson score, clustered Wilson over
tasks (also stratified over categories), Student t over cluster means, Fisher z for Spearman's
rho; each function cites its method.

measure, decontam, data and reward call these; none of them computes a quantile or a bound itself.
scipy loads on first use only (``scipy.special`` costs ~0.6 s to import), so modules that import
this one stay cheap to import.

Example:
    >>> lo, hi = wilson(3, 10)
    >>> round(lo, 4), round(hi, 4)
    (0.1078, 0.6032)
    >>> iv = cluster_t_interval(np.array([1.0, 3.0, 2.0, 2.0]), method="seed-cluster t")
    >>> round(iv.low, 2), round(iv.high, 2), iv.method
    (0.7, 3.3, 'seed-cluster t')
"""

from __future__ import annotations

import math

import numpy as np

from assay.errors import MeasureError
from assay.results import Interval

#: The clustered Wilson interval over tasks (:func:`task_interval`).
TASK_METHOD = "clustered Wilson score (design-effect n, t on 2(T-1) df)"
WILSON_METHOD = "wilson"
#: The equal-weight mean over categories of per-task values (:func:`stratified_interval`).
STRATIFIED_METHOD = ("stratified Wilson score over categories (equal weights, n_eff = m(1-m)/Var, "
                     "Var = sum of s_c^2/T_c over C^2, t on Welch-Satterthwaite df)")


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise MeasureError(f"level must be in (0, 1), got {level!r}")


def normal_quantile(level: float) -> float:
    """Two-sided standard normal quantile ``z`` with ``P(|Z| <= z) = level`` (scipy's ``ndtri``,
    the quantile statsmodels and scipy.stats use).

    Example:
        >>> round(normal_quantile(0.95), 4)
        1.96
    """
    from scipy.special import ndtri

    _check_level(level)
    return float(ndtri(0.5 + level / 2))


def t_quantile(level: float, df: float) -> float:
    """Two-sided Student t quantile on ``df`` degrees of freedom (scipy's ``stdtrit``).

    Example:
        >>> round(t_quantile(0.95, 9), 3)
        2.262
    """
    from scipy.special import stdtrit

    _check_level(level)
    return float(stdtrit(df, 0.5 + level / 2))


def wilson(successes: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson (1927) score interval for ``successes`` out of ``n``; both may be fractional (ties
    counting half, ``n`` an effective sample size). NaN bounds for ``n <= 0``. The bounds are
    exactly 0 (1) for an all-fail (all-pass) sample, and never leave [0, 1].

    Example:
        >>> lo, hi = wilson(10, 10)
        >>> round(lo, 3), hi
        (0.722, 1.0)
    """
    if n <= 0:
        return (math.nan, math.nan)
    return wilson_bounds(successes / n, n, level)


def wilson_bounds(p: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """:func:`wilson` from the observed proportion ``p`` (clipped to [0, 1]) and ``n > 0``.

    Example:
        >>> wilson_bounds(0.3, 10) == wilson(3, 10)
        True
    """
    z = normal_quantile(level)
    p = min(max(p, 0.0), 1.0)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if p == 0 else max(0.0, centre - half)  # exact at the edges, no rounding dust
    hi = 1.0 if p == 1 else min(1.0, centre + half)
    return (lo, hi)


def wilson_interval(k: float, n: float, level: float = 0.95,
                    method: str = WILSON_METHOD) -> Interval:
    """:func:`wilson` as an :class:`~assay.results.Interval` named ``method``.

    Example:
        >>> i = wilson_interval(3, 10)
        >>> round(i.low, 4), round(i.high, 4), i.method
        (0.1078, 0.6032, 'wilson')
    """
    lo, hi = wilson(k, n, level)
    return Interval(lo, hi, level, method)


def t_bounds(center: float, se: float, df: float, level: float = 0.95) -> tuple[float, float]:
    """``center -/+ t_{df} * se``: the Student (1908) t interval for a mean with standard error
    ``se`` (Gosset's small-sample quantile on ``df`` degrees of freedom).

    Example:
        >>> lo, hi = t_bounds(2.0, 0.5, 9)
        >>> round(lo, 3), round(hi, 3)
        (0.869, 3.131)
    """
    q = t_quantile(level, df)
    return (center - q * se, center + q * se)


def cluster_t_interval(cluster_means: np.ndarray, level: float = 0.95, *,
                       method: str = "cluster t") -> Interval | None:
    """Student t interval for the mean of ``k`` cluster means (df ``k - 1``, SE = their sample
    sd / sqrt(k)): the cluster is the independent unit (Cameron & Miller 2015, sec. VI, the
    few-cluster t with cluster-level averages). None below 2 clusters.

    Example:
        >>> iv = cluster_t_interval(np.array([0.5, 1.5]))
        >>> round(iv.low, 3), round(iv.high, 3)
        (-5.353, 7.353)
    """
    m = np.asarray(cluster_means, dtype=np.float64)
    k = m.size
    if k < 2:
        return None
    mean = float(m.mean())
    se = float(m.std(ddof=1)) / math.sqrt(k)
    lo, hi = t_bounds(mean, se, k - 1, level)
    return Interval(lo, hi, level, method)


def fisher_z_interval(r: float, k: int, level: float = 0.95, *,
                      variance: float = 1.06) -> tuple[float, float]:
    """Interval for a correlation ``r`` over ``k`` units by Fisher's z transform, standard error
    ``sqrt(variance / (k - 3))``: 1 for Pearson, 1.06 for Spearman (Fieller, Hartley & Pearson
    1957; recommended by Bonett & Wright 2000). ``r`` is clipped just inside (-1, 1).

    Example:
        >>> lo, hi = fisher_z_interval(0.5, 30)
        >>> round(lo, 3), round(hi, 3)
        (0.16, 0.734)
    """
    zc = math.atanh(min(max(r, -0.999999), 0.999999))
    half = normal_quantile(level) * math.sqrt(variance / (k - 3))
    return math.tanh(zc - half), math.tanh(zc + half)


# ---------------------------------------------------------------------------------------------
# clustered Wilson over tasks (the measure stage's interval for a mean of per-task rates)
#
# Method (documented in docs/statistics.md): tasks are the independent units (Miller 2024,
# arXiv:2411.00640). With T tasks, per-task rates ``x_i`` in [0, 1], mean ``m`` and sample
# variance ``s2``, the dispersion ``phi = s2 / (m (1 - m))`` is the design effect per task
# (Kish 1965): 1 when every task is all-or-nothing, ``1/k`` when k samples per task are
# independent draws of one common rate. It is clamped to ``[floor, 1]`` (``floor`` = the mean of
# ``1/n_i``, the binomial minimum) and set to 1 (the worst case) when ``m`` is 0 or 1, where the
# data say nothing about it. The Wilson (1927) score interval is then computed on the effective
# sample size ``T / phi`` (Korn & Graubard 1998; Dean & Pagano 2015), with a Student t quantile
# on ``2 (T - 1)`` degrees of freedom in place of the normal one: ``T - 1`` (Korn & Graubard)
# over-covers at 10 tasks and the normal quantile under-covers; the choice is validated by the
# simulation grid in tests/measure/test_coverage.py. The interval never has zero width and never
# leaves [0, 1]; an all-pass sample of T tasks has a lower bound well below 1.


def task_t_quantile(level: float, n_tasks: np.ndarray | int) -> np.ndarray:
    """Two-sided Student t quantile on ``2 (T - 1)`` degrees of freedom, vectorized over T."""
    from scipy.special import stdtrit

    df = 2.0 * (np.asarray(n_tasks, dtype=np.float64) - 1.0)
    return stdtrit(np.maximum(df, 1.0), 0.5 + level / 2.0)


def score_bounds(mean: np.ndarray, s2: np.ndarray, n_tasks: np.ndarray | int,
                 floor: np.ndarray | float, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized clustered Wilson bounds from each sample's mean, variance (ddof 1) and T.

    Example:
        >>> lo, hi = score_bounds(np.array([1.0]), np.array([0.0]), 10, 0.25)
        >>> bool(0.6 < lo[0] < 0.8), float(hi[0])
        (True, 1.0)
    """
    m = np.clip(np.asarray(mean, dtype=np.float64), 0.0, 1.0)
    s2 = np.asarray(s2, dtype=np.float64)
    T = np.asarray(n_tasks, dtype=np.float64)
    pq = m * (1.0 - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(pq > 0, s2 / pq, 1.0)
    phi = np.clip(phi, floor, 1.0)
    n_eff = T / phi
    q = task_t_quantile(level, T)
    q2n = q * q / n_eff
    center = (m + q2n / 2.0) / (1.0 + q2n)
    half = q * np.sqrt(pq / n_eff + q2n / (4.0 * n_eff)) / (1.0 + q2n)
    lo = np.clip(center - half, 0.0, 1.0)
    hi = np.clip(center + half, 0.0, 1.0)
    # Wilson's bounds touch 0 or 1 exactly only for an all-fail / all-pass sample, on that side.
    lo = np.where(m <= 0.0, 0.0, lo)
    hi = np.where(m >= 1.0, 1.0, hi)
    return lo, hi


def task_interval(values: np.ndarray, *, floor: float, level: float = 0.95) -> Interval | None:
    """The clustered Wilson interval for the mean of per-task values in [0, 1]; None below 2 tasks.

    Example:
        >>> iv = task_interval(np.array([1.0, 0.5, 0.0, 1.0]), floor=0.5)
        >>> round(iv.low, 3), round(iv.high, 3)
        (0.17, 0.931)
    """
    values = np.asarray(values, dtype=np.float64)
    T = len(values)
    if T < 2:
        return None
    lo, hi = score_bounds(np.array([values.mean()]), np.array([values.var(ddof=1)]), T, floor,
                          level)
    return Interval(float(lo[0]), float(hi[0]), level, TASK_METHOD)


def design_effect(values: np.ndarray, floor: float) -> float:
    """The dispersion ``phi`` used by :func:`task_interval` (1 = tasks are all-or-nothing).

    Example:
        >>> design_effect(np.array([1.0, 0.0, 1.0]), 0.5)
        1.0
    """
    m = float(np.mean(values))
    pq = m * (1 - m)
    if len(values) < 2 or pq <= 0:
        return 1.0
    return float(np.clip(np.var(values, ddof=1) / pq, floor, 1.0))


def stratified_interval(groups: list[np.ndarray], floors: list[float],
                        level: float = 0.95) -> tuple[float, Interval]:
    """The equal-weight mean over groups (categories) of each group's mean per-task value in
    [0, 1], with its interval: a Wilson score interval on ``n_eff = m (1 - m) / Var(m)``, where
    ``Var(m) = sum_c (s_c^2 / T_c) / C^2`` (groups are strata of independent tasks; a one-task
    group counts 0.25, the largest variance a rate has), capped at the Kish size
    ``C^2 / sum_c 1/T_c`` over the binomial ``floor`` (the mean of ``floors``) and equal to the
    Kish size when ``m`` is 0 or 1 (the all-or-nothing worst case, as in :func:`score_bounds`);
    a Student t quantile on Welch (1947)-Satterthwaite (1946) degrees of freedom replaces z.

    Example:
        >>> m, iv = stratified_interval([np.array([1.0, 0.0, 1.0, 1.0, 0.5]),
        ...                              np.array([0.25, 0.5, 0.0])], [0.25, 0.25])
        >>> round(m, 4), round(iv.low, 3), round(iv.high, 3)
        (0.475, 0.223, 0.74)
    """
    C = len(groups)
    if C == 0:
        raise MeasureError("stratified interval of no groups")
    T = np.array([len(x) for x in groups], dtype=np.float64)
    m = float(np.mean([float(np.mean(x)) for x in groups]))
    v = np.array([float(np.var(x, ddof=1)) / len(x) if len(x) > 1 else 0.25 for x in groups])
    var = float(v.sum() / C**2)
    kish = C**2 / float(np.sum(1.0 / T))
    floor = float(np.mean(floors)) if len(floors) else 1.0
    pq = m * (1.0 - m)
    n_eff = kish if pq <= 0 or var <= 0 else min(pq / var, kish / max(floor, 1e-12))
    terms = np.array([(v[i] / C**2) ** 2 / (T[i] - 1) for i in range(C) if T[i] > 1])
    df = var**2 / terms.sum() if var > 0 and terms.size and terms.sum() > 0 else 2.0 * (T.sum() - 1)
    q = t_quantile(level, max(df, 1.0))
    q2n = q * q / n_eff
    center = (m + q2n / 2.0) / (1.0 + q2n)
    half = q * math.sqrt(pq / n_eff + q2n / (4.0 * n_eff)) / (1.0 + q2n)
    lo = 0.0 if m <= 0.0 else max(0.0, center - half)
    hi = 1.0 if m >= 1.0 else min(1.0, center + half)
    return m, Interval(float(lo), float(hi), level, STRATIFIED_METHOD)
