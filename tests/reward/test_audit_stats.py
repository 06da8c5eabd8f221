"""Audit statistics against independent references (statsmodels, scipy, closed forms) and by
simulation (interval coverage, false-positive rate)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from assay.errors import MeasureError
from assay.reward.batching import fixed_batches, padded_tokens, plan_batches, run_plan
from assay.reward.stats import (
    best_order_agreement,
    cluster_mean,
    cluster_proportion,
    cyclic_triads,
    length_bias,
    spearman_interval,
    wilson,
)


@pytest.mark.parametrize("x,n", [(0, 10), (3, 10), (10, 10), (17, 26), (1, 2), (250, 400)])
def test_wilson_matches_statsmodels(x, n):
    lo, hi = wilson(x, n)
    ref = proportion_confint(x, n, alpha=0.05, method="wilson")
    assert lo == pytest.approx(ref[0], abs=1e-12) and hi == pytest.approx(ref[1], abs=1e-12)


def test_cluster_proportion_one_item_per_seed_is_wilson_at_adjusted_n():
    y = np.array([1] * 18 + [0] * 8, dtype=float)
    e = cluster_proportion(y, [f"s{i}" for i in range(26)])
    k, p = 26, 18 / 26
    n_eff = k * (k - 1) / k  # linearization variance p(1-p)/n * k/(k-1)
    n_eff *= (sps.norm.ppf(0.975) / sps.t.ppf(0.975, k - 1)) ** 2
    ref = proportion_confint(p * n_eff, n_eff, method="wilson")
    assert e.value == pytest.approx(p) and e.n == 26 and e.n_rows == 26
    assert e.interval.low == pytest.approx(ref[0]) and e.interval.high == pytest.approx(ref[1])
    assert "Korn-Graubard" in e.interval.method


def test_cluster_proportion_all_correct_never_claims_certainty():
    e = cluster_proportion(np.ones(30), [f"s{i // 3}" for i in range(30)])
    assert e.value == 1.0 and e.n == 10 and 0.5 < e.interval.low < 0.9 and e.interval.high == 1.0


def test_cluster_proportion_counts_seeds_not_rows():
    seeds = [f"s{i // 10}" for i in range(100)]  # 10 seeds x 10 clones
    y = np.repeat([1, 0, 1, 1, 0, 1, 1, 1, 0, 1], 10).astype(float)
    clustered = cluster_proportion(y, seeds)
    naive = cluster_proportion(y, [f"r{i}" for i in range(100)])
    assert clustered.n == 10 and naive.n == 100
    assert clustered.interval.width > 2.5 * naive.interval.width


def test_cluster_proportion_weights_are_duplicate_counts():
    y = np.array([1.0, 0.0, 1.0])
    w = np.array([3.0, 1.0, 1.0])
    e = cluster_proportion(y, ["a", "b", "c"], w)
    assert e.value == pytest.approx(4 / 5)
    with pytest.raises(MeasureError, match="outcomes must be finite"):
        cluster_proportion([np.nan, 1.0], ["a", "b"])
    with pytest.raises(MeasureError, match="weights must be positive"):
        cluster_proportion([1.0, 0.0], ["a", "b"], [1.0, 0.0])


@pytest.mark.parametrize("k,p,rho",
                         [(10, 0.7, 0.3), (26, 0.8, 0.5), (40, 0.6, 0.0), (12, 0.9, 0.2)])
def test_cluster_proportion_coverage_by_simulation(k, p, rho):
    """Beta-binomial seeds (intra-seed correlation rho), 1-4 pairs per seed, 1500 replicates:
    the 95% interval must cover the true accuracy at least 93% of the time."""
    rng = np.random.default_rng(k * 100 + int(rho * 10))
    reps, hits = 1500, 0
    for _ in range(reps):
        sizes = rng.integers(1, 5, size=k)
        if rho > 0:
            a = p * (1 - rho) / rho
            b = (1 - p) * (1 - rho) / rho
            ps = rng.beta(a, b, size=k)
        else:
            ps = np.full(k, p)
        y = np.concatenate([rng.random(s) < q for s, q in zip(sizes, ps)]).astype(float)
        seeds = np.repeat(np.arange(k), sizes).astype(str)
        iv = cluster_proportion(y, seeds).interval
        hits += iv.low <= p <= iv.high
    assert hits / reps >= 0.93, hits / reps


def test_spearman_interval_matches_scipy_and_formula():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=30), rng.normal(size=30)
    r, lo, hi = spearman_interval(x, y)
    assert r == pytest.approx(sps.spearmanr(x, y).statistic)
    half = 1.959963984540054 * math.sqrt(1.06 / 27)
    assert lo == pytest.approx(math.tanh(math.atanh(r) - half))
    assert hi == pytest.approx(math.tanh(math.atanh(r) + half))
    assert all(math.isnan(v) for v in spearman_interval(np.ones(10), y[:10]))


@pytest.mark.parametrize("k", [12, 30])
def test_length_bias_false_positive_rate(k):
    """No relation between score and length differences: the interval must exclude 0 in about
    5% of replicates (3%-7.5% over 2000 replicates)."""
    rng = np.random.default_rng(k)
    reps = 2000
    fired = 0
    seeds = [f"s{i}" for i in range(k)]
    for _ in range(reps):
        e = length_bias(rng.normal(size=k), rng.normal(scale=50, size=k), seeds)
        fired += not e.interval.contains(0.0)
    assert 0.03 <= fired / reps <= 0.075, fired / reps


def test_length_bias_uses_seed_means():
    ds = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 6.0, 6.5])
    dl = np.array([10.0, 30.0, 20.0, 40.0, 60.0, 50.0, 55.0])
    seeds = ["a", "a", "b", "c", "d", "e", "e"]
    e = length_bias(ds, dl, seeds)
    ref = sps.spearmanr([2.0, 2.0, 5.0, 4.0, 6.25], [20.0, 20.0, 40.0, 60.0, 52.5]).statistic
    assert e.value == pytest.approx(ref) and e.n == 5 and e.n_rows == 7
    none = length_bias([1.0, 2.0, 3.0, 4.0, 5.0], [0.0] * 5, list("abcde"))
    assert math.isnan(none.value) and "do not vary" in none.note


def test_cluster_mean_matches_t_interval():
    rng = np.random.default_rng(3)
    v = rng.normal(1.0, 2.0, size=15)
    e = cluster_mean(v, [f"s{i}" for i in range(15)])
    lo, hi = sps.t.interval(0.95, 14, loc=v.mean(), scale=sps.sem(v))
    assert e.interval.low == pytest.approx(lo) and e.interval.high == pytest.approx(hi)


def test_cyclic_triads_match_kendall_formula():
    """For a complete tournament, cyclic triads = C(n,3) - sum_i C(wins_i, 2) (Kendall 1940)."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = 6
        P = np.zeros((n, n), dtype=int)
        for i, j in itertools.combinations(range(n), 2):
            s = 1 if rng.random() < 0.5 else -1
            P[i, j], P[j, i] = s, -s
        wins = (P > 0).sum(axis=1)
        expected = math.comb(n, 3) - sum(math.comb(int(w), 2) for w in wins)
        assert cyclic_triads(P) == (expected, math.comb(n, 3))


