"""compare(before, after): paired per-task comparison of pass@1 and every shared marker.

Verdicts come from the exact sign-flip test's p-value, Holm-corrected across the metrics.

For each metric, each task present in both arms gives one paired difference
``d_i = after_i - before_i`` (the task's pass rate, or its mean marker value). The p-value is
the two-sided sign-flip randomization test of ``mean(d) = 0`` (:mod:`assay.measure.signflip`),
which holds its false-positive rate at any number of tasks; Holm's (1979) step-down method
controls the family-wise error when several metrics are tested. The verdict reads that
adjusted p-value only: ``better``/``worse`` when it is below ``alpha``, ``insufficient data``
when no outcome at this many paired tasks could reach ``alpha`` (5 tasks: the smallest
possible p is 0.0625), else ``no difference detected`` with a sizing line: the smallest effect
this test detects at this n with 80% power.

The interval on the delta is a paired t interval over tasks (df = T - 1) whose standard error
is floored by the within-task sampling variance (Agresti-Caffo smoothed rates for pass@1), so
it is never zero width; it is descriptive and the verdict does not read it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import lcm
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from assay.errors import MeasureError
from assay.intervals import t_bounds
from assay.measure.grouping import Frame, read_runs, task_stats
from assay.measure.signflip import SignFlip, min_attainable_p, signflip_test
from assay.results import Estimate, Interval, Result, _fmt

if TYPE_CHECKING:
    from assay.rows import RowsLike

INTERVAL_METHOD = "paired t over tasks, SE floored by within-task variance"
VERDICTS = ("better", "worse", "no difference detected", "insufficient data")


@dataclass(frozen=True)
class MetricComparison:
    """One metric's paired comparison: means, delta with interval, p-values and verdict."""

    metric: str
    before: float
    after: float
    delta: Estimate
    p_value: float
    p_adjusted: float
    test: str
    verdict: str
    n_paired: int
    n_unpaired: int
    sd: float
    detectable: float | None
    higher_is_better: bool = True

    def __str__(self) -> str:
        adj = f", Holm {_fmt(self.p_adjusted)}" if self.p_adjusted != self.p_value else ""
        return (f"{self.metric} {_fmt(self.before)} -> {_fmt(self.after)}: delta "
                f"{self.delta.value:+.3f} {self.delta.interval} ({self.n_paired} paired tasks) "
                f"p={_fmt(self.p_value, 4)}{adj}: {self.verdict}")

    def to_dict(self) -> dict[str, object]:
        from assay.results import to_plain

        return to_plain({f: getattr(self, f) for f in self.__dataclass_fields__})


