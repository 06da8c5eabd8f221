"""holdout_size: how many paired tasks a comparison needs to detect an effect.

Sized for the test ``compare`` uses (the exact sign-flip test), with variance from pilot rows.

The per-task difference ``d_i`` has standard deviation ``sigma``; read, best first, from
``before`` and ``after`` pilot arms (the sample sd of paired differences), from ``before``
alone (within-task sampling variance, ``sigma^2 = (E[p(1-p)] + E[q(1-q)]) / k`` with
``q = p + effect``, i.e. the effect shifts every task alike), or from the binomial model at
``base``. The normal-limit power of the sign-flip test,
``Phi((sqrt(n) |mu| - z sqrt(sigma^2 + mu^2)) / sigma)``, gives a first n; below 100 tasks the
n is then checked by simulating the exact test itself on binomial data (tasks' true rates from a
Beta fitted to the pilot by moments, k samples per arm, the effect a uniform shift; seeded) and the
simulated n is used; with a paired pilot the larger of the two, as its measured sd may carry an
uneven effect the simulation does not model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from assay.errors import MeasureError
from assay.measure.grouping import read_frame, read_runs, task_stats
from assay.measure.signflip import lattice_pvalues, min_attainable_p, tasks_for_power
from assay.results import Estimate, Result

if TYPE_CHECKING:
    from assay.rows import RowsLike

SIMULATE_BELOW = 100
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

    def _headline(self) -> Estimate:
        """The paired tasks needed, as a count (no interval: it is a plan, not a measurement)."""
        return Estimate("paired tasks needed", float(self.n_tasks), None, self.n_tasks, "tasks",
                        note=f"delta {self.effect:+.3f} at power {self.power:.2f}, alpha "
                             f"{self.alpha}")

    def __str__(self) -> str:
        sim = (f", simulated power {self.simulated_power:.2f}" if self.simulated_power is not None
               else "")
        return (f"holdout_size: {self.n_tasks} paired tasks for delta {self.effect:+.3f} at power "
                f"{self.power:.2f}, alpha {self.alpha} (sd {self.sd:.3f} from {self.sd_source}, "
                f"k={self.k}{sim})")


def _rate_model(n: np.ndarray, c: np.ndarray) -> tuple[float, float]:
    """Beta(a, b) of the tasks' true rates by the method of moments (between-task variance as in
    eval_variance); (mean, 0) means every task at the mean rate, the conservative case when the
    pilot has one sample per task or no between-task variance."""
    rates = c / n
    m = float(rates.mean())
    multi = n >= 2
    if len(rates) < 2 or not multi.any() or not 0 < m < 1:
        return m, 0.0
    within = float(np.mean(c[multi] * (n[multi] - c[multi])
                           / (n[multi] * (n[multi] - 1)) / n[multi]))
    between = float(rates.var(ddof=1)) - within
    if between <= 0 or between >= m * (1 - m):
        return m, 0.0
    return m, m * (1 - m) / between - 1.0


def _draw_rates(rng: np.random.Generator, model: tuple[float, float],
                size: tuple[int, int]) -> np.ndarray:
    m, conc = model
    if conc <= 0:
        return np.full(size, m)
    return rng.beta(m * conc, (1 - m) * conc, size=size)


def _simulated_power(n: int, effect: float, k: int, model: tuple[float, float], alpha: float,
                     seed: int) -> float:
    rng = np.random.default_rng(seed)
    p = _draw_rates(rng, model, (SIM_REPS, n))
    p = np.clip(p, 0.0, 1.0 - effect) if effect > 0 else np.clip(p, -effect, 1.0)
    q = np.clip(p + effect, 0.0, 1.0)
    a = rng.binomial(k, q) - rng.binomial(k, p)
    return float(np.mean(lattice_pvalues(a) < alpha))


def holdout_size(effect: float, before: RowsLike | None = None,
                 after: RowsLike | None = None, *, k: int | None = None,
                 power: float = 0.8, alpha: float = 0.05, base: float = 0.5,
                 seed: int = 0) -> HoldoutSize:
    """Tasks needed for ``compare`` to call a pass@1 change of ``effect`` with ``power``.

    Args:
        effect: the change in pass@1 to detect (e.g. 0.05 for five points).
        before, after: pilot rows, passed as to :func:`assay.measure.compare` (positionally
            after ``effect``, or by name; any row-like input); both: sd of paired differences;
            ``before`` only: within-task variance; neither: the binomial model at ``base``.
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
        raise MeasureError("effect must be a number with 0 < |effect| < 1 (a pass@1 change), got "
                           f"{effect!r}")
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise MeasureError(f"power and alpha must be in (0, 1), got power={power!r}, "
                           f"alpha={alpha!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise MeasureError(f"k must be a positive integer, got {k!r}")
    if after is not None and before is None:
        raise MeasureError("holdout_size: give before= with after= (a paired pilot), or before= "
                           "alone")
    notes: list[str] = []
    warnings: list[str] = []
    model: tuple[float, float]
    if before is not None and after is not None:
        (fb, fa), task_ids = read_runs([before, after], argument="pilot", markers=False)
        n_t = len(task_ids)
        sb = task_stats(fb.codes, fb.reward, fb.binary_mask(), n_t, binary=True, block=fb.block)
        sa = task_stats(fa.codes, fa.reward, fa.binary_mask(), n_t, binary=True, block=fa.block)
        paired = (sb.n > 0) & (sa.n > 0)
        if paired.sum() < 2:
            raise MeasureError("holdout_size: the pilot arms share fewer than 2 tasks with binary "
                               "rewards")
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
        model = _rate_model(sb.n[paired], sb.s[paired])
        base_out = None
    elif before is not None:
        fb = read_frame(before, argument="before", markers=False)
        sb = task_stats(fb.codes, fb.reward, fb.binary_mask(), fb.n_tasks, binary=True,
                        block=fb.block)
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
            notes.append("before= has one sample per task: E[p(1-p)] taken at the mean rate "
                         "(conservative)")
        eq = epq + effect * (1 - 2 * float(np.mean(p))) - effect ** 2
        sd = float(np.sqrt(max(epq + max(eq, 0.0), 1e-12) / k_eff))
        source = f"before rows ({int(have.sum())} tasks)"
        model = _rate_model(sb.n[have], sb.s[have])
        if model[1] == 0:
            notes.append("simulation check draws every task at the pilot's mean rate (no "
                         "between-task variance measurable): conservative")
        base_out = None
    else:
        if not 0 < base < 1:
            raise MeasureError(f"base must be in (0, 1), got {base!r}")
        k_eff = int(k) if k is not None else 1
        q = min(max(base + effect, 0.0), 1.0)
        sd = float(np.sqrt((base * (1 - base) + q * (1 - q)) / k_eff))
        source = "model"
        model = (base, 0.0)
        base_out = base
        notes.append(f"no pilot rows: binomial model at base {base} with k={k_eff}; pass before= "
                     "for a measured sd")
    if sd <= 0:
        sd = 1e-6
        warnings.append("the pilot's per-task differences have zero spread; the n below is a lower "
                        "bound")
    n_normal = tasks_for_power(effect, sd, power, alpha)
    n = n_normal
    sim = None
    if n_normal < SIMULATE_BELOW:
        n_min = 1
        while min_attainable_p(n_min) >= alpha:
            n_min += 1
        lo, hi = max(n_min, n_normal // 2), max(n_min, n_normal)
        # Grow hi until the simulated exact test reaches the target, then bisect for the smallest n.
        while (_simulated_power(hi, effect, k_eff, model, alpha, seed) < power
               and hi < 4 * SIMULATE_BELOW):
            lo, hi = hi, hi * 2
        while lo < hi:
            mid = (lo + hi) // 2
            if _simulated_power(mid, effect, k_eff, model, alpha, seed) >= power:
                hi = mid
            else:
                lo = mid + 1
        n_sim = hi
        sim = _simulated_power(n_sim, effect, k_eff, model, alpha, seed)
        if source.startswith("paired"):
            n = max(n_normal, n_sim)
        else:
            n = n_sim
        notes.append(f"n checked by simulating the exact test ({SIM_REPS} draws): normal limit "
                     f"{n_normal}, simulation {n_sim}")
    return HoldoutSize(int(n), float(effect), power, alpha, sd, source, k_eff, base_out, n_normal,
                       sim, notes=tuple(notes), warnings=tuple(warnings))

