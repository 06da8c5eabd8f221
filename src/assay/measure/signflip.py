"""The paired sign-flip randomization test on per-task differences, and its power.

Exact where it can be (lattice data by characteristic function, few tasks by enumeration).

Under the null hypothesis that the two arms are exchangeable within each task, each per-task
difference ``d_i`` is as likely to be ``+|d_i|`` as ``-|d_i|``; the p-value is the share of the
``2^m`` sign assignments whose ``|sum|`` reaches the observed one (Fisher 1935; Pitman 1937).
This controls the false-positive rate at any number of tasks by construction, with no
distributional assumption; with few tasks it simply cannot reach small p-values (5 tasks: the
smallest two-sided p is 2/32 = 0.0625), which ``compare`` reports as "insufficient data".

How the null distribution is computed:
- *lattice*: when ``d_i * L`` are integers (pass rates with k samples per task: L = k), the
  distribution of ``sum(eps_i * a_i)`` is exact: its characteristic function is
  ``prod_i cos(theta * a_i)``, inverted by FFT; batched over many samples for simulation.
  Used up to 20,000 non-zero differences.
- *enumeration*: up to 20 non-zero differences, every sign pattern.
- *Monte Carlo*: up to 1000 non-zero differences, 9,999 random sign patterns (seeded);
  ``p = (1 + hits) / (1 + B)`` is a valid p-value (Phipson & Smyth 2010).
- *normal*: beyond that, the randomization distribution's normal limit
  ``z = |sum d| / sqrt(sum d^2)`` (its exact variance).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np
from scipy import special

MAX_ENUMERATE = 20
MAX_MONTE_CARLO = 1000
MONTE_CARLO_DRAWS = 9_999
MAX_FFT = 1 << 22
MAX_EXACT_LATTICE = 20_000  # beyond, the normal limit is exact to many digits and far cheaper


@dataclass(frozen=True)
class SignFlip:
    """A sign-flip test result: two-sided p-value, how it was computed, and the smallest
    p-value this many non-zero differences could ever give."""

    p_value: float
    method: str
    n_nonzero: int
    min_p: float


def min_attainable_p(m: int) -> float:
    """Smallest two-sided exact sign-flip p-value with ``m`` non-zero differences."""
    return 1.0 if m <= 0 else min(1.0, 2.0 ** (1 - m))


def lattice_pvalues(a: np.ndarray) -> np.ndarray:
    """Exact two-sided sign-flip p-values for each row of an integer matrix ``a`` (R x T).

    Example:
        >>> lattice_pvalues(np.array([[1, 1, 1, 1, 1], [1, -1, 0, 0, 0]])).tolist()
        [0.0625, 1.0]
    """
    a = np.atleast_2d(np.asarray(a, dtype=np.int64))
    R = a.shape[0]
    mag = np.abs(a)
    total = mag.sum(axis=1)
    obs = np.abs(a.sum(axis=1))
    M = int(total.max()) if R else 0
    out = np.ones(R)
    if M == 0:
        return out
    G = 1 << int(np.ceil(np.log2(2 * M + 2)))
    V = int(mag.max())
    # R x V
    counts = np.stack([(mag == v).sum(axis=1) for v in range(1, V + 1)], axis=1).astype(np.float64)
    theta = 2.0 * np.pi * np.arange(G // 2 + 1) / G
    cos = np.cos(np.outer(np.arange(1, V + 1), theta))  # V x (G/2 + 1)
    # prod_v cos^c_v as exp(counts @ log|cos|) with the sign from the parity of negative factors:
    # two matrix products instead of R x G x V powers.
    with np.errstate(divide="ignore"):
        log_abs = np.log(np.abs(cos))
    log_abs = np.maximum(log_abs, -745.0)
    negative = (cos < 0).astype(np.float64)
    phi = np.exp(counts @ log_abs)
    odd = np.mod(counts @ negative, 2.0) > 0.5
    phi[odd] *= -1.0
    pmf = np.fft.irfft(phi, n=G, axis=1)[:, : M + 1]  # P(S = s) for s = 0..M
    tail = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]  # P(S >= s)
    p = 2.0 * tail[np.arange(R), np.minimum(obs, M)]
    m = (mag > 0).sum(axis=1)
    floor = np.where(m > 0, 2.0 ** (1 - m.astype(np.float64)), 1.0)
    p = np.clip(p, floor, 1.0)
    return np.where(obs == 0, 1.0, p)


def _lattice_scale(d: np.ndarray, lattice: int | None) -> np.ndarray | None:
    if lattice is None or lattice < 1:
        return None
    a = d * lattice
    r = np.rint(a)
    if not np.all(np.abs(a - r) < 1e-9):
        return None
    r = r.astype(np.int64)
    g = 0
    for v in np.unique(np.abs(r[r != 0]))[:64]:
        g = gcd(g, int(v))
    if g > 1 and np.all(r % g == 0):
        r //= g
    if np.abs(r).sum() * 2 + 2 > MAX_FFT:
        return None
    return r


def signflip_test(d: np.ndarray, *, lattice: int | None = None, seed: int = 0) -> SignFlip:
    """Two-sided sign-flip test of ``mean(d) == 0`` on per-task differences ``d``.

    Args:
        d: per-task paired differences (after - before).
        lattice: an integer L such that every ``d * L`` is an integer (k for pass rates over
            k samples per task), enabling the exact FFT computation at any number of tasks.
        seed: seed of the Monte Carlo branch.

    Example:
        >>> round(signflip_test(np.array([0.25, 0.5, 0.25, 0.75, 0.5, 0.25]), lattice=4).p_value, 6)
        0.03125
    """
    d = np.asarray(d, dtype=np.float64)
    nz = d[d != 0]
    m = len(nz)
    minp = min_attainable_p(m)
    if m == 0:
        return SignFlip(1.0, "exact (all differences zero)", 0, 1.0)
    a = _lattice_scale(nz, lattice) if m <= MAX_EXACT_LATTICE else None
    if a is not None:
        return SignFlip(float(lattice_pvalues(a[None, :])[0]), "exact sign-flip (lattice)", m, minp)
    obs = abs(nz.sum())
    tol = 1e-12 * (np.abs(nz).sum() + 1.0)
    if m <= MAX_ENUMERATE:
        mag = np.abs(nz)
        n_pat = 1 << (m - 1)  # the first sign fixed: |sum| is symmetric under a global flip
        hits = 0
        bits = np.arange(m - 1, dtype=np.int64)
        chunk = 1 << 16
        for start in range(0, n_pat, chunk):
            idx = np.arange(start, min(n_pat, start + chunk), dtype=np.int64)
            signs = 1.0 - 2.0 * ((idx[:, None] >> bits[None, :]) & 1)
            s = np.abs(mag[0] + signs @ mag[1:])
            hits += int((s >= obs - tol).sum())
        return SignFlip(hits / n_pat, "exact sign-flip (enumeration)", m, minp)
    if m <= MAX_MONTE_CARLO:
        rng = np.random.default_rng(seed)
        hits = 0
        B = MONTE_CARLO_DRAWS
        chunk = max(1, 2_000_000 // m)
        done = 0
        while done < B:
            b = min(chunk, B - done)
            flips = rng.integers(0, 2, size=(b, m), dtype=np.int8) * 2 - 1
            hits += int((np.abs(flips @ nz) >= obs - tol).sum())
            done += b
        return SignFlip((1 + hits) / (1 + B), f"Monte Carlo sign-flip ({B} draws, seed {seed})", m,
                        max(minp, 1 / (1 + B)))
    z = obs / np.sqrt(np.sum(nz * nz))
    return SignFlip(float(min(1.0, 2 * special.ndtr(-z))), "sign-flip, normal limit", m, minp)


def power(n: float, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Approximate power of the two-sided sign-flip test of the mean with n paired tasks.

    The test rejects when ``|sum d| >= z sqrt(sum d^2)``; under a mean shift ``mu`` with per-task
    sd ``sigma``, ``sum d ~ N(n mu, n sigma^2)`` and ``sum d^2 ~ n (sigma^2 + mu^2)``, so
    power = ``Phi((sqrt(n) |mu| - z sqrt(sigma^2 + mu^2)) / sigma)``. The ``mu^2`` term is what
    the randomization null adds over a t-test. Exact tests are discrete, so with few tasks the
    real power can only be lower: ``n`` below the enumeration floor has power 0.

    Example:
        >>> round(power(100, 0.1, 0.3), 2)
        0.9
    """
    if n < 1 or sd <= 0 or effect == 0:
        return float(alpha if effect == 0 else (1.0 if sd <= 0 else 0.0))
    if min_attainable_p(int(n)) > alpha:
        return 0.0
    z = special.ndtri(1 - alpha / 2)
    mu = abs(effect)
    return float(special.ndtr((np.sqrt(n) * mu - z * np.sqrt(sd * sd + mu * mu)) / sd))


def tasks_for_power(effect: float, sd: float, target: float = 0.8, alpha: float = 0.05) -> int:
    """Smallest number of paired tasks at which :func:`power` reaches ``target``.

    Example:
        >>> tasks_for_power(0.1, 0.3)
        77
    """
    mu = abs(effect)
    if mu == 0:
        raise ValueError("effect must be non-zero")
    z = special.ndtri(1 - alpha / 2)
    zb = special.ndtri(target)
    n = int(np.ceil(((z * np.sqrt(sd * sd + mu * mu) + zb * sd) / mu) ** 2)) if sd > 0 else 1
    n_min = 1
    while min_attainable_p(n_min) > alpha:
        n_min += 1
    n = max(n, n_min)
    while power(n, effect, sd, alpha) < target:
        n += 1
    return n