@dataclass(frozen=True)
class Comparison(Result):
    """The paired comparison of two arms. ``verdict`` is the target metric's (pass@1)."""

    metrics: tuple[MetricComparison, ...]
    verdict: str
    target: str
    n_paired: int
    n_only_before: int
    n_only_after: int
    alpha: float
    correction: str
    proxy: str | None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def _headline(self) -> Estimate:
        """The target metric's (pass@1) delta, after minus before."""
        return self[self.target].delta

    def __getitem__(self, name: str) -> MetricComparison:
        for m in self.metrics:
            if m.metric == name or m.metric == f"marker:{name}":
                return m
        raise KeyError(f"no metric {name!r}; compared: {[m.metric for m in self.metrics]}")

    def __str__(self) -> str:
        return f"{self.verdict.upper()} | " + " | ".join(str(m) for m in self.metrics)

    def report(self) -> str:
        lines = [f"verdict ({self.target}): {self.verdict}"]
        lines += [f"  {m}" for m in self.metrics]
        lines.append(
            f"tasks: {self.n_paired} paired, {self.n_only_before} only before, {self.n_only_after} "
            "only after (unpaired tasks are left out); test: "
            f"{self.metrics[0].test if self.metrics else '-'}; correction: {self.correction}; "
            f"interval: {INTERVAL_METHOD}"
        )
        for m in self.metrics:
            if m.verdict == "no difference detected" and m.detectable is not None:
                lines.append(
                    f"sizing ({m.metric}): at {m.n_paired} paired tasks (sd of per-task "
                    f"differences {m.sd:.3f}) this test detects |delta| >= {m.detectable:.3f} with "
                    "80% power; use holdout_size() for the n a smaller effect needs"
                )
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values."""
    p = np.asarray(p, dtype=np.float64)
    m = len(p)
    order = np.argsort(p)
    adj = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return adj


def detectable_effect(n: int, sd: float, alpha: float = 0.05, target: float = 0.8) -> float | None:
    """Smallest |delta| the sign-flip test detects with ``target`` power at n paired tasks:
    :func:`~assay.measure.signflip.power` solved for the effect in closed form. With
    ``a = sqrt(n)``, ``z = Phi^-1(1 - alpha/2)``, ``zb = Phi^-1(target)``, power = target is
    ``a mu - zb sd = z sqrt(sd^2 + mu^2)``, a quadratic in ``mu`` whose root on that branch
    is ``sd (a zb + z sqrt(a^2 + zb^2 - z^2)) / (a^2 - z^2)``; none when ``a <= z`` (power
    never reaches the target). A root finder (scipy.optimize.brentq) gave the same to 1e-6
    (tested) but importing scipy.optimize took 0.5 s of every run's measure stage.

    Example:
        >>> round(detectable_effect(100, 0.3), 4)
        0.0864
    """
    if n < 2 or sd <= 0 or min_attainable_p(n) > alpha:
        return None
    from scipy import special

    a, z, zb = math.sqrt(n), float(special.ndtri(1 - alpha / 2)), float(special.ndtri(target))
    if a * a <= z * z or a * a + zb * zb - z * z < 0:
        return None
    mu = sd * (a * zb + z * math.sqrt(a * a + zb * zb - z * z)) / (a * a - z * z)
    # the root of the squared equation on the power = target branch (a mu - zb sd >= 0), and
    # the old search's ceiling: an effect over 1e6 is not one to size a study for
    if mu <= 0 or a * mu - zb * sd < 0 or mu > 1e6:
        return None
    return float(mu)


def _split_metric(name: str, markers: set[str]) -> str:
    if name in ("pass@1", "reward"):
        return "pass@1"
    bare = name.removeprefix("marker:")
    if bare not in markers:
        raise MeasureError(f"metric {name!r}: no marker {bare!r} in both arms; shared markers: "
                           f"{sorted(markers)}")
    return f"marker:{bare}"


def _arm_stats(frame: Frame, metric: str, n_tasks: int):
    if metric == "pass@1":
        mask = frame.binary_mask()
        return task_stats(frame.codes, frame.reward, mask, n_tasks, frame.weight, binary=True,
                          block=frame.block)
    vals = frame.markers[metric.removeprefix("marker:")]
    mask = ~np.isnan(vals)
    return task_stats(frame.codes, np.where(mask, vals, 0.0), mask, n_tasks, frame.weight,
                      block=frame.block)


class _Tested(TypedDict, total=False):
    """One metric's paired test before Holm's correction (``T`` 0: only the first three)."""

    metric: str
    T: int
    n_unpaired: int
    before: float
    after: float
    delta: Estimate
    test: SignFlip
    sd: float


def compare(before: RowsLike, after: RowsLike, *, proxy: str | None = None,
            metrics: Sequence[str] | None = None, alpha: float = 0.05,
            lower_is_better: Sequence[str] = (), level: float = 0.95,
            weights: str | tuple[object, object] | None = None, seed: int = 0) -> Comparison:
    """Is the change from ``before`` to ``after`` real? Paired by task_id, exact test, Holm.

    Args:
        before, after: graded rows of the two arms (any row-like input), ideally the same tasks.
        proxy: a marker (``"marker:name"`` or ``"name"``) that the change optimized; if it
            improves significantly while pass@1 does not, the result warns of over-optimization.
        metrics: what to compare: ``"pass@1"`` and marker names; default pass@1 and every marker
            both arms carry.
        alpha: family-wise significance level (Holm across the metrics).
        lower_is_better: markers where a decrease is ``better`` (for example a length).
        level: level of the descriptive delta intervals.
        weights: per-row weights: a marker name read in both arms, or a pair of sequences.
        seed: seed of the Monte Carlo branch of the test (used only for many non-lattice tasks).

    Example:
        >>> b = [{"task_id": f"t{i}", "reward": float(j < 2)} for i in range(12) for j in range(4)]
        >>> a = [{"task_id": f"t{i}", "reward": float(j < 3)} for i in range(12) for j in range(4)]
        >>> res = compare(b, a)
        >>> res.verdict, res["pass@1"].n_paired, round(res["pass@1"].delta.value, 2)
        ('better', 12, 0.25)
    """
    if not 0 < alpha < 1:
        raise MeasureError(f"alpha must be in (0, 1), got {alpha!r}")
    (fb, fa), task_ids = read_runs([before, after], argument="compare")
    n_tasks = len(task_ids)
    if weights is not None:
        wb, wa = (weights, weights) if isinstance(weights, str) else weights
        from assay.measure.grouping import _weights_of

        fb = replace(fb, weight=_weights_of(wb, fb.n_rows, fb.markers, "before"))
        fa = replace(fa, weight=_weights_of(wa, fa.n_rows, fa.markers, "after"))
    shared = set(fb.markers) & set(fa.markers)
    if metrics is None:
        names = ["pass@1"] + [f"marker:{m}" for m in sorted(shared)]
    else:
        names = []
        for m in metrics:
            nm = _split_metric(m, shared)
            if nm not in names:
                names.append(nm)
    proxy_name = None
    if proxy is not None:
        proxy_name = _split_metric(proxy, shared)
        if proxy_name == "pass@1":
            raise MeasureError("proxy: the proxy is a marker the change optimized, not pass@1 (the "
                               "target)")
        if proxy_name not in names:
            names.append(proxy_name)
    lower = {f"marker:{x.removeprefix('marker:')}" for x in lower_is_better}

    notes: list[str] = []
    warnings: list[str] = []
    for label, f in (("before", fb), ("after", fa)):
        c = f.counts()
        if c["partial"] or c["unjudged"]:
            notes.append(f"{label}: {c['partial']} partial and {c['unjudged']} unjudged rows are "
                         "not in pass@1")
    present_b = np.bincount(fb.codes, minlength=n_tasks) > 0
    present_a = np.bincount(fa.codes, minlength=n_tasks) > 0
    n_only_b = int((present_b & ~present_a).sum())
    n_only_a = int((present_a & ~present_b).sum())
    if n_only_b or n_only_a:
        notes.append(f"{n_only_b} tasks only before and {n_only_a} only after are not compared (no "
                     "pair)")

    raw: list[_Tested] = []
    for name in names:
        sb, sa = _arm_stats(fb, name, n_tasks), _arm_stats(fa, name, n_tasks)
        paired = sb.present & sa.present
        T = int(paired.sum())
        n_unpaired = int((sb.present ^ sa.present).sum())
        if name == "pass@1" and (sb.n.sum() == 0 or sa.n.sum() == 0):
            raise MeasureError("compare: an arm has no binary reward; grade both arms first")
        if T == 0:
            raw.append(_Tested(metric=name, T=0, n_unpaired=n_unpaired))
            continue
        mb, ma = sb.means()[paired], sa.means()[paired]
        d = ma - mb
        lattice = None
        if name == "pass@1" and fb.weight is None and fa.weight is None:
            ks = np.unique(np.concatenate([sb.rows[paired], sa.rows[paired]]).astype(np.int64))
            L = 1
            for kk in ks[:64]:
                L = lcm(L, int(kk))
            lattice = L if len(ks) <= 64 and L <= 4096 else None
        test = signflip_test(d, lattice=lattice, seed=seed)
        # Within-task sampling variance of each difference: the floor of the standard error.
        if name == "pass@1":
            pb = (sb.s[paired] + 1) / (sb.n[paired] + 2)
            pa_ = (sa.s[paired] + 1) / (sa.n[paired] + 2)
            v = pb * (1 - pb) / sb.n[paired] + pa_ * (1 - pa_) / sa.n[paired]
        else:
            wb_, wa_ = sb.within_var()[paired], sa.within_var()[paired]
            v = np.nan_to_num(wb_) / sb.n[paired] + np.nan_to_num(wa_) / sa.n[paired]
        sd = float(d.std(ddof=1)) if T > 1 else 0.0
        se = max(sd / np.sqrt(T), float(np.sqrt(v.sum()) / T))
        delta = float(d.mean())
        lo, hi = t_bounds(delta, se, max(T - 1, 1), level)
        if name == "pass@1":
            lo, hi = max(lo, -1.0), min(hi, 1.0)
        rows_used = int(sb.rows[paired].sum() + sa.rows[paired].sum())
        est = Estimate(f"delta {name}", delta, Interval(lo, hi, level, INTERVAL_METHOD), T, "tasks",
                       rows_used)
        raw.append(_Tested(metric=name, T=T, n_unpaired=n_unpaired, before=float(mb.mean()),
                        after=float(ma.mean()), delta=est, test=test,
                        sd=max(sd, float(np.sqrt(v.mean())))))

    tested = [r for r in raw if r["T"] > 0]
    adj = _holm(np.array([r["test"].p_value for r in tested])) if tested else np.array([])
    out: list[MetricComparison] = []
    j = 0
    for r in raw:
        name = r["metric"]
        hib = name not in lower
        if r["T"] == 0:
            nan = float("nan")
            out.append(MetricComparison(name, nan, nan, Estimate(f"delta {name}", nan, None, 0),
                                        nan, nan, "-", "insufficient data", 0, r["n_unpaired"],
                                        nan, None, hib))
            continue
        p, pa_adj = r["test"].p_value, float(adj[j])
        j += 1
        delta = r["delta"].value
        if min_attainable_p(r["T"]) >= alpha:
            verdict = "insufficient data"
        elif pa_adj < alpha:
            verdict = "better" if (delta > 0) == hib else "worse"
        else:
            verdict = "no difference detected"
        det = (detectable_effect(r["T"], r["sd"], alpha) if verdict == "no difference detected"
               else None)
        out.append(MetricComparison(name, r["before"], r["after"], r["delta"], p, pa_adj,
                                    r["test"].method, verdict, r["T"], r["n_unpaired"], r["sd"],
                                    det, hib))
    by_name = {m.metric: m for m in out}
    target = "pass@1" if "pass@1" in by_name else out[0].metric
    verdict = by_name[target].verdict
    if verdict == "insufficient data":
        T = by_name[target].n_paired
        warnings.append(
            f"{T} paired tasks: no outcome could reach p < {alpha} with the exact sign-flip test "
            f"(smallest possible p {min_attainable_p(T):.4f}); compare on more tasks"
        )
    if len(tested) > 1:
        notes.append(f"{len(tested)} metrics tested: p-values Holm-adjusted for a family-wise "
                     f"alpha of {alpha}")
    if proxy_name is not None:
        pm = by_name[proxy_name]
        if pm.verdict == "better" and by_name[target].verdict != "better":
            warnings.append(
                f"over-optimization: the proxy {proxy_name} improved ({pm.delta.value:+.3f}, Holm "
                f"p {pm.p_adjusted:.4f}) while {target} did not ({by_name[target].verdict}); the "
                "change may game the proxy rather than improve the target"
            )
        else:
            notes.append(f"proxy check: {proxy_name} {pm.verdict}, {target} "
                         f"{by_name[target].verdict}: no over-optimization signal")
    return Comparison(tuple(out), verdict, target, int((present_a & present_b).sum()), n_only_b,
                      n_only_a, alpha, "Holm" if len(tested) > 1 else "none (one metric)",
                      proxy_name, tuple(notes), tuple(warnings))
