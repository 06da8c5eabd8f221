"""HodgeRank of a Tournament: split pairwise preference flow into gradient, curl and harmonic parts.

Weighted by comparison counts (Jiang, Lim, Yao & Ye 2011, "Statistical ranking and combinatorial
Hodge theory", Math. Programming 127).

The edge flow ``Y[i, j]`` says how strongly ``j`` beats ``i``. With ``w_ij`` comparisons on the
edge, the gradient part is the weighted least-squares fit ``Y ~ s_j - s_i`` (the global ranking
``s``); the residual splits, orthogonally in the ``w``-weighted inner product, into the *curl*
part (intransitive cycles on triangles of the comparison graph) and the *harmonic* part (cycles
that no triangle explains, e.g. around a 4-cycle).

Encoding-artifact baseline: the curl you measure depends on how wins become a flow. With the
``"winrate"`` encoding (``(wins_j - wins_i) / n``) even a perfectly transitive Bradley-Terry
population shows curl, because ``2 sigma(s_j - s_i) - 1`` is not additive along a cycle; with the
``"logodds"`` encoding (``log((wins_j + 1/2) / (wins_i + 1/2))``) a Bradley-Terry population is
an exact gradient up to sampling noise. ``baseline_curl`` is the curl fraction a transitive
Bradley-Terry model with the fitted scores and the same comparison counts produces under the same
encoding (simulated): only curl above it is evidence of intransitive preferences.

Example:
    >>> from assay.data.items import EdgeObs, Lineage, Tournament
    >>> t = Tournament("Q", ("a", "b", "c"), (EdgeObs(0, 1, 9, 1), EdgeObs(1, 2, 9, 1),
    ...                EdgeObs(0, 2, 9, 1)), Lineage("t"))
    >>> r = hodge_rank(t, baseline_sims=0)
    >>> r.ranking, round(r.gradient_fraction + r.curl_fraction + r.harmonic_fraction, 9)
    ((0, 1, 2), 1.0)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from assay.data.items import EdgeObs, Tournament
from assay.errors import DataError
from assay.results import Estimate, Result

ENCODINGS = ("logodds", "winrate")


@dataclass(frozen=True)
class HodgeRanking(Result):
    """Scores, the three flow components and their shares of the total weighted flow energy.

    ``scores[k]`` is response ``k``'s gradient potential (higher is preferred; mean 0);
    ``edges`` lists the aggregated ``(i, j)`` edges in the order of the flow arrays;
    ``*_fraction`` are ``||component||_w^2 / ||Y||_w^2`` and sum to 1.
    """

    scores: tuple[float, ...]
    ranking: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]
    weights: tuple[float, ...]
    flow: tuple[float, ...]
    gradient: tuple[float, ...]
    curl: tuple[float, ...]
    harmonic: tuple[float, ...]
    gradient_fraction: float
    curl_fraction: float
    harmonic_fraction: float
    encoding: str
    n_triangles: int
    baseline_curl: float | None
    baseline_curl_q95: float | None
    warnings: tuple[str, ...] = ()

    def _headline(self) -> Estimate:
        """The share of the flow a global ranking explains (the gradient fraction)."""
        return Estimate("gradient fraction", float(self.gradient_fraction), None, len(self.edges),
                        "edges")

    def __str__(self) -> str:
        base = ("" if self.baseline_curl is None else
                f" (transitive baseline {self.baseline_curl:.3f}, q95 "
                f"{self.baseline_curl_q95:.3f})")
        return (f"HodgeRank [{self.encoding}] ranking {list(self.ranking)}: gradient "
                f"{self.gradient_fraction:.3f}, curl {self.curl_fraction:.3f}{base}, harmonic "
                f"{self.harmonic_fraction:.3f} ({len(self.scores)} responses, {len(self.edges)} "
                f"edges, {self.n_triangles} triangles)")


def _aggregate(n: int, edges: Sequence[EdgeObs],
               source: str | None) -> dict[tuple[int, int], list[float]]:
    agg: dict[tuple[int, int], list[float]] = {}
    for e in edges:
        if source is not None and e.source != source:
            continue
        i, j, wi, wj = e.i, e.j, e.wins_i, e.wins_j
        if i > j:
            i, j, wi, wj = j, i, wj, wi
        cur = agg.setdefault((i, j), [0.0, 0.0, 0.0])
        cur[0] += wi
        cur[1] += wj
        cur[2] += e.ties
    return agg


def _components(nodes: set[int], pairs: list[tuple[int, int]]) -> int:
    parent = {v: v for v in nodes}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for i, j in pairs:
        parent[find(i)] = find(j)
    return len({find(v) for v in nodes})


def _flow(wi: np.ndarray, wj: np.ndarray, ties: np.ndarray, encoding: str) -> np.ndarray:
    # A tie counts half a win to each side.
    a, b = wi + ties / 2, wj + ties / 2
    if encoding == "logodds":
        return np.log((b + 0.5) / (a + 0.5))
    return (b - a) / (a + b)


def _decompose(n: int, pairs: list[tuple[int, int]], w: np.ndarray, y: np.ndarray,
               tris: list[tuple[int, int, int]]) -> tuple[np.ndarray, ...]:
    m = len(pairs)
    d0 = np.zeros((m, n))
    for e, (i, j) in enumerate(pairs):
        d0[e, i], d0[e, j] = -1.0, 1.0
    # Weighted least squares for the potential: min sum w (s_j - s_i - y)^2, mean(s) = 0.
    sw = np.sqrt(w)
    # The minimum-norm solution is orthogonal to the Laplacian's kernel (the indicator of each
    # connected part), so every part is already centred at 0 and isolated responses stay at 0.
    s = np.linalg.lstsq(d0 * sw[:, None], y * sw, rcond=None)[0]
    grad = d0 @ s
    resid = y - grad
    if tris:
        index = {p: k for k, p in enumerate(pairs)}
        d1 = np.zeros((len(tris), m))
        for t, (i, j, k) in enumerate(tris):
            d1[t, index[(i, j)]] = 1.0
            d1[t, index[(j, k)]] = 1.0
            d1[t, index[(i, k)]] = -1.0
        # Projection onto im(W^-1 d1^T) in the w-inner product: (d1 W^-1 d1^T) z = d1 r.
        z = np.linalg.lstsq(d1 @ (d1.T / w[:, None]), d1 @ resid, rcond=None)[0]
        curl = (d1.T @ z) / w
    else:
        curl = np.zeros(m)
    harm = resid - curl
    return s, grad, curl, harm


def hodge_rank(
    tournament: Tournament,
    *,
    encoding: str = "logodds",
    source: str | None = None,
    baseline_sims: int = 200,
    seed: int = 0,
) -> HodgeRanking:
    """HodgeRank decomposition of a tournament's comparisons (see the module docstring).

    ``source`` keeps only the edges of one annotator/judge. Parallel edges between the same two
    responses are pooled (counts add). ``baseline_sims`` Bradley-Terry simulations give the
    transitive baseline of the curl fraction (0 to skip).
    """
    if not isinstance(tournament, Tournament):
        raise DataError(f"hodge_rank needs a Tournament, got {type(tournament).__name__}")
    if encoding not in ENCODINGS:
        raise DataError(f"hodge_rank: encoding must be one of {ENCODINGS}, got {encoding!r}")
    n = len(tournament.responses)
    agg = _aggregate(n, tournament.edges, source)
    if not agg:
        raise DataError("hodge_rank: no edges"
                        f"{'' if source is None else f' from source {source!r}'}")
    pairs = sorted(agg)
    counts = np.array([agg[p] for p in pairs])
    w = counts.sum(axis=1)
    y = _flow(counts[:, 0], counts[:, 1], counts[:, 2], encoding)
    present = set(pairs)
    tris = [(i, j, k) for i, j, k in itertools.combinations(range(n), 3)
            if (i, j) in present and (j, k) in present and (i, k) in present]
    s, grad, curl, harm = _decompose(n, pairs, w, y, tris)
    total = float(np.sum(w * y * y))
    warns = []
    seen = {v for p in pairs for v in p}
    if len(seen) < n:
        warns.append(f"responses {sorted(set(range(n)) - seen)} have no comparisons; their "
                     "score is 0 by convention")
    parts = _components(seen, pairs)
    if parts > 1:
        warns.append(f"the comparison graph has {parts} disconnected parts: scores are only "
                     "comparable within a part (each part is centred at 0 separately)")
    if total == 0:
        fr: tuple[float, ...] = (0.0, 0.0, 0.0)
        warns.append("every edge is an exact tie: there is no flow to decompose")
    else:
        fr = tuple(float(np.sum(w * c * c)) / total for c in (grad, curl, harm))
    base = q95 = None
    if baseline_sims and tris:
        rng = np.random.default_rng(seed)
        i_idx = np.array([p[0] for p in pairs])
        j_idx = np.array([p[1] for p in pairs])
        # Transitive population: Bradley-Terry with the fitted potentials (on the log-odds
        # scale; for the winrate encoding, refit them on log-odds so both use the same model).
        s_bt = s if encoding == "logodds" else _decompose(
            n, pairs, w, _flow(counts[:, 0], counts[:, 1], counts[:, 2], "logodds"), tris)[0]
        p_j = 1.0 / (1.0 + np.exp(-(s_bt[j_idx] - s_bt[i_idx])))
        nn = np.maximum(np.rint(w), 1).astype(int)
        sims = []
        for _ in range(baseline_sims):
            bj = rng.binomial(nn, p_j).astype(float)
            yy = _flow(nn - bj, bj, np.zeros_like(bj), encoding)
            _, g2, c2, h2 = _decompose(n, pairs, nn.astype(float), yy, tris)
            tot = float(np.sum(nn * yy * yy))
            sims.append(float(np.sum(nn * c2 * c2)) / tot if tot > 0 else 0.0)
        base, q95 = float(np.mean(sims)), float(np.quantile(sims, 0.95))
    ranking = tuple(int(k) for k in np.argsort(-s, kind="stable"))
    return HodgeRanking(
        scores=tuple(float(x) for x in s), ranking=ranking, edges=tuple(pairs),
        weights=tuple(float(x) for x in w), flow=tuple(float(x) for x in y),
        gradient=tuple(float(x) for x in grad), curl=tuple(float(x) for x in curl),
        harmonic=tuple(float(x) for x in harm), gradient_fraction=fr[0], curl_fraction=fr[1],
        harmonic_fraction=fr[2], encoding=encoding, n_triangles=len(tris),
        baseline_curl=base, baseline_curl_q95=q95, warnings=tuple(warns),
    )
