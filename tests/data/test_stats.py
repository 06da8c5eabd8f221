"""Quadruple interaction (seed-cluster interval) and Tournament HodgeRank, against references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from assay.data import DataView, EdgeObs, Lineage, Quadruple, Tournament, make_pair
from assay.data.hodge import hodge_rank
from assay.data.interaction import quadruple_interaction
from assay.errors import DataError

LEVELS = [("agree", "right"), ("agree", "wrong"), ("disagree", "right"), ("disagree", "wrong")]


def quads(n, clones=1):
    out = []
    for i in range(n):
        for c in range(clones):
            cells = {k: f"{k[0]} {k[1]} {i}" for k in LEVELS}
            q = Quadruple(f"Claim {i}", cells, ("stance", "user"), Lineage(f"q{i}"))
            out.append(q if c == 0 else q.derive(f"clone{c}", prompt=f"Claim {i} v{c}"))
    return out


# ----------------------------------------------------------------------- interaction


def test_interaction_matches_scipy_t_interval_on_seed_means():
    rng = np.random.default_rng(1)
    qs = quads(12, clones=2)
    s = rng.normal(size=(len(qs), 4))
    r = quadruple_interaction(DataView(qs), s)
    contrast = (s[:, 1] - s[:, 3]) - (s[:, 0] - s[:, 2])
    seed_means = contrast.reshape(12, 2).mean(axis=1)
    ci = stats.ttest_1samp(seed_means, 0).confidence_interval(0.95)
    assert r.interaction.value == pytest.approx(seed_means.mean())
    assert r.interaction.interval.low == pytest.approx(ci.low)
    assert r.interaction.interval.high == pytest.approx(ci.high)
    assert r.interaction.n == 12 and r.interaction.n_rows == 24
    assert "seed-cluster t" == r.interaction.interval.method
    assert "12 seeds, 24 rows" in str(r)


def test_interaction_interval_covers_at_nominal_rate_with_clustered_clones():
    # Clones share their seed's effect: a row-level interval would under-cover; the seed-cluster
    # one must hold ~95%.
    rng = np.random.default_rng(7)
    qs = quads(12, clones=3)
    true, hits, reps = 0.4, 0, 300
    for _ in range(reps):
        seed_eff = rng.normal(true, 1.0, size=12).repeat(3)
        s = np.zeros((len(qs), 4))
        s[:, 1] = seed_eff + rng.normal(0, 0.1, size=len(qs))
        hits += quadruple_interaction(qs, s).interaction.interval.contains(true)
    assert 0.91 <= hits / reps <= 0.99


def test_interaction_score_forms_and_errors():
    qs = quads(3)
    arr = np.arange(12, dtype=float).reshape(3, 4)
    maps = [{k: arr[i, c] for c, k in enumerate(LEVELS)} for i in range(3)]
    a = quadruple_interaction(qs, arr)
    assert quadruple_interaction(qs, maps).interaction.value == a.interaction.value
    fn = quadruple_interaction(qs, lambda p, r: len(r) + (r.startswith("agree wrong")))
    assert fn.interaction.value == pytest.approx(1.0)
    assert fn.warnings and "only 3 independent seeds" in fn.warnings[0]
    with pytest.raises(DataError, match=r"shape \(3, 4\)"):
        quadruple_interaction(qs, arr[:2])
    with pytest.raises(DataError, match="finite score"):
        quadruple_interaction(qs, np.full((3, 4), np.nan))
    with pytest.raises(DataError, match="not a Quadruple"):
        quadruple_interaction([make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")],
                              [[1, 2, 3, 4]])
    flat = quadruple_interaction(qs, np.tile([1.0, 2.0, 0.0, 0.0], (3, 1))).interaction
    assert flat.interval.width == 0 and "not certainty" in flat.note
    single = quadruple_interaction(qs[:1], arr[:1])
    assert single.interaction.interval is None and "no interval" in single.interaction.note


# ----------------------------------------------------------------------- HodgeRank


def tournament(n, edges):
    return Tournament("Q", tuple(f"r{k}" for k in range(n)), tuple(edges), Lineage("t"))


def brute_force_potential(n, pairs, w, y):
    # Independent reference: minimise sum w (s_j - s_i - y)^2 over s with s_0 pinned to 0 via
    # the normal equations of the explicit design, then centre.
    X = np.zeros((len(pairs), n - 1))
    for e, (i, j) in enumerate(pairs):
        if i > 0:
            X[e, i - 1] -= 1
        if j > 0:
            X[e, j - 1] += 1
    W = np.diag(w)
    beta = np.linalg.solve(X.T @ W @ X, X.T @ W @ y)
    s = np.concatenate([[0.0], beta])
    return s - s.mean()


def test_gradient_matches_brute_force_weighted_least_squares():
    rng = np.random.default_rng(3)
    n = 5
    edges = [EdgeObs(i, j, int(rng.integers(0, 20)), int(rng.integers(1, 20)))
             for i, j in itertools.combinations(range(n), 2)]
    edges.append(EdgeObs(1, 0, 5, 2, source="second"))  # reversed parallel edge: pooled
    r = hodge_rank(tournament(n, edges), baseline_sims=0)
    w, y = np.array(r.weights), np.array(r.flow)
    ref = brute_force_potential(n, list(r.edges), w, y)
    assert np.allclose(r.scores, ref)
    e01 = r.edges.index((0, 1))
    # pooled counts: wins_0 = e01.wins_i + 2, wins_1 = e01.wins_j + 5
    w0, w1 = edges[0].wins_i + 2, edges[0].wins_j + 5
    assert r.weights[e01] == w0 + w1 and r.flow[e01] == pytest.approx(np.log((w1 + .5) / (w0 + .5)))
    # orthogonal decomposition in the w-inner product, components sum to the flow
    g, c, h = (np.array(x) for x in (r.gradient, r.curl, r.harmonic))
    assert np.allclose(g + c + h, y)
    for u, v in ((g, c), (g, h), (c, h)):
        assert abs(np.sum(w * u * v)) < 1e-8
    assert r.gradient_fraction + r.curl_fraction + r.harmonic_fraction == pytest.approx(1.0)


def test_pure_cycle_on_a_triangle_is_curl_and_on_a_square_is_harmonic():
    tri = hodge_rank(tournament(3, [EdgeObs(0, 1, 0, 8), EdgeObs(1, 2, 0, 8), EdgeObs(2, 0, 0, 8)]),
                     baseline_sims=0)
    assert tri.curl_fraction == pytest.approx(1.0) and tri.gradient_fraction < 1e-12
    assert np.allclose(tri.scores, 0)
    sq = hodge_rank(tournament(4, [EdgeObs(0, 1, 0, 8), EdgeObs(1, 2, 0, 8), EdgeObs(2, 3, 0, 8),
                                   EdgeObs(3, 0, 0, 8)]), baseline_sims=0)
    assert sq.n_triangles == 0 and sq.harmonic_fraction == pytest.approx(1.0)


def test_transitive_logodds_flow_is_pure_gradient():
    s_true = np.array([0.0, 0.7, 1.5, 2.0])
    edges = []
    for i, j in itertools.combinations(range(4), 2):
        # exact log-odds counts: (wins_j + 1/2) / (wins_i + 1/2) = exp(s_j - s_i)
        wi = 10.0
        wj = (wi + 0.5) * np.exp(s_true[j] - s_true[i]) - 0.5
        edges.append(EdgeObs(i, j, wi, float(wj)))
    r = hodge_rank(tournament(4, edges), baseline_sims=0)
    assert r.gradient_fraction == pytest.approx(1.0) and r.curl_fraction < 1e-12
    assert np.allclose(r.scores, s_true - s_true.mean())
    assert r.ranking == (3, 2, 1, 0)


def test_encoding_artifact_baseline_and_source_filter():
    # Transitive Bradley-Terry counts: winrate encoding shows curl that the transitive baseline
    # explains; the measured curl sits near the baseline, not far above it.
    s_true = np.array([0.0, 1.0, 2.5, 4.0])
    edges = []
    for i, j in itertools.combinations(range(4), 2):
        p = 1 / (1 + np.exp(-(s_true[j] - s_true[i])))
        edges.append(EdgeObs(i, j, round(200 * (1 - p)), round(200 * p), source="judge"))
    edges.append(EdgeObs(0, 3, 50, 0, source="other"))
    t = tournament(4, edges)
    wr = hodge_rank(t, encoding="winrate", source="judge", baseline_sims=200)
    assert wr.curl_fraction > 1e-4
    assert wr.curl_fraction <= wr.baseline_curl_q95
    assert "transitive baseline" in str(wr)
    with pytest.raises(DataError, match="no edges from source 'nobody'"):
        hodge_rank(t, source="nobody")
    with pytest.raises(DataError, match="encoding"):
        hodge_rank(t, encoding="elo")
    lonely = hodge_rank(tournament(3, [EdgeObs(0, 1, 3, 1)]), baseline_sims=0)
    assert lonely.warnings and "no comparisons" in lonely.warnings[0]
    assert lonely.scores[2] == 0.0 and lonely.scores[0] == pytest.approx(-lonely.scores[1])
    split = hodge_rank(tournament(4, [EdgeObs(0, 1, 3, 1), EdgeObs(2, 3, 1, 3)]), baseline_sims=0)
    assert any("2 disconnected parts" in w for w in split.warnings)
    assert split.scores[0] + split.scores[1] == pytest.approx(0.0)
