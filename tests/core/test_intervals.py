"""assay.intervals against independent references: statsmodels' Wilson, scipy's t and normal
quantiles, and a brute-force cluster t (loops over clusters, no numpy reductions)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from assay.data.interaction import _cluster_t
from assay.errors import MeasureError
from assay.intervals import (
    cluster_t_interval,
    fisher_z_interval,
    normal_quantile,
    t_bounds,
    t_quantile,
    wilson,
    wilson_bounds,
    wilson_interval,
)
from assay.reward.stats import cluster_mean


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
def test_wilson_matches_statsmodels_on_every_count(level):
    for n in range(1, 41):
        for k in range(n + 1):
            lo, hi = wilson(k, n, level)
            ref_lo, ref_hi = proportion_confint(k, n, alpha=1 - level, method="wilson")
            assert lo == pytest.approx(ref_lo, abs=1e-13) \
                and hi == pytest.approx(ref_hi, abs=1e-13), (k, n)
            iv = wilson_interval(k, n, level)
            assert (iv.low, iv.high, iv.level, iv.method) == (lo, hi, level, "wilson")
            assert wilson_bounds(k / n, n, level) == (lo, hi)
    # exact bounds at the edges, not rounding dust
    assert wilson(0, 7, level)[0] == 0.0 and wilson(7, 7, level)[1] == 1.0


def test_wilson_fractional_counts_match_statsmodels():
    # ties count half and n may be an effective sample size: statsmodels takes floats too
    for succ, n in [(2.5, 7.0), (10.25, 13.5), (0.5, 3.3)]:
        ref = proportion_confint(succ, n, alpha=0.05, method="wilson")
        assert wilson(succ, n) == pytest.approx(ref, abs=1e-13)
    assert all(math.isnan(b) for b in wilson(0, 0))


def test_quantiles_are_scipys():
    for level in (0.5, 0.9, 0.95, 0.99, 0.999):
        assert normal_quantile(level) == float(stats.norm.ppf(0.5 + level / 2))
        for df in (1, 2, 9, 30, 1000):
            assert t_quantile(level, df) == float(stats.t.ppf(0.5 + level / 2, df))
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(MeasureError, match="level must be in"):
            normal_quantile(bad)


def test_t_bounds_match_scipy_t_interval():
    lo, hi = t_bounds(2.0, 0.3, 11, 0.9)
    ref = stats.t.interval(0.9, 11, loc=2.0, scale=0.3)
    assert (lo, hi) == pytest.approx(ref, abs=1e-13)


def _brute_cluster_t(values, clusters, level):
    groups: dict[str, list[float]] = {}
    for v, c in zip(values, clusters):
        groups.setdefault(c, []).append(v)
    means = [sum(g) / len(g) for g in groups.values()]
    k = len(means)
    m = sum(means) / k
    sd = math.sqrt(sum((x - m) ** 2 for x in means) / (k - 1))
    q = stats.t.ppf(0.5 + level / 2, k - 1)
    return m, m - q * sd / math.sqrt(k), m + q * sd / math.sqrt(k), k


@pytest.mark.parametrize("seed", range(5))
def test_cluster_t_matches_brute_force_and_both_callers(seed):
    rng = random.Random(seed)
    n_clusters = rng.randint(2, 12)
    clusters = [f"s{rng.randrange(n_clusters)}" for _ in range(40)]
    clusters[:2] = ["s0", "s1"]  # at least two clusters
    values = [rng.uniform(-2, 2) for _ in clusters]
    level = rng.choice([0.8, 0.9, 0.95])
    m, lo, hi, k = _brute_cluster_t(values, clusters, level)
    groups: dict[str, list[float]] = {}
    for v, c in zip(values, clusters):
        groups.setdefault(c, []).append(v)
    iv = cluster_t_interval(np.array([np.mean(g) for g in groups.values()]), level)
    assert (iv.low, iv.high) == pytest.approx((lo, hi), abs=1e-12)
    # the reward audit's seed-cluster mean and the data plane's 2x2 contrast use it
    rw = cluster_mean(values, clusters, level=level)
    dt = _cluster_t(np.array(values), clusters, "x", level)
    for est in (rw, dt):
        assert est.n == k and est.value == pytest.approx(m, abs=1e-12)
        assert (est.interval.low, est.interval.high) == pytest.approx((lo, hi), abs=1e-12)
    assert rw.interval.method == "seed-cluster t" == dt.interval.method
    assert cluster_t_interval(np.array([1.0])) is None


def test_fisher_z_matches_the_formula():
    r, k = 0.42, 25
    z = stats.norm.ppf(0.975)
    half = z * math.sqrt(1.06 / (k - 3))
    want = (math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half))
    assert fisher_z_interval(r, k) == pytest.approx(want, abs=1e-14)
    assert fisher_z_interval(r, k, variance=1.0)[0] > want[0]  # Pearson's SE is smaller
