"""Confidence intervals over tasks for a mean of per-task rates in [0, 1], and their quantiles.

The clustered Wilson score interval with a design-effect-adjusted n; vectorized for simulation.

Method (documented in docs/statistics.md): tasks are the independent units (Miller 2024,
arXiv:2411.00640). With T tasks, per-task rates ``x_i`` in [0, 1], mean ``m`` and sample
variance ``s2``, the dispersion ``phi = s2 / (m (1 - m))`` is the design effect per task
(Kish 1965): 1 when every task is all-or-nothing, ``1/k`` when k samples per task are
independent draws of one common rate. It is clamped to ``[floor, 1]`` (``floor`` = the mean of
``1/n_i``, the binomial minimum) and set to 1 (the worst case) when ``m`` is 0 or 1, where the
data say nothing about it. The Wilson (1927) score interval is then computed on the effective
sample size ``T / phi`` (Korn & Graubard 1998; Dean & Pagano 2015), with a Student t quantile
on ``2 (T - 1)`` degrees of freedom in place of the normal one: ``T - 1`` (Korn & Graubard)
over-covers at 10 tasks and the normal quantile under-covers; the choice is validated by the
simulation grid in tests/test_measure_coverage.py. The interval never has zero width and never
leaves [0, 1]; an all-pass sample of T tasks has a lower bound well below 1.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from assay.results import Interval

METHOD = "clustered Wilson score (design-effect n, t on 2(T-1) df)"


def t_quantile(level: float, n_tasks: np.ndarray | int) -> np.ndarray:
    """Two-sided Student t quantile on ``2 (T - 1)`` degrees of freedom."""
    df = 2.0 * (np.asarray(n_tasks, dtype=np.float64) - 1.0)
    return special.stdtrit(np.maximum(df, 1.0), 0.5 + level / 2.0)


def score_bounds(mean: np.ndarray, s2: np.ndarray, n_tasks: np.ndarray | int, floor: np.ndarray | float,
                 level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
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
    q = t_quantile(level, T)
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
    """The clustered Wilson interval for the mean of per-task values in [0, 1]; None below 2 tasks."""
    values = np.asarray(values, dtype=np.float64)
    T = len(values)
    if T < 2:
        return None
    lo, hi = score_bounds(np.array([values.mean()]), np.array([values.var(ddof=1)]), T, floor, level)
    return Interval(float(lo[0]), float(hi[0]), level, METHOD)


def design_effect(values: np.ndarray, floor: float) -> float:
    """The dispersion ``phi`` used by :func:`task_interval` (1 = tasks are all-or-nothing)."""
    m = float(np.mean(values))
    pq = m * (1 - m)
    if len(values) < 2 or pq <= 0:
        return 1.0
    return float(np.clip(np.var(values, ddof=1) / pq, floor, 1.0))
