"""Lineage of a preference item (seed, builder, mutation ops, content hash) and sample sizes.

The effective-sample-size functions here count independent seeds, not rows; see ``effective_n``.

Example:
    >>> lin = Lineage("s-1", "hand", (), None)
    >>> lin.with_op("swap", ["pair", "p", "b", "a", "x"]).ops
    ('swap',)
    >>> effective_n(["a", "b", "c"] + ["d"] * 97)           # independent seeds
    4.0
    >>> round(effective_n(["a", "b", "c"] + ["d"] * 97, kind="kish_rows"), 3)
    1.062
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from assay.errors import DataError
from assay.hashing import content_hash

#: The named effective-n variants :func:`effective_n` computes.
EFFECTIVE_N_KINDS = ("seeds", "kish_rows", "design", "weighted", "rows")


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where one item came from: the seed it descends from, who built it, how it was mutated.

    ``seed_id`` is the unit of independence (clones and mutations of one seed count once);
    ``builder_id`` names the builder; ``ops`` is the ordered tuple of mutation operations (empty
    for an unmutated seed); ``content_hash`` is the ``ch:`` id of the item's payload, stamped by
    the item at construction when left ``None`` and checked against the payload otherwise.

    Example:
        >>> Lineage("s-1").seed_id, Lineage("s-1").ops
        ('s-1', ())
    """

    seed_id: str
    builder_id: str = "unknown"
    ops: tuple[str, ...] = ()
    content_hash: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.seed_id, str) or not self.seed_id.strip():
            raise DataError(
                f"lineage.seed_id must be a non-empty string, got {self.seed_id!r}; every item "
                "needs the id of the seed it descends from (use a unique id per hand-written item)"
            )
        if not isinstance(self.builder_id, str) or not self.builder_id:
            raise DataError(
                f"lineage.builder_id must be a non-empty string (seed {self.seed_id!r}), "
                f"got {self.builder_id!r}"
            )
        ops = self.ops
        if isinstance(ops, str) or not isinstance(ops, (tuple, list)):
            raise DataError(
                f"lineage.ops must be a tuple of op names (seed {self.seed_id!r}), got {ops!r}"
            )
        for i, op in enumerate(ops):
            if not isinstance(op, str) or not op:
                raise DataError(
                    f"lineage.ops[{i}] must be a non-empty string (seed {self.seed_id!r}), got "
                    f"{op!r}"
                )
        if type(ops) is not tuple:
            object.__setattr__(self, "ops", tuple(ops))
        ch = self.content_hash
        if ch is not None and (not isinstance(ch, str) or not ch.startswith("ch:")):
            raise DataError(
                f"lineage.content_hash must be a 'ch:' id or None (seed {self.seed_id!r}), got "
                f"{ch!r}"
            )

    def with_op(self, op: str, content: object) -> Lineage:
        """A new lineage with ``op`` appended and the content hash of the mutated ``content``.

        The seed id is kept, so a mutation never adds an independent unit. ``content`` is an item
        or its plain payload (``item.__assay_content__()``).

        Example:
            >>> a = Lineage("s-1", "b", (), None).with_op("typo", "text")
            >>> a.seed_id, a.ops, a.content_hash[:3]
            ('s-1', ('typo',), 'ch:')
        """
        if not isinstance(op, str) or not op:
            raise DataError(f"with_op: op must be a non-empty string (seed {self.seed_id!r})")
        return Lineage(self.seed_id, self.builder_id, (*self.ops, op), content_hash(content, "ch"))

    def to_dict(self) -> dict[str, object]:
        return {
            "seed_id": self.seed_id,
            "builder_id": self.builder_id,
            "ops": list(self.ops),
            "content_hash": self.content_hash,
        }


def seed_multiplicities(seed_ids: Iterable[str]) -> np.ndarray:
    """Rows per distinct seed, in first-seen order.

    Example:
        >>> seed_multiplicities(["a", "b", "a"]).tolist()
        [2, 1]
    """
    return np.fromiter(Counter(seed_ids).values(), dtype=np.int64)


