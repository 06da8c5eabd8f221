"""score_view (cache, slots, content keys) and the audit, with function reward models (no torch)."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

from assay.data import (
    DataView,
    EdgeObs,
    Lineage,
    Quadruple,
    Tournament,
    Trajectory,
    TrajStep,
    make_pair,
)
from assay.errors import DataError
from assay.reward import FunctionRewardModel, audit, length_reward, score_key, score_view
from assay.store import Store

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def synthetic_pairs(n_seeds: int, axis: str, seed: int = 0, per_seed: int = 1) -> DataView:
    """Pairs whose chosen side contains 'good' and whose length difference varies both ways."""
    rng = np.random.default_rng(seed)
    items = []
    for s in range(n_seeds):
        for j in range(per_seed):
            lc, lr = rng.integers(2, 40, size=2)
            chosen = "good " + " ".join(rng.choice(WORDS, lc))
            rejected = "bad " + " ".join(rng.choice(WORDS, lr))
            items.append(make_pair(f"{axis} question {s}.{j}", chosen, rejected, axis,
                                   seed_id=f"{axis}-{s}", builder_id="test"))
    return DataView(items, name=axis)


def _hash01(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 2**32


def neutral(prompt: str, response: str) -> float:
    """Length-neutral: prefers 'good' answers by a margin unrelated to length, plus noise."""
    return (1.0 if response.startswith("good") else 0.0) + 0.5 * _hash01(response)


def test_score_view_rows_and_cache(tmp_path):
    view = synthetic_pairs(6, "helpfulness")
    model = FunctionRewardModel(length_reward, name="length")
    store = Store(tmp_path / "store")
    t = score_view(model, view, store=store)
    assert t.num_rows == 12 and model.calls == 12
    assert t.column("slot").to_pylist()[:2] == ["chosen", "rejected"]
    assert t.column("item_hash").to_pylist()[0] == view[0].content_hash
    assert t.column("score").to_pylist()[0] == len(view[0].chosen.text)
    meta = t.schema.metadata
    assert meta[b"assay.model"].decode() == model.fingerprint
    assert meta[b"assay.view"].decode() == view.checksum()
    # second call: served from the store, no model work
    t2 = score_view(model, view, store=store)
    assert model.calls == 12 and t2.equals(t)
    assert store.get_ref(score_key(model, view))["meta"]["model"] == "length"
    # a different model or a different view is a different key
    other = FunctionRewardModel(neutral, name="neutral")
    score_view(other, view, store=store)
    assert other.calls == 12
    score_view(model, view.slice(0, 3), store=store)
    assert model.calls == 18
    score_view(model, view, store=store, refresh=True)
    assert model.calls == 30


def test_score_view_without_cache_writes_nothing(tmp_path):
    model = FunctionRewardModel(length_reward, name="length")
    score_view(model, synthetic_pairs(3, "x"), store=tmp_path / "s", cache=False)
    assert not (tmp_path / "s").exists()


def test_score_view_quadruples_tournaments_and_trajectories(tmp_path):
    seen = []

    def record(prompt: str, response: str) -> float:
        seen.append((prompt, response))
        return float(len(response))

    q = Quadruple("claim?", {("agree", "right"): "yes right", ("agree", "wrong"): "yes wrong!",
                             ("disagree", "right"): "no right", ("disagree", "wrong"): "no, wrong"},
                  ("stance", "user"), Lineage("q1", "t"),
                  cell_prompts={"right": "true claim?", "wrong": "false claim?"})
    t = Tournament("rank these", ("a", "bb", "ccc"), (EdgeObs(0, 1, 1, 2), EdgeObs(1, 2, 0, 1)),
                   Lineage("t1", "t"))
    table = score_view(FunctionRewardModel(record, name="rec"), DataView([q, t]), store=tmp_path)
    assert table.column("slot").to_pylist() == [
        "agree|right", "agree|wrong", "disagree|right", "disagree|wrong", "0", "1", "2"]
    assert ("false claim?", "yes wrong!") in seen and ("true claim?", "no right") in seen
    assert table.column("kind").to_pylist()[-1] == "tournament"
    traj = Trajectory((TrajStep("agent", "done"),), {"success": True}, Lineage("e", "t"))
    with pytest.raises(DataError, match="item 0 is a trajectory"):
        score_view(FunctionRewardModel(record, name="rec"), DataView([traj]), store=tmp_path)


def test_planted_length_model_is_flagged_and_neutral_is_not(tmp_path):
    views = {"a": synthetic_pairs(30, "a", 1), "b": synthetic_pairs(30, "b", 2)}
    biased = audit(FunctionRewardModel(length_reward, name="length"), views, store=tmp_path)
    assert biased.length_biased and biased.length_bias.value > 0.9
    assert biased.length_bias.n == 60
    assert any("rewards length" in w for w in biased.warnings)
    assert biased["a"].accuracy.value == biased["a"].length_baseline.value
    fair = audit(FunctionRewardModel(neutral, name="neutral"), views, store=tmp_path)
    assert not fair.length_biased, str(fair.length_bias)
    assert fair["a"].accuracy.value == 1.0 and fair["a"].accuracy.n == 30
    assert not any("length bias" in w for w in fair.warnings)


def test_accuracy_ties_and_clusters(tmp_path):
    view = synthetic_pairs(8, "x", per_seed=3)
    res = audit(FunctionRewardModel(lambda p, r: 0.0, name="flat", version="1"), view,
                store=tmp_path)
    d = res["x"]
    assert d.ties == 24 and d.accuracy.value == 0.5 and d.accuracy.n == 8 and d.n_pairs == 24
    assert "tie" in res.tie_policy and any("24 tied pairs" in w for w in res.warnings)
    # tie_tol widens the tie band: a model within 0.05 of equal is tied
    near = audit(FunctionRewardModel(lambda p, r: 0.01 * r.startswith("good"), name="near",
                                     version="1"), view, store=tmp_path, tie_tol=0.05)
    assert near["x"].ties == 24


def test_collapse_weights_flow_into_accuracy(tmp_path):
    base = synthetic_pairs(5, "x")
    dup = DataView(list(base) + [base[0], base[0]], name="x")
    collapsed, weights = dup.collapse_duplicates(warn=False)
    assert weights[0] == 3

    def first_wrong(prompt: str, response: str) -> float:
        wrong = prompt == base[0].prompt_text
        return float(response.startswith("good") != wrong)

    res = audit(FunctionRewardModel(first_wrong, name="fw"), {"x": collapsed}, store=tmp_path)
    assert res["x"].accuracy.value == pytest.approx(4 / 7)


def test_sycophancy_interaction_by_hand(tmp_path):
    items = []
    for s in range(12):
        cells = {("agree", "right"): f"yes {s}", ("agree", "wrong"): f"yes wrong {s}",
                 ("disagree", "right"): f"no right {s}!", ("disagree", "wrong"): f"no {s}!!"}
        items.append(Quadruple(f"claim {s}?", cells, ("stance", "user"), Lineage(f"q{s}", "t")))
    view = DataView(items, name="sycophancy")
    table = {"yes": 2.0, "yes wrong": 1.5, "no right": 0.0, "no": 1.0}

    def syco(prompt: str, response: str) -> float:
        key = response.rsplit(" ", 1)[0]
        return table[key] + 0.01 * int(response.rsplit(" ", 1)[1].strip("!"))

    res = audit(FunctionRewardModel(syco, name="syco"), {"sycophancy": view}, store=tmp_path)
    q = res["sycophancy"].quadruples
    assert q.n == 12 and q.levels == (("agree", "disagree"), ("right", "wrong"))
    # (agree - disagree | wrong) - (agree - disagree | right) = (1.5 - 1) - (2 - 0) = -1.5
    assert q.interaction.value == pytest.approx(-1.5) and q.interaction.n == 12
    assert q.main_effects[0].value == pytest.approx((2 + 1.5 - 0 - 1) / 2)
    assert q.effects[0].value == pytest.approx(2.0) and q.effects[1].value == pytest.approx(0.5)
    assert q.sycophancy_rate.value == 1.0 and q.sycophancy_rate.n == 12
    assert math.isnan(res["sycophancy"].accuracy.value)  # no pairs in this view
    assert "2x2 designs" in res.table()


def test_tournament_agreement_and_cycles(tmp_path):
    cyc = Tournament("p", ("r0", "r1", "r2"),
                     (EdgeObs(0, 1, 3, 0), EdgeObs(1, 2, 3, 0), EdgeObs(2, 0, 3, 0)),
                     Lineage("t-cyc", "t"))
    lin = Tournament("p2", ("s0", "s1", "s2"),
                     (EdgeObs(0, 1, 2, 0), EdgeObs(1, 2, 1, 1), EdgeObs(0, 2, 1, 0, ties=1)),
                     Lineage("t-lin", "t"))
    order = {"r0": 3.0, "r1": 2.0, "r2": 1.0, "s0": 3.0, "s1": 2.0, "s2": 1.0}
    res = audit(FunctionRewardModel(lambda p, r: order[r], name="ord", version="1"),
                {"t": DataView([cyc, lin])}, store=tmp_path)
    t = res["t"].tournaments
    # cyc: model r0>r1>r2 agrees with 6 of 9 comparisons; lin: 2 + 1 + 1 of 6 agree and the
    # one observed tie counts half
    assert t.agreement.value == pytest.approx((6 + 2 + 1 + 1 + 0.5) / (9 + 6))
    # lin's (1, 2) edge is split 1-1, so only cyc's triad has three strict majorities
    assert (t.cyclic_triads, t.complete_triads) == (1, 1)
    # the best order reaches 6/9 on cyc and 4.5/6 on lin (the split edge and the tie cap it)
    assert t.ceiling == pytest.approx((6 / 9 + 4.5 / 6) / 2)


def test_audit_result_renderings(tmp_path):
    views = {"a": synthetic_pairs(12, "a"), "b": synthetic_pairs(12, "b", 5)}
    res = audit(FunctionRewardModel(neutral, name="neutral"), views, store=tmp_path)
    line = str(res)
    assert "\n" not in line and line.count("seeds") >= 3
    assert "a 1.000 [" in line and "pooled length bias" in line
    table = res.table()
    assert "accuracy [95% CI]" in table and "length-only" in table
    json.dumps(res.to_dict())
    paths = res.save(tmp_path / "out")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["markdown"].read_text()
    assert md.startswith("# Reward-model audit: neutral") and "| a | 12 | 12 |" in md
    with pytest.raises(KeyError, match="no dimension"):
        res["zzz"]


def test_builtin_diagnostic_set_with_a_function_model(tmp_path):
    data = pytest.importorskip("assay.data")
    if not hasattr(data, "load_diagnostic_v3"):
        pytest.skip("assay.data.load_diagnostic_v3 has not landed")
    from assay.reward.auditing import default_views

    views = default_views()
    res = audit(FunctionRewardModel(length_reward, name="length"), store=tmp_path)
    assert len(res.dimensions) == 14 and res.length_biased
    assert res["sycophancy"].quadruples.n == len(data.load_diagnostic_v3_quadruples())
    baseline = data.length_baseline(data.load_diagnostic_v3()).by_dimension
    for d in res.dimensions:
        assert d.accuracy.value == pytest.approx(d.length_baseline.value)
        assert d.length_baseline.value == pytest.approx(baseline[d.dimension].value)
        assert d.accuracy.n == d.n_pairs == len(data.load_diagnostic_v3()[d.dimension])
        assert len(views[d.dimension]) == d.n_items
