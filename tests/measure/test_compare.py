"""compare: exact sign-flip p-values, false-positive rate by simulation, Holm, verdicts, proxy."""

import itertools

import numpy as np
import pytest

from assay.errors import MeasureError
from assay.measure import compare, signflip_test
from assay.measure.signflip import lattice_pvalues


def _rows(counts, k, marker=None):
    rows = []
    for i, c in enumerate(counts):
        for j in range(k):
            r = {"task_id": f"t{i}", "reward": float(j < c)}
            if marker is not None:
                r["markers"] = {"len": float(marker[i] + j)}
            rows.append(r)
    return rows


def _brute(d):
    obs = abs(sum(d))
    pats = list(itertools.product([-1, 1], repeat=len(d)))
    return sum(abs(np.dot(s, np.abs(d))) >= obs - 1e-12 for s in pats) / len(pats)


def test_pvalues_equal_brute_force_enumeration():
    rng = np.random.default_rng(0)
    for _ in range(60):
        T = int(rng.integers(1, 11))
        a = rng.integers(-4, 5, T)
        ref = _brute(a)
        assert lattice_pvalues(a[None])[0] == pytest.approx(ref, abs=1e-9)
        assert signflip_test(a / 4, lattice=4).p_value == pytest.approx(ref, abs=1e-9)
        cont = a + rng.normal(0, 0.01, T)  # non-lattice: the enumeration branch
        assert signflip_test(cont).p_value == pytest.approx(_brute(cont), abs=1e-9)


def test_monte_carlo_branch_agrees_with_exact_enumeration():
    from assay.measure import signflip

    rng = np.random.default_rng(1)
    d = rng.normal(0.3, 1, 18)
    exact = signflip_test(d).p_value
    old = signflip.MAX_ENUMERATE
    try:
        signflip.MAX_ENUMERATE = 5
        mc = signflip_test(d, seed=3)
    finally:
        signflip.MAX_ENUMERATE = old
    assert mc.method.startswith("Monte Carlo")
    assert abs(mc.p_value - exact) < 0.01


def test_false_positive_rate_and_power_by_simulation():
    """Identical arms: FPR <= 0.055 at 5, 10, 20 and 50 paired tasks; power for +0.1 reported."""
    rng = np.random.default_rng(42)
    R = 3000
    report = []
    for k in (1, 4, 8):
        for T in (5, 10, 20, 50):
            p = rng.beta(2, 2, size=(R, T))
            before = rng.binomial(k, p)
            fpr = np.mean(lattice_pvalues(rng.binomial(k, p) - before) < 0.05)
            pw = np.mean(lattice_pvalues(rng.binomial(k, np.clip(p + 0.1, 0, 1)) - before) < 0.05)
            report.append((k, T, fpr, pw))
            assert fpr <= 0.055, (k, T, fpr)
            if T == 5:
                assert fpr == 0 and pw == 0  # 2/32 > 0.05: this test cannot fire at 5 tasks
    print("\n".join(f"k={k} T={T}: FPR {f:.3f}, power(+0.1) {p:.2f}" for k, T, f, p in report))
    power_50 = {k: p for k, T, _, p in report if T == 50}
    assert power_50[8] > power_50[4] > power_50[1]


def test_compare_uses_the_exact_test_on_pass_rates():
    rng = np.random.default_rng(5)
    cb, ca = rng.integers(0, 5, 15), rng.integers(0, 5, 15)
    res = compare(_rows(cb, 4), _rows(ca, 4))
    m = res["pass@1"]
    assert m.test == "exact sign-flip (lattice)"
    assert m.p_value == pytest.approx(lattice_pvalues((ca - cb)[None])[0])
    assert m.delta.value == pytest.approx((ca - cb).mean() / 4)
    assert m.n_paired == 15