def kish_ess(weights: Sequence[float] | np.ndarray) -> float:
    """Kish's effective sample size of a weighted mean: ``(sum w)^2 / sum w^2``.

    Kish (1965), *Survey Sampling*, eq. 11.7.5. For weights ``w_i`` on independent rows it is the
    n of an unweighted sample with the same variance of the mean. Weights must be finite and
    non-negative with a positive sum.

    Example:
        >>> kish_ess([1, 1, 1, 1])
        4.0
        >>> round(kish_ess([1, 1, 1, 97]), 3)
        1.062
    """
    w = np.asarray(weights, dtype=float)
    if w.size == 0:
        return 0.0
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise DataError("kish_ess: weights must be finite and non-negative")
    s = float(w.sum())
    if s <= 0:
        raise DataError("kish_ess: weights must have a positive sum")
    return s * s / float(np.dot(w, w))


def effective_n(
    seed_ids: Sequence[str],
    *,
    kind: str = "seeds",
    weights: Sequence[float] | np.ndarray | None = None,
    icc: float = 1.0,
) -> float:
    """Effective sample size of a collection of items, by name (``kind``).

    Let the items come from ``k`` distinct seeds with ``m_1..m_k`` rows each, ``M = sum m_s``.

    - ``"seeds"`` (default): ``k``, the number of independent seeds. This is the n of any
      statistic that treats the seed as its unit (seed-cluster intervals, collapse-then-average).
      ``[1, 1, 1, 97]`` rows over 4 seeds is 4 independent seeds.
    - ``"kish_rows"``: ``M^2 / sum m_s^2``, Kish's formula over seed multiplicities. It is the
      effective n of a *row-weighted* mean when clones of one seed are perfectly correlated:
      for ``[1, 1, 1, 97]`` it is 1.06, because the 97 clones dominate a per-row average. It is not
      the number of independent seeds.
    - ``"design"``: ``M / deff`` with the Kish design effect for unequal clusters
      ``deff = 1 + (sum m_s^2 / M - 1) * icc`` (Kish 1965, sec. 5.4; ``icc`` is the
      intra-seed correlation; ``icc=1`` equals ``kish_rows``, ``icc=0`` gives ``M``).
    - ``"weighted"``: ``(sum w)^2 / sum w^2`` over per-item ``weights`` (for example the weights a
      ``collapse_duplicates`` returned): the weighted ESS of a weighted mean over independent rows.
    - ``"rows"``: ``M``, the raw row count (for reference only).

    Example:
        >>> effective_n(["a"] * 40)
        1.0
        >>> effective_n(["a", "b"], kind="weighted", weights=[1, 3])
        1.6
    """
    if kind not in EFFECTIVE_N_KINDS:
        raise DataError(f"effective_n: unknown kind {kind!r}; choose one of {EFFECTIVE_N_KINDS}")
    if kind == "rows":
        return float(len(seed_ids))
    if kind == "weighted":
        if weights is None:
            raise DataError(
                "effective_n(kind='weighted') needs weights (e.g. from collapse_duplicates); "
                "a view without weights has equal weights, so its weighted ESS is its row count"
            )
        if len(weights) != len(seed_ids):
            raise DataError(
                f"effective_n: {len(weights)} weights for {len(seed_ids)} items; give one per item"
            )
        return kish_ess(weights)
    if len(seed_ids) == 0:
        return 0.0
    m = seed_multiplicities(seed_ids)
    if kind == "seeds":
        return float(m.size)
    total = float(m.sum())
    sq = float(np.dot(m, m))
    if kind == "kish_rows":
        return total * total / sq
    if not (isinstance(icc, (int, float)) and math.isfinite(icc) and 0.0 <= icc <= 1.0):
        raise DataError(f"effective_n: icc must be a number in [0, 1], got {icc!r}")
    deff = 1.0 + (sq / total - 1.0) * float(icc)
    return total / deff