def test_best_order_agreement():
    assert best_order_agreement(3, [(0, 1, 2, 0, 0), (1, 2, 1, 0, 0), (0, 2, 1, 0, 0)]) == 1.0
    assert best_order_agreement(3, [(0, 1, 1, 0, 0), (1, 2, 1, 0, 0), (2, 0, 1, 0, 0)]) == 2 / 3
    assert best_order_agreement(2, [(0, 1, 0, 0, 2)]) == 0.5  # ties are half for every order
    assert math.isnan(best_order_agreement(9, [(0, 1, 1, 0, 0)]))


def test_plan_batches_properties():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=500)
    plan = plan_batches(lengths, batch_tokens=2048, max_batch=64)
    flat = np.concatenate(plan)
    assert sorted(flat.tolist()) == list(range(500))
    for b in plan:
        assert len(b) <= 64
        assert len(b) == 1 or len(b) * lengths[b].max() <= 2048
    assert padded_tokens(lengths, plan) < 0.75 * padded_tokens(lengths, fixed_batches(500, 16))
    assert [b.tolist() for b in plan_batches([5, 5, 5], 10)] == [[0, 1], [2]]  # stable ties
    with pytest.raises(MeasureError):
        plan_batches([1, -1], 10)


def test_run_plan_backs_off_on_out_of_memory():
    class OutOfMemoryError(RuntimeError):
        pass

    seen = []

    def forward(idx):
        seen.append(len(idx))
        if len(idx) > 3:
            raise OutOfMemoryError("CUDA out of memory")
        return idx.astype(float)

    out, run = run_plan([10] * 10, 100, forward)
    assert out.tolist() == list(range(10)) and run.oom_backoffs == 2 and max(seen) == 10
    assert run.final_batch_tokens == 25

    def broken(idx):
        raise ValueError("not an OOM")

    with pytest.raises(ValueError):
        run_plan([1, 2], 10, broken)
