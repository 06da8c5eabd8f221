"""Per-category results: each category recomputed alone (brute force), the macro average and
its interval (value by hand, coverage by simulation), and compare by category with Holm
(checked against statsmodels)."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

import assay
from assay.errors import MeasureError
from assay.measure.categories import MISSING, macro_average


def _rows(rng: np.random.Generator, sizes: dict[str, int], rates: dict[str, tuple[float, float]],
          k: int = 4, shift: dict[str, float] | None = None) -> list[dict]:
    out = []
    for cat, T in sizes.items():
        a, b = rates[cat]
        for t in range(T):
            p = rng.beta(a, b)
            p = min(1.0, p + (shift or {}).get(cat, 0.0))
            for _ in range(k):
                out.append({"task_id": f"{cat}-{t}", "reward": float(rng.random() < p),
                            "meta": {"level": cat}})
    return out


def _by_hand(rows: list[dict], cat: str) -> float:
    tasks: dict[str, list[float]] = {}
    for r in rows:
        if r["meta"]["level"] == cat:
            tasks.setdefault(r["task_id"], []).append(r["reward"])
    return sum(sum(v) / len(v) for v in tasks.values()) / len(tasks)


def test_each_category_equals_pass_at_on_its_own_rows() -> None:
    rng = np.random.default_rng(3)
    sizes = {"1": 5, "2": 14, "3": 30}
    rows = _rows(rng, sizes, {"1": (4, 1), "2": (2, 2), "3": (1, 3)})
    rng.shuffle(rows)  # categories interleaved: the split must not depend on order
    res = assay.pass_at_by(rows, "level", k=2)
    assert [c.category for c in res.categories] == ["1", "2", "3"]
    for cat, T in sizes.items():
        alone = assay.pass_at([r for r in rows if r["meta"]["level"] == cat], k=2)
        got = res[cat]
        assert got.pass_at_1.value == pytest.approx(_by_hand(rows, cat), abs=1e-12)
        assert (got.pass_at_1, got.pass_at_k, got.n_tasks) == (alone.pass_at_1, alone.pass_at_k, T)
    assert res.macro.value == pytest.approx(np.mean([_by_hand(rows, c) for c in sizes]), abs=1e-12)
    assert any("category '1' has 5 tasks" in w for w in res.warnings)
    # the bare name, meta.<name> give the same result
    assert assay.pass_at_by(rows, "meta.level", k=2).macro == res.macro


def test_macro_interval_by_hand() -> None:
    a, b = np.array([1.0, 0.0, 1.0, 1.0, 0.5]), np.array([0.25, 0.5, 0.0])
    e = macro_average([a, b], [0.25, 0.25])
    m = (a.mean() + b.mean()) / 2
    var = (a.var(ddof=1) / 5 + b.var(ddof=1) / 3) / 4
    n_eff = m * (1 - m) / var
    from scipy import stats

    df = var**2 / ((a.var(ddof=1) / 5 / 4) ** 2 / 4 + (b.var(ddof=1) / 3 / 4) ** 2 / 2)
    q = stats.t.ppf(0.975, df)
    z = q * q / n_eff
    center = (m + z / 2) / (1 + z)
    half = q * np.sqrt(m * (1 - m) / n_eff + z / (4 * n_eff)) / (1 + z)
    assert ((e.value, e.interval.low, e.interval.high)
            == pytest.approx((m, center - half, center + half), abs=1e-12))
    # all pass: the worst case (Kish n), never a zero-width interval
    allpass = macro_average([np.ones(10), np.ones(10)], [0.25, 0.25])
    assert allpass.interval.high == 1.0 and 0.7 < allpass.interval.low < 0.95


def test_macro_interval_covers_in_simulation() -> None:
    """Three unequal categories, tasks with Beta-distributed pass rates: the 95% macro interval
    should cover the true macro mean about 95% of the time (checked at >= 92% over 400 runs)."""
    rng = np.random.default_rng(11)
    sizes = {"a": 10, "b": 20, "c": 40}
    rates = {"a": (6.0, 2.0), "b": (2.0, 2.0), "c": (1.0, 4.0)}
    truth = np.mean([x / (x + y) for x, y in rates.values()])
    hits = 0
    for _ in range(400):
        res = assay.pass_at_by(_rows(rng, sizes, rates), "level", k=1)
        hits += res.macro.interval.contains(truth)
    assert hits / 400 >= 0.92


def test_missing_values_and_tasks_in_two_categories_are_said() -> None:
    rows = [{"task_id": f"t{i}", "reward": float(i % 2),
             "meta": {"level": i % 3} if i % 5 else None}
            for i in range(30)]
    rows.append({"task_id": "t1", "reward": 1.0, "meta": {"level": 2}})  # t1 was level 1
    res = assay.pass_at_by(rows, "level")
    assert MISSING in [c.category for c in res.categories]
    assert any("have no 'level'" in n for n in res.notes)
    assert any("1 tasks have rows in several level categories (e.g. 't1')" in w
               for w in res.warnings)
    with pytest.raises(MeasureError,
                       match=r"by 'lvl': the rows have no such field; .*meta fields \['level'\]"):
        assay.pass_at_by(rows, "lvl")


def test_compare_by_category_is_compare_per_category_with_holm() -> None:
    rng = np.random.default_rng(5)
    sizes = {"easy": 25, "mid": 25, "hard": 4}
    rates = {"easy": (5, 2), "mid": (2, 2), "hard": (1, 3)}
    before = _rows(rng, sizes, rates)
    after = [dict(r, reward=1.0 if r["meta"]["level"] == "easy" else r["reward"]) for r in before]
    res = assay.compare_by(before, after, "level", alpha=0.05)
    cats = [c.category for c in res.categories]
    assert cats == ["easy", "hard", "mid"]
    raw = []
    for cat in cats:
        alone = assay.compare([r for r in before if r["meta"]["level"] == cat],
                              [r for r in after if r["meta"]["level"] == cat], metrics=["pass@1"])
        assert res[cat].p_value == alone["pass@1"].p_value
        assert res[cat].delta == alone["pass@1"].delta
        raw.append(alone["pass@1"].p_value)
    holm = multipletests(raw, alpha=0.05, method="holm")[1]
    assert [res[c].p_adjusted for c in cats] == pytest.approx(list(holm), abs=1e-12)
    assert res["easy"].verdict == "better" and res["mid"].verdict == "no difference detected"
    # 4 paired tasks: the exact test cannot reach 0.05 (smallest p 0.125): said, never
    # "no difference"
    assert res["hard"].verdict == "insufficient data"
    assert any(w.startswith("category 'hard' (pass@1): 4 paired tasks; the exact test's smallest "
                            "possible p is 0.1250")
               for w in res.warnings)
    assert res.correction == "Holm across 3 tests" and "Holm across 3 tests" in res.report()


def test_compare_by_warns_when_holm_leaves_a_category_no_room() -> None:
    rng = np.random.default_rng(9)
    sizes = {f"c{i}": 6 for i in range(4)}  # 6 tasks: smallest p 1/32 > 0.05 / 4
    rates = {c: (2, 2) for c in sizes}
    before = _rows(rng, sizes, rates)
    res = assay.compare_by(before, [dict(r, reward=1.0) for r in before], "level")
    assert sum("above alpha/4" in w for w in res.warnings) == 4
