"""eval_variance: Miller (2024) components recovered in simulation, cross-checked, runs compared."""

import math

import numpy as np
import pytest

import assay
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
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster",
                                         cov_kwds={"groups": groups, "use_correction": False})
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


def test_block_layout_sums_equal_the_general_path():
    import pyarrow as pa

    from assay.measure.grouping import _local_codes, task_stats

    rng = np.random.default_rng(11)
    for _ in range(200):
        T, k = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        codes = np.repeat(np.arange(T), k)
        vals = rng.random(T * k)
        binary = rng.random() < 0.5
        if binary:
            vals = (vals < 0.5).astype(float)
        mask = rng.random(T * k) < (1.0 if rng.random() < 0.5 else 0.8)
        a = task_stats(codes, vals, mask, T, binary=binary)
        b = task_stats(codes, vals, mask, T, binary=binary, block=k)
        for f in ("n", "s", "ss", "rows"):
            np.testing.assert_allclose(getattr(b, f), getattr(a, f), rtol=1e-12, atol=1e-12)
    # the layout is detected only when row i belongs to task i // k
    assert _local_codes(pa.array(["a", "a", "b", "b"]))[2] == 2
    assert _local_codes(pa.array(["a", "b", "c"]))[2] == 1
    assert _local_codes(pa.array(["a", "a", "b"]))[2] == 0  # unequal k
    assert _local_codes(pa.array(["a", "b", "a", "b"]))[2] == 0  # a task in two runs
    assert _local_codes(pa.array(["a", "a", "b", "b", "a", "a"]))[2] == 0


def test_results_do_not_depend_on_row_order():
    rng = np.random.default_rng(4)
    T, k = 60, 4
    p = rng.beta(2, 2, T)
    rows = [{"task_id": f"t{i}", "reward": float(rng.random() < p[i]),
             "markers": {"len": float(rng.integers(5, 50))}}
            for i in range(T) for _ in range(k)]
    other = [dict(r, reward=float(rng.random() < 0.6)) for r in rows]
    shuffled = [rows[i] for i in rng.permutation(len(rows))]
    a, b = assay.eval_variance(rows, other), assay.eval_variance(shuffled, other)
    for ca, cb in zip(a.components, b.components):
        assert ca.mean.value == pytest.approx(cb.mean.value, rel=1e-12)
        assert (ca.se == pytest.approx(cb.se, rel=1e-9)
                and ca.within == pytest.approx(cb.within, rel=1e-9))
    pa_, pb = assay.pass_at(rows), assay.pass_at(shuffled)
    assert pa_.pass_at_1.interval.low == pytest.approx(pb.pass_at_1.interval.low, rel=1e-12)
    ca, cb = assay.compare(rows, other), assay.compare(shuffled, other)
    assert ([m.delta.value for m in ca.metrics]
            == pytest.approx([m.delta.value for m in cb.metrics], rel=1e-12))
