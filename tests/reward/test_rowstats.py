"""Reward-model measurements on graded rows, checked against brute force over every task.

best-of-n (ties split evenly), pass@1, the oracle pick, ranking accuracy over (pass, fail) pairs
and length concordance at a fixed verdict; a planted length-loving model is flagged and a
planted oracle reaches pass@k exactly.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest

import assay
from assay.errors import MeasureError
from assay.reward.rowstats import reward_rows


def brute_force(rows: list[dict], marker: str) -> dict[str, float]:
    """Every statistic from its definition, one task at a time, with plain loops."""
    tasks: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for r in rows:
        if r["reward"] in (0.0, 1.0) and marker in r["markers"]:
            tasks[r["task_id"]].append((r["reward"], r["markers"][marker], len(r["final_text"])))
    bon, p1, orc, rank, conc = [], [], [], [], []
    for items in tasks.values():
        top = max(s for _, s, _ in items)
        winners = [y for y, s, _ in items if s == top]
        bon.append(sum(winners) / len(winners))
        p1.append(sum(y for y, _, _ in items) / len(items))
        orc.append(max(y for y, _, _ in items))
        pairs = [1.0 if sp > sf else 0.5 if sp == sf else 0.0
                 for (yp, sp, _), (yf, sf, _) in itertools.product(items, items)
                 if yp == 1.0 and yf == 0.0]
        if pairs:
            rank.append(sum(pairs) / len(pairs))
        same = []
        for (ya, sa, la), (yb, sb, lb) in itertools.combinations(items, 2):
            if ya != yb or la == lb:
                continue
            (sl, ss) = (sa, sb) if la > lb else (sb, sa)
            same.append(1.0 if sl > ss else 0.5 if sl == ss else 0.0)
        if same:
            conc.append(sum(same) / len(same))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"best_of_n": mean(bon), "pass_at_1": mean(p1), "oracle": mean(orc),
            "ranking": mean(rank), "concordance": mean(conc), "n_rank": len(rank),
            "n_conc": len(conc), "T": len(bon)}


def _rows(seed: int, n_tasks: int = 40, k: int = 5, score=None) -> list[dict]:
    """Rows whose pass chance varies by task and whose length is independent of passing."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n_tasks):
        p = rng.uniform(0.1, 0.9)
        for _ in range(k):
            y = float(rng.random() < p)
            text = "x" * int(rng.integers(5, 60))
            s = score(y, text, rng) if score else float(rng.integers(0, 4))  # many ties
            out.append({"task_id": f"t{t}", "prompt": f"task {t}", "final_text": text,
                        "reward": y, "markers": {"rm:m": s}})
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_statistic_equals_brute_force(seed: int) -> None:
    rows = _rows(seed)
    res = reward_rows(rows, "rm:m")
    bf = brute_force(rows, "rm:m")
    assert res.best_of_n.value == pytest.approx(bf["best_of_n"], abs=1e-12)
    assert res.pass_at_1.value == pytest.approx(bf["pass_at_1"], abs=1e-12)
    assert res.oracle.value == pytest.approx(bf["oracle"], abs=1e-12)
    assert res.gain.value == pytest.approx(bf["best_of_n"] - bf["pass_at_1"], abs=1e-12)
    assert res.ranking_accuracy.value == pytest.approx(bf["ranking"], abs=1e-12)
    assert res.length_concordance.value == pytest.approx(bf["concordance"], abs=1e-12)
    assert (res.n_tasks, res.ranking_accuracy.n, res.length_concordance.n) == (
        bf["T"], bf["n_rank"], bf["n_conc"])
    # pass@1 and the oracle are the measure library's pass@1 and pass@k (k = samples per task)
    pa = assay.pass_at(rows, k=5)
    assert res.pass_at_1.value == pytest.approx(pa.pass_at_1.value)
    assert res.oracle.value == pytest.approx(pa.pass_at_k.value)
    assert res.oracle.name == "pass@5"
    for e in (res.best_of_n, res.pass_at_1, res.oracle, res.ranking_accuracy,
              res.length_concordance):
        assert e.interval is not None and e.interval.low < e.value < e.interval.high
        assert e.unit == "tasks"


def test_ties_at_the_top_are_split_evenly() -> None:
    # task a: the two top-scored rows are one pass and one fail -> 0.5; task b: top row passes
    rows = [{"task_id": "a", "final_text": "p", "reward": 1.0, "markers": {"rm:m": 2.0}},
            {"task_id": "a", "final_text": "f", "reward": 0.0, "markers": {"rm:m": 2.0}},
            {"task_id": "a", "final_text": "g", "reward": 0.0, "markers": {"rm:m": 1.0}},
            {"task_id": "b", "final_text": "p", "reward": 1.0, "markers": {"rm:m": 5.0}},
            {"task_id": "b", "final_text": "f", "reward": 0.0, "markers": {"rm:m": 1.0}}]
    res = reward_rows(rows, "rm:m")
    assert res.best_of_n.value == pytest.approx((0.5 + 1.0) / 2)
    assert res.n_top_ties == 1
    # ranking: task a pairs (p,f) tie 0.5, (p,g) 1 -> 0.75; task b 1.0 -> mean 0.875
    assert res.ranking_accuracy.value == pytest.approx(0.875)


def test_planted_oracle_reaches_pass_at_k() -> None:
    rows = _rows(3, score=lambda y, text, rng: y)  # scores 1 on passing rows, 0 on failing
    res = reward_rows(rows, "rm:m")
    assert res.best_of_n.value == res.oracle.value
    assert res.best_of_n.value == pytest.approx(assay.pass_at(rows, k=5).pass_at_k.value)
    assert res.ranking_accuracy.value == 1.0
    assert not res.length_biased


def test_planted_length_model_is_flagged_where_length_does_not_predict_passing() -> None:
    rows = _rows(4, n_tasks=60, score=lambda y, text, rng: float(len(text)))
    # length is independent of the verdict here: passing and failing rows have the same lengths
    lens = {y: np.mean([len(r["final_text"]) for r in rows if r["reward"] == y]) for y in (0, 1)}
    assert abs(lens[1.0] - lens[0.0]) < 5
    res = reward_rows(rows, "rm:m")
    assert res.length_biased and res.length_concordance.value == 1.0
    assert any("prefers longer completions" in w for w in res.warnings)
    # its ranking of pass over fail is at chance: length alone says nothing about passing
    assert res.ranking_accuracy.interval.low < 0.5 < res.ranking_accuracy.interval.high
    # a model that ignores length (random scores) is not flagged
    noise = reward_rows(_rows(4, n_tasks=60, score=lambda y, text, rng: float(rng.normal())),
                        "rm:m")
    assert not noise.length_biased
    assert noise.length_concordance.interval.low < 0.5 < noise.length_concordance.interval.high


def test_missing_scores_and_partial_rows_are_counted_not_coerced() -> None:
    rows = _rows(5, n_tasks=12)
    del rows[0]["markers"]["rm:m"]
    rows[1]["reward"] = 0.5
    res = reward_rows(rows, "rm:m")
    assert (res.n_unscored, res.n_not_binary, res.n_rows) == (1, 1, len(rows) - 2)
    assert any("no rm:m score" in n for n in res.notes)
    with pytest.raises(MeasureError, match="no marker 'rm:other'"):
        reward_rows(rows, "rm:other")
