"""One API across results (issue 19): ``print(result)`` shows that warnings exist, the headline
is at ``.estimate``/``.value``, ``to_frame()`` sits beside ``to_dict()``, a single task says why
it has no interval, compare and holdout_size take their arms the same way, and eval_variance
names which of its two standard errors belongs to the estimate."""

from __future__ import annotations

import numpy as np
import pytest

import assay
from assay.measure import compare, eval_variance, holdout_size, pass_at, select
from assay.results import Estimate


def _rows(n_tasks: int, k: int, p: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rates = rng.beta(2, 2, n_tasks) if p is None else np.full(n_tasks, p)
    return [{"task_id": f"t{i}", "reward": float(rng.random() < rates[i])} for i in range(n_tasks)
            for _ in range(k)]


def test_print_shows_the_warning_count_and_report_shows_them() -> None:
    few = pass_at(_rows(3, 4, None, 0))  # 3 tasks: warns about coverage
    assert few.warnings
    n = len(few.warnings)
    want = " (1 warning: report() shows it)" if n == 1 else f" ({n} warnings: report() shows them)"
    assert str(few).endswith(want)
    rep = few.report()
    assert rep.splitlines()[0] + want == str(few)  # the report does not repeat the count
    assert all(f"warning: {w}" in rep for w in few.warnings)
    many = pass_at(_rows(40, 4, None, 1))
    assert not many.warnings and "report() shows" not in str(many)


def test_single_task_says_why_there_is_no_interval() -> None:
    res = pass_at([{"task_id": "a", "reward": r} for r in (1, 0, 1, 1)])
    assert res.pass_at_1.interval is None
    assert "no interval: one task" in str(res).split(" | ")[0]


def test_every_result_has_its_headline_at_estimate_and_a_frame() -> None:
    before, after = _rows(30, 4, None, 2), _rows(30, 4, None, 3)
    pa = pass_at(before)
    cmp = compare(before, after)
    ev = eval_variance(before)
    hs = holdout_size(0.1, before, after)
    sel = select(assay.rows([f"q{i}" for i in range(6)], [["a", "b"]] * 6,
                            [[1, 0], [1, 1], [0, 0], [0, 1], [1, 0], [0, 0]]))
    for res, value in [(pa, pa.pass_at_1.value), (cmp, cmp["pass@1"].delta.value),
                       (ev, ev["pass@1"].mean.value), (hs, float(hs.n_tasks)),
                       (sel, float(sel.n_tasks_kept))]:
        assert isinstance(res.estimate, Estimate) and res.estimate.value == value == res.value
        frame = res.to_frame()
        assert list(frame.columns[:4]) == ["path", "name", "value", "low"]
        assert value in frame["value"].tolist() or res is hs
        assert res.to_dict()  # beside to_dict, not instead of it
    # pass_at's frame holds every estimate its line prints, with the same numbers
    f = pa.to_frame().set_index("name")
    assert f.loc["pass@1", "value"] == pa.pass_at_1.value
    assert f.loc["pass@1", "low"] == pa.pass_at_1.interval.low
    assert f.loc["pass@1", "n"] == pa.n_tasks
    # the old names still work
    assert pa.value == pa.pass_at_1.value


def test_compare_and_holdout_size_take_arms_the_same_way() -> None:
    before, after = _rows(20, 4, None, 4), _rows(20, 4, None, 5)
    assert compare(before, after) == compare(before=before, after=after)
    by_position = holdout_size(0.1, before, after)
    assert by_position == holdout_size(0.1, before=before, after=after)
    assert by_position.sd_source != "model"  # the arms were used
    rows_b = assay.rows([f"q{i}" for i in range(20)], [["x"] * 4] * 20,
                        [[r["reward"] for r in before[4 * i:4 * i + 4]] for i in range(20)],
                        task_ids=[f"t{i}" for i in range(20)])
    assert holdout_size(0.1, rows_b, after) == by_position  # Rows and dicts alike, as compare


def test_one_se_for_one_pass_at_1() -> None:
    # tasks that all share one rate: the between-task estimate is negative and truncated at 0,
    # so the components' se exceeds the empirical se over tasks
    for seed in range(50):
        rows = _rows(30, 4, 0.5, seed)
        c = eval_variance(rows)["pass@1"]
        if c.between == 0.0:
            break
    else:
        pytest.fail("no seed gave a truncated between-task estimate")
    means = np.array([np.mean([r["reward"] for r in rows if r["task_id"] == f"t{i}"])
                      for i in range(30)])
    empirical = means.std(ddof=1) / np.sqrt(30)  # independent: numpy over task means
    assert pass_at(rows).se == pytest.approx(empirical, rel=1e-12)
    assert c.se_tasks == pytest.approx(empirical, rel=1e-12) and c.se > c.se_tasks
    rep = eval_variance(rows).report()
    assert f"se of the mean: {empirical:.4f} over tasks (as pass_at reports it" in rep
    assert (f"the {c.se:.4f} above is the components' model se (the between-task estimate was "
            "truncated at 0)" in rep)
    # balanced and untruncated: the two agree, and nothing is said
    for seed in range(50):
        rows = _rows(30, 4, None, seed)
        c = eval_variance(rows)["pass@1"]
        if c.between > 0:
            break
    assert c.se == pytest.approx(c.se_tasks, rel=1e-9)
    assert "se of the mean" not in eval_variance(rows).report()
