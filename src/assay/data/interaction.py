"""The 2x2 interaction of a Quadruple design, estimated over seeds with a seed-cluster interval.

Reads reward scores of each Quadruple's four cells; clones of one seed are averaged first.

Example:
    >>> from assay.data.items import Lineage, Quadruple
    >>> cells = {("agree", "right"): "Yes.", ("agree", "wrong"): "Yes!",
    ...          ("disagree", "right"): "No.", ("disagree", "wrong"): "No!"}
    >>> qs = [Quadruple("Q", cells, ("stance", "user"), Lineage(f"q{i}")) for i in range(3)]
    >>> r = quadruple_interaction(qs, [[1, 2, 0, 0], [1, 3, 0, 0], [1, 2.5, 0, 0]])
    >>> r.interaction.value, r.interaction.n
    (1.5, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.data.items import Quadruple
from assay.errors import DataError
from assay.intervals import cluster_t_interval
from assay.results import Estimate, Result


@dataclass(frozen=True)
class Interaction(Result):
    """Interaction and main effects of a 2x2 design, each with a seed-cluster t interval.

    With levels ``A = (a1, a2)`` and ``B = (b1, b2)`` (sorted names, as in ``Quadruple.levels``),
    ``interaction = (s[a1,b2] - s[a2,b2]) - (s[a1,b1] - s[a2,b1])``: how much more the score
    favours ``a1`` over ``a2`` at ``b2`` than at ``b1``. For the sycophancy design
    (``agree/disagree`` x ``right/wrong``) a positive value means agreement is rewarded more
    when the user is wrong.
    """

    interaction: Estimate
    effect_a: Estimate
    effect_b: Estimate
    factors: tuple[str, str]
    levels: tuple[tuple[str, str], tuple[str, str]]
    n_items: int
    warnings: tuple[str, ...] = ()

    _headline_field = "interaction"

    def __str__(self) -> str:
        return f"{self.interaction}; {self.effect_a}; {self.effect_b}"


def _cluster_t(values: np.ndarray, clusters: Sequence[str], name: str, level: float) -> Estimate:
    # Average within seed, then a Student t interval over the k seed means (df = k - 1):
    # the seed is the independent unit (clones and mutations of one seed are not).
    order: dict[str, list[float]] = {}
    for v, c in zip(values.tolist(), clusters):
        order.setdefault(c, []).append(v)
    means = np.array([np.mean(v) for v in order.values()])
    k = means.size
    est = float(means.mean())
    if k < 2:
        return Estimate(name, est, None, k, "seeds", len(values),
                        "fewer than 2 seeds: no interval")
    note = ("every seed has the same value: the zero-width interval reflects no observed "
            "spread, not certainty") if float(means.std(ddof=1)) == 0 else None
    return Estimate(name, est, cluster_t_interval(means, level, method="seed-cluster t"), k,
                    "seeds", len(values), note)


def _scores(items: Sequence[Quadruple],
            scores: np.ndarray | Sequence[Mapping[tuple[str, str], float]]
            | Callable[[str, str], float]) -> np.ndarray:
    n = len(items)
    if callable(scores):
        out = np.empty((n, 4))
        for i, q in enumerate(items):
            for c, (key, resp) in enumerate(q.cells.items()):
                out[i, c] = float(scores(q.prompt_for(key), resp.text))
    elif n and isinstance(scores, Sequence) and isinstance(scores[0], Mapping):
        if len(scores) != n:
            raise DataError(f"quadruple_interaction: {len(scores)} score maps for {n} quadruples")
        out = np.empty((n, 4))
        for i, (q, m) in enumerate(zip(items, scores)):
            for c, key in enumerate(q.cells):
                if key not in m:
                    raise DataError(f"quadruple_interaction: scores[{i}] has no cell {key!r}")
                out[i, c] = float(m[key])
    else:
        out = np.asarray(scores, dtype=float)
        if out.shape != (n, 4):
            raise DataError(
                f"quadruple_interaction: scores must have shape ({n}, 4) in each quadruple's "
                f"cells order (a1b1, a1b2, a2b1, a2b2), got {out.shape}"
            )
    bad = np.argwhere(~np.isfinite(out))
    if bad.size:
        i, c = bad[0]
        raise DataError(
            f"quadruple_interaction: score of quadruple {i} cell {c} is {out[i, c]}; "
            "every cell needs a finite score"
        )
    return out


def quadruple_interaction(
    items: Sequence[Quadruple] | Any,
    scores: np.ndarray | Sequence[Mapping[tuple[str, str], float]] | Callable[[str, str], float],
    *,
    level: float = 0.95,
) -> Interaction:
    """Estimate the 2x2 interaction (and main effects) over a set of quadruples.

    ``scores`` is an ``(n, 4)`` array in each quadruple's ``cells`` order, a list of
    ``{(a, b): score}`` maps, or a callable ``score(prompt, response) -> float`` (called with the
    prompt the cell answers, ``Quadruple.prompt_for``). Every quadruple must share the factors
    and levels. The interval is a Student t over seed means (cluster = seed id).
    """
    its = list(items)
    if not its:
        raise DataError("quadruple_interaction: no quadruples given")
    for i, q in enumerate(its):
        if not isinstance(q, Quadruple):
            raise DataError(f"quadruple_interaction: item {i} is a {type(q).__name__}, not a "
                            "Quadruple")
        if q.factors != its[0].factors or q.levels != its[0].levels:
            raise DataError(
                f"quadruple_interaction: item {i} has factors {q.factors} levels {q.levels}, "
                f"item 0 has {its[0].factors} {its[0].levels}; split the view first"
            )
    if not 0 < level < 1:
        raise DataError(f"quadruple_interaction: level must be in (0, 1), got {level}")
    s = _scores(its, scores)
    a1b1, a1b2, a2b1, a2b2 = s.T
    seeds = [q.seed_id for q in its]
    (a1, a2), (b1, b2) = its[0].levels
    fa, fb = its[0].factors
    inter = _cluster_t((a1b2 - a2b2) - (a1b1 - a2b1), seeds,
                       f"interaction {fa}({a1}-{a2}) x {fb}({b2}-{b1})", level)
    ea = _cluster_t(((a1b1 + a1b2) - (a2b1 + a2b2)) / 2, seeds, f"{fa} {a1}-{a2}", level)
    eb = _cluster_t(((a1b2 + a2b2) - (a1b1 + a2b1)) / 2, seeds, f"{fb} {b2}-{b1}", level)
    warns = []
    if inter.n < 10:
        warns.append(f"only {inter.n} independent seeds: the interval is wide and its coverage "
                     "rests on near-normal seed means")
    return Interaction(inter, ea, eb, (fa, fb), its[0].levels, len(its), tuple(warns))
