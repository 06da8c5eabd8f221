"""eval_variance: Miller (2024) components recovered in simulation, cross-checked, runs compared."""

import math

import numpy as np
import pytest

from assay.errors import MeasureError
from assay.measure import eval_variance


def _run(p, k, rng, marker_sd=None):
    rows = []
    for i, pi in enumerate(p):
        for _ in range(k):
            r = {"task_id": f"t{i}", "reward": float(rng.random() < pi)}
            if marker_sd is not None:
                r["markers"] = {"len": float(100 * pi + rng.normal(0, marker_sd))}
            rows.append(r)
    return rows


def test_components_are_recovered_in_simulation():
    rng = np.random.default_rng(0)
    p = rng.beta(2, 2, 3000)  # Var(p) = 0.05, E[p(1-p)] = 0.2
    ev = eval_variance(_run(p, 8, rng))
    c = ev["pass@1"]
    assert c.between == pytest.approx(0.05, rel=0.1)
    assert c.within == pytest.approx(0.2, rel=0.05)
    assert c.samples_per_task == 8 and c.n_tasks == 3000
    # doubling samples only shrinks the sampling term; doubling tasks halves the variance
    assert c.se_double_tasks == pytest.approx(c.se / math.sqrt(2))
    assert c.se_floor_samples < c.se_double_samples < c.se
    assert c.sampling_share == pytest.approx((0.2 / 8) / (0.05 + 0.2 / 8), abs=0.05)


def test_se_matches_statsmodels_cluster_robust_ols():
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(1)
    T, k = 80, 4
    p = rng.beta(1, 3, T)
    rows = _run(p, k, rng)
    y = np.array([r["reward"] for r in rows])
    groups = np.repeat(np.arange(T), k)
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": groups, "use_correction": False})
    c = eval_variance(rows)["pass@1"]
    assert c.mean.value == pytest.approx(fit.params[0])
    if c.between > 0:  # untruncated: the decomposition reproduces var(task means) / T exactly
        assert c.se == pytest.approx(fit.bse[0] * math.sqrt(T / (T - 1)), rel=1e-10)


def test_two_runs_of_the_same_tasks_spread_as_sampling_predicts():
    rng = np.random.default_rng(2)
    p = rng.beta(2, 2, 500)
    runs = [_run(p, 4, rng, marker_sd=5.0) for _ in range(3)]
    ev = eval_variance(*runs)
    c = ev["pass@1"]
    assert ev.n_runs == 3 and len(c.run_means) == 3 and c.samples_per_task == 12
    assert c.run_sd_expected == pytest.approx(math.sqrt(0.2 / 4 / 500), rel=0.1)
    assert c.run_spread_p > 0.01 and not ev.warnings
    assert "marker:len" in [x.metric for x in ev.components]
    assert any("already inside the interval" in n for n in ev.notes)


def test_runs_that_differ_beyond_sampling_are_flagged():
    rng = np.random.default_rng(3)
    p = rng.beta(2, 2, 500)
    ev = eval_variance(_run(p, 4, rng), _run(np.clip(p + 0.15, 0, 1), 4, rng))
    assert any("runs differ more than sampling explains" in w for w in ev.warnings)


def test_one_sample_per_task_cannot_separate_components():
    rng = np.random.default_rng(4)
    ev = eval_variance(_run(rng.beta(2, 2, 50), 1, rng))
    assert math.isnan(ev["pass@1"].within)
    assert any("k >= 2" in w for w in ev.warnings)
    assert "pass@1" in str(ev) and "Miller 2024" in ev.report()


def test_errors():
    with pytest.raises(MeasureError):
        eval_variance()
    with pytest.raises(MeasureError, match="binary"):
        eval_variance([{"task_id": "a", "reward": 0.5}])
