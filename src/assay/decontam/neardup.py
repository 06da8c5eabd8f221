"""MinHash signatures for the near-duplicate rule, vectorized, and LSH lookup through datasketch.

Signatures use datasketch's own permutation family, so they are ``datasketch.LeanMinHash``
values and ``datasketch.MinHashLSH`` finds candidate pairs (Broder 1997; Leskovec et al.,
*Mining of Massive Datasets*, ch. 3, for the banding).

The permutations are datasketch's ``(a * h + b) mod (2^61 - 1)`` truncated to 32 bits, seeded
like ``datasketch.MinHash(num_perm, seed, scheme="legacy")``; only the per-shingle loop is
replaced by numpy.

Example:
    >>> import numpy as np
    >>> sig = signatures(np.array([1, 2, 3, 1, 2, 4], dtype=np.uint64) << np.uint64(32),
    ...                  np.array([0, 0, 0, 1, 1, 1]), num_perm=64)
    >>> sig.shape, 0.2 < estimate_jaccard(sig[0], sig[1]) < 0.9
    ((2, 64), True)
"""

from __future__ import annotations

import numpy as np

_MERSENNE = np.uint64((1 << 61) - 1)
_MAX_HASH = np.uint64((1 << 32) - 1)
_CHUNK = 1 << 15


def permutations(num_perm: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) pairs datasketch.MinHash(num_perm, seed, scheme="legacy") uses."""
    gen = np.random.RandomState(seed)
    pairs = [(gen.randint(1, _MERSENNE, dtype=np.uint64),
              gen.randint(0, _MERSENNE, dtype=np.uint64))
             for _ in range(num_perm)]
    ab = np.array(pairs, dtype=np.uint64).T
    return ab[0].copy(), ab[1].copy()


def signatures(shingles: np.ndarray, owner: np.ndarray, *, num_perm: int = 128,
               seed: int = 1) -> np.ndarray:
    """One MinHash signature per distinct ``owner`` (ascending, contiguous runs), shape
    (n_owners, num_perm), from 64-bit shingle hashes (their high 32 bits feed the permutations,
    as datasketch's 32-bit hash of a shingle would)."""
    if len(shingles) == 0:
        return np.zeros((0, num_perm), dtype=np.uint64)
    a, b = permutations(num_perm, seed)
    hv = (shingles >> np.uint64(32))[:, None]
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    out = np.full((len(starts), num_perm), _MAX_HASH, dtype=np.uint64)
    # Chunks of whole owners keep the (shingles x perms) matrix small.
    bounds = np.r_[starts, len(shingles)]
    i = 0
    while i < len(starts):
        j = int(np.searchsorted(bounds, bounds[i] + _CHUNK, side="right")) - 1
        j = max(j, i + 1)
        lo, hi = bounds[i], bounds[j]
        phv = (hv[lo:hi] * a + b) % _MERSENNE
        phv &= _MAX_HASH
        out[i:j] = np.minimum.reduceat(phv, bounds[i:j] - lo, axis=0)
        i = j
    return out


def estimate_jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of equal signature positions: the MinHash estimate of Jaccard similarity."""
    return float(np.mean(x == y))


def lean(sig: np.ndarray, seed: int = 1):  # -> datasketch.LeanMinHash
    """A datasketch LeanMinHash holding ``sig``."""
    from datasketch import LeanMinHash

    return LeanMinHash(seed=seed, hashvalues=np.asarray(sig, dtype=np.uint64), scheme="legacy")


def lsh_candidates(corpus_sigs: np.ndarray, query_sigs: np.ndarray, *, threshold: float,
                   seed: int = 1) -> list[list[int]]:
    """For each query signature, the corpus rows datasketch.MinHashLSH returns as candidates."""
    if len(corpus_sigs) == 0 or len(query_sigs) == 0:
        return [[] for _ in range(len(query_sigs))]
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=corpus_sigs.shape[1])
    with lsh.insertion_session() as session:
        for i, s in enumerate(corpus_sigs):
            session.insert(i, lean(s, seed), check_duplication=False)
    return [sorted(lsh.query(lean(q, seed))) for q in query_sigs]