def test_verdicts_follow_the_adjusted_pvalue():
    up = compare(_rows([1] * 12, 4), _rows([3] * 12, 4))
    assert up.verdict == "better" and up["pass@1"].p_adjusted < 0.05
    down = compare(_rows([3] * 12, 4), _rows([1] * 12, 4))
    assert down.verdict == "worse"
    same = compare(_rows([2] * 12, 4), _rows([2] * 12, 4))
    assert same.verdict == "no difference detected" and same["pass@1"].p_value == 1.0
    assert same["pass@1"].delta.interval.width > 0  # never zero width
    assert "sizing" in same.report() and same["pass@1"].detectable is not None
    few = compare(_rows([0] * 5, 4), _rows([4] * 5, 4))
    assert few.verdict == "insufficient data" and few["pass@1"].p_value == pytest.approx(0.0625)
    assert any("5 paired tasks" in w for w in few.warnings)


def test_holm_across_metrics_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(9)
    cb, ca = rng.integers(0, 5, 30), np.clip(rng.integers(0, 5, 30) + 1, 0, 4)
    mb, ma = rng.normal(50, 5, 30), rng.normal(52, 5, 30)
    res = compare(_rows(cb, 4, mb), _rows(ca, 4, ma))
    raw = [m.p_value for m in res.metrics]
    assert [m.metric for m in res.metrics] == ["pass@1", "marker:len"]
    ref = multipletests(raw, method="holm")[1]
    np.testing.assert_allclose([m.p_adjusted for m in res.metrics], ref)
    assert res.correction == "Holm"
    for m in res.metrics:
        assert (m.verdict in ("better", "worse")) == (m.p_adjusted < 0.05)


def test_proxy_improves_target_does_not_warns_overoptimization():
    rng = np.random.default_rng(2)
    c = rng.integers(0, 5, 30)
    before = _rows(c, 4, marker=np.full(30, 10.0))
    after = _rows(c, 4, marker=np.full(30, 10.0) + rng.uniform(5, 8, 30))
    res = compare(before, after, proxy="marker:len")
    assert res["marker:len"].verdict == "better"
    assert res.verdict == "no difference detected"
    assert any("over-optimization" in w for w in res.warnings)
    quiet = compare(before, before, proxy="len")
    assert not any("over-optimization" in w for w in quiet.warnings)
    with pytest.raises(MeasureError, match="no marker"):
        compare(before, after, proxy="marker:nope")


def test_unpaired_tasks_are_counted_and_left_out():
    before = _rows([1, 2, 3, 4], 4)
    after = _rows([1, 2, 3], 4) + [{"task_id": "new", "reward": 1.0}]
    res = compare(before, after)
    assert res.n_paired == 3 and res.n_only_before == 1 and res.n_only_after == 1
    assert res["pass@1"].n_unpaired == 2
    assert "not compared" in res.report()


def test_metrics_argument_and_lower_is_better():
    before = _rows([2] * 12, 4, marker=np.full(12, 100.0))
    after = _rows([2] * 12, 4, marker=np.full(12, 100.0) - np.arange(1, 13) * 3)
    res = compare(before, after, metrics=["len"], lower_is_better=["len"])
    assert [m.metric for m in res.metrics] == ["marker:len"]
    assert res["len"].verdict == "better"
    with pytest.raises(MeasureError, match="no marker"):
        compare(before, after, metrics=["missing"])


def test_weights_equal_duplicated_rows():
    rng = np.random.default_rng(8)
    cb, ca = rng.integers(0, 5, 25), rng.integers(1, 5, 25)
    before, after = _rows(cb, 4), _rows(ca, 4)
    # the first row of every task in `after` counted twice, by weight and by duplication
    w_after = [2.0 if j == 0 else 1.0 for _ in range(25) for j in range(4)]
    dup_after = after + [r for i, r in enumerate(after) if i % 4 == 0]
    by_weight = compare(before, after, weights=([1.0] * 100, w_after))
    by_dup = compare(before, dup_after)
    assert by_weight["pass@1"].delta.value == pytest.approx(by_dup["pass@1"].delta.value)
    assert by_weight["pass@1"].p_value == pytest.approx(by_dup["pass@1"].p_value, abs=0.01)
