"""holdout_size: how many paired tasks a comparison needs to detect an effect.

Sized for the test ``compare`` uses (the exact sign-flip test), with variance from pilot rows.

The per-task difference ``d_i`` has standard deviation ``sigma``; read, best first, from
``before`` and ``after`` pilot arms (the sample sd of paired differences), from ``before``
alone (within-task sampling variance, ``sigma^2 = (E[p(1-p)] + E[q(1-q)]) / k`` with
``q = p + effect``, i.e. the effect shifts every task alike), or from the binomial model at
``base``. The normal-limit power of the sign-flip test,
``Phi((sqrt(n) |mu| - z sqrt(sigma^2 + mu^2)) / sigma)``, gives a first n; below 300 tasks the
n is then checked by simulating the exact test itself on binomial data (tasks' rates drawn
from the pilot's, k samples per arm; seeded), taking the larger of the two answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.errors import MeasureError
from assay.measure.grouping import read_frame, read_runs, task_stats
from assay.measure.signflip import lattice_pvalues, min_attainable_p, tasks_for_power
from assay.results import Result

SIMULATE_BELOW = 300
SIM_REPS = 2000


@dataclass(frozen=True)
class HoldoutSize(Result):
    """Paired tasks needed for ``effect`` at ``power`` and ``alpha`` with the sign-flip test."""

    n_tasks: int
    effect: float
    power: float
    alpha: float
    sd: float
    sd_source: str
    k: int
    base: float | None
    n_normal: int
    simulated_power: float | None
    test: str = "exact sign-flip on per-task differences (as compare)"
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        sim = f", simulated power {self.simulated_power:.2f}" if self.simulated_power is not None else ""
        return (f"holdout_size: {self.n_tasks} paired tasks for delta {self.effect:+.3f} at power {self.power:.2f}, "
                f"alpha {self.alpha} (sd {self.sd:.3f} from {self.sd_source}, k={self.k}{sim})")


def _simulated_power(n: int, effect: float, k: int, rates: np.ndarray, alpha: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    p = rng.choice(rates, size=(SIM_REPS, n), replace=True)
    q = np.clip(p + effect, 0.0, 1.0)
    a = rng.binomial(k, q) - rng.binomial(k, p)
    return float(np.mean(lattice_pvalues(a) < alpha))


def holdout_size(effect: float, *, before: Any = None, after: Any = None, k: int | None = None,
                 power: float = 0.8, alpha: float = 0.05, base: float = 0.5, seed: int = 0) -> HoldoutSize:
    """Tasks needed for ``compare`` to call a pass@1 change of ``effect`` with ``power``.

    Args:
        effect: the change in pass@1 to detect (e.g. 0.05 for five points).
        before, after: pilot rows; both: sd of paired differences; ``before`` only: within-task
            variance; neither: the binomial model at ``base``.
        k: samples per task per arm in the planned comparison; default: the pilot's median, or 1.
        power: target power; alpha: the test's two-sided level.
        base: pass rate of the model path (0.5 is the worst case).
        seed: seed of the small-n simulation check.

    Example:
        >>> h = holdout_size(0.1, k=4)
        >>> h.n_tasks >= h.n_normal, h.sd_source
        (True, 'model')
    """
    if not (isinstance(effect, (int, float)) and 0 < abs(effect) < 1):
        raise MeasureError(f"effect must be a number with 0 < |effect| < 1 (a pass@1 change), got {effect!r}")
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise MeasureError(f"power and alpha must be in (0, 1), got power={power!r}, alpha={alpha!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise MeasureError(f"k must be a positive integer, got {k!r}")
    if after is not None and before is None:
        raise MeasureError("holdout_size: give before= with after= (a paired pilot), or before= alone")
    notes: list[str] = []
    warnings: list[str] = []
    mu = abs(effect)
    rates: np.ndarray
    if before is not None and after is not None:
        (fb, fa), task_ids = read_runs([before, after], argument="pilot")
        n_t = len(task_ids)
        sb = task_stats(fb.codes, fb.reward, fb.binary_mask(), n_t)
        sa = task_stats(fa.codes, fa.reward, fa.binary_mask(), n_t)
        paired = (sb.n > 0) & (sa.n > 0)
        if paired.sum() < 2:
            raise MeasureError("holdout_size: the pilot arms share fewer than 2 tasks with binary rewards")
        k_pilot = int(np.median(np.concatenate([sb.n[paired], sa.n[paired]])))
        k_eff = int(k) if k is not None else k_pilot
        d = sa.s[paired] / sa.n[paired] - sb.s[paired] / sb.n[paired]
        sd = float(d.std(ddof=1))
        if k_eff != k_pilot:
            # Rescale the sampling part of the variance from the pilot's k to the planned k.
            pb = sb.s[paired] / sb.n[paired]
            pa = sa.s[paired] / sa.n[paired]
            wb = np.mean(pb * (1 - pb)) * k_pilot / max(k_pilot - 1, 1)
            wa = np.mean(pa * (1 - pa)) * k_pilot / max(k_pilot - 1, 1)
            samp = (wb + wa)
            var = max(sd ** 2 - samp / k_pilot, 0.0) + samp / k_eff
            sd = float(np.sqrt(var))
            notes.append(f"sampling variance rescaled from the pilot's k={k_pilot} to k={k_eff}")
        source = f"paired pilot ({int(paired.sum())} tasks)"
        rates = sb.s[paired] / sb.n[paired]
        base_out = None
    elif before is not None:
        fb = read_frame(before, argument="before")
        sb = task_stats(fb.codes, fb.reward, fb.binary_mask(), fb.n_tasks)
        have = sb.n > 0
        if not have.any():
            raise MeasureError("holdout_size: before= has no binary rewards")
        k_eff = int(k) if k is not None else int(np.median(sb.n[have]))
        p = sb.s[have] / sb.n[have]
        multi = sb.n[have] >= 2
        if multi.any():
            nn, cc = sb.n[have][multi], sb.s[have][multi]
            epq = float(np.mean(cc * (nn - cc) / (nn * (nn - 1))))
        else:
            epq = float(np.mean(p) * (1 - np.mean(p)))
            notes.append("before= has one sample per task: E[p(1-p)] taken at the mean rate (conservative)")
        eq = epq + effect * (1 - 2 * float(np.mean(p))) - effect ** 2
        sd = float(np.sqrt(max(epq + max(eq, 0.0), 1e-12) / k_eff))
        source = f"before rows ({int(have.sum())} tasks)"
        rates = p
        base_out = None
    else:
        if not 0 < base < 1:
            raise MeasureError(f"base must be in (0, 1), got {base!r}")
        k_eff = int(k) if k is not None else 1
        q = min(max(base + effect, 0.0), 1.0)
        sd = float(np.sqrt((base * (1 - base) + q * (1 - q)) / k_eff))
        source = "model"
        rates = np.array([base])
        base_out = base
        notes.append(f"no pilot rows: binomial model at base {base} with k={k_eff}; pass before= for a measured sd")
    if sd <= 0:
        sd = 1e-6
        warnings.append("the pilot's per-task differences have zero spread; the n below is a lower bound")
    n_normal = tasks_for_power(effect, sd, power, alpha)
    n = n_normal
    sim = None
    if n_normal < SIMULATE_BELOW:
        rates_c = np.clip(rates, 0.0, 1.0 - mu) if effect > 0 else np.clip(rates, mu, 1.0)
        n_min = 1
        while min_attainable_p(n_min) >= alpha:
            n_min += 1
        lo, hi = max(n_min, n_normal // 2), max(n_min, n_normal)
        # Grow hi until the simulated exact test reaches the target, then bisect for the smallest n.
        while _simulated_power(hi, effect, k_eff, rates_c, alpha, seed) < power and hi < 4 * SIMULATE_BELOW:
            lo, hi = hi, hi * 2
        while lo < hi:
            mid = (lo + hi) // 2
            if _simulated_power(mid, effect, k_eff, rates_c, alpha, seed) >= power:
                hi = mid
            else:
                lo = mid + 1
        n_sim = hi
        sim = _simulated_power(n_sim, effect, k_eff, rates_c, alpha, seed)
        if source.startswith("paired"):
            n = max(n_normal, n_sim)
        else:
            n = n_sim
        notes.append(f"n checked by simulating the exact test ({SIM_REPS} draws): normal limit {n_normal}, "
                     f"simulation {n_sim}")
    return HoldoutSize(int(n), float(effect), power, alpha, sd, source, k_eff, base_out, n_normal, sim,
                       notes=tuple(notes), warnings=tuple(warnings))

