"""holdout_size: the n it returns reaches the requested power with compare's own test."""

import numpy as np
import pytest

from assay.errors import MeasureError
from assay.measure import holdout_size
from assay.measure.signflip import lattice_pvalues, power, tasks_for_power


def _simulate_power(n, k, effect, draw_rates, seed, R=2000):
    rng = np.random.default_rng(seed)
    p = draw_rates(rng, (R, n))
    a = rng.binomial(k, np.clip(p + effect, 0, 1)) - rng.binomial(k, p)
    return float(np.mean(lattice_pvalues(a) < 0.05))


def _pilot(rng, T, k, draw_rates, shift=0.0):
    p = draw_rates(rng, T)
    c = rng.binomial(k, np.clip(p + shift, 0, 1))
    return [{"task_id": f"t{i}", "reward": float(j < c[i])} for i in range(T) for j in range(k)]


def spread(rng, size):
    return 0.1 + 0.6 * rng.beta(2, 2, size)


@pytest.mark.parametrize("k,effect", [(4, 0.1), (8, 0.2), (1, 0.2)])
def test_n_from_before_rows_reaches_power_within_five_points(k, effect):
    rng = np.random.default_rng(k)
    pilot = _pilot(rng, 300, k, spread)
    h = holdout_size(effect, before=pilot, power=0.8)
    assert h.k == k and h.sd_source.startswith("before rows")
    achieved = _simulate_power(h.n_tasks, k, effect, spread, seed=100 + k)
    assert abs(achieved - 0.8) <= 0.05, (h, achieved)


def test_model_path_reaches_power_within_five_points():
    h = holdout_size(0.15, k=4, base=0.5)
    assert h.sd_source == "model"
    achieved = _simulate_power(h.n_tasks, 4, 0.15, lambda rng, s: np.full(s, 0.5), seed=11)
    assert abs(achieved - 0.8) <= 0.05, (h, achieved)


def test_paired_pilot_reads_the_sd_of_differences():
    rng = np.random.default_rng(4)
    before = _pilot(rng, 400, 4, spread)
    after = _pilot(rng, 400, 4, spread, shift=0.1)
    h = holdout_size(0.1, before=before, after=after)
    assert h.sd_source.startswith("paired pilot (400 tasks)")
    assert h.n_tasks >= h.n_normal == tasks_for_power(0.1, h.sd, 0.8, 0.05)
    assert h.n_tasks > 400 * 0 and str(h).startswith(f"holdout_size: {h.n_tasks} paired tasks")


def test_large_n_uses_the_normal_limit_and_it_matches_simulation():
    n = tasks_for_power(0.03, 0.35)
    assert n > 300
    assert abs(power(n, 0.03, 0.35) - 0.8) < 0.01
    h = holdout_size(0.03, k=4)
    assert h.simulated_power is None and h.n_tasks == h.n_normal


def test_errors():
    with pytest.raises(MeasureError, match="effect"):
        holdout_size(0)
    with pytest.raises(MeasureError, match="before="):
        holdout_size(0.1, after=[{"task_id": "a", "reward": 1}])
    with pytest.raises(MeasureError, match="k must"):
        holdout_size(0.1, k=0)


def test_detectable_effect_closed_form_equals_a_root_finder():
    """The closed form against scipy's brentq on power(mu) = target (the old computation),
    over n, sd, alpha and target; both say None for the same cases (power never reaches it)."""
    from scipy import optimize

    from assay.measure.comparison import detectable_effect
    from assay.measure.signflip import min_attainable_p, power

    compared = 0
    for n in (2, 3, 4, 5, 6, 8, 10, 20, 50, 100, 1000, 10000):
        for sd in (0.01, 0.1, 0.3, 0.5, 1.0, 3.0):
            for alpha in (0.01, 0.05, 0.1):
                for target in (0.5, 0.8, 0.9, 0.99):
                    ref = None
                    if min_attainable_p(n) <= alpha:
                        def f(mu, n=n, sd=sd, alpha=alpha, target=target):
                            return power(n, mu, sd, alpha) - target
                        hi = sd
                        while f(hi) < 0 and hi <= 1e6:
                            hi *= 2
                        if hi <= 1e6:
                            ref = optimize.brentq(f, 1e-12, hi, xtol=1e-9)
                    got = detectable_effect(n, sd, alpha, target)
                    assert (got is None) == (ref is None), (n, sd, alpha, target, got, ref)
                    if ref is not None:
                        compared += 1
                        assert abs(got - ref) < 1e-7, (n, sd, alpha, target, got, ref)
                        assert abs(power(n, got, sd, alpha) - target) < 1e-9
    assert compared > 300
