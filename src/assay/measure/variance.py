"""eval_variance: where the uncertainty of an eval score comes from, and what shrinks it.

Between-task and within-task (sampling) variance from one run, run-to-run spread from several.

Miller (2024), "Adding Error Bars to Evals" (arXiv:2411.00640), section 2-3: with T tasks and
K samples per task, the score is the mean of per-task means ``x_i``, and

    Var(score) = (sigma_b^2 + sigma_w^2 / K) / T

where ``sigma_b^2`` is the variance of the tasks' true means (between-task) and
``sigma_w^2 = E[Var(reward | task)]`` the sampling variance of one row within a task. Both are
estimated by the method of moments from a single run with K >= 2: ``sigma_w^2`` is the mean
unbiased within-task variance (for binary rewards ``c(n - c) / (n (n - 1))``), and
``sigma_b^2 = var(x_i) - mean(sigma_w_i^2 / K_i)``, truncated at 0. More samples per task only
shrink the second term (floor ``sqrt(sigma_b^2 / T)``); more tasks shrink both.

With several runs of the same tasks, the rows are pooled per task for the decomposition, and
the observed spread of the run means is compared with what sampling alone predicts for a
re-run of fixed tasks, ``sqrt(mean_i(sigma_w_i^2 / K_i) / T)``. Re-run noise is therefore
already inside the interval over tasks: it is reported, never added as a second hurdle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import special

from assay.errors import MeasureError
from assay.intervals import cluster_t_interval, task_interval
from assay.measure.grouping import read_runs, task_stats
from assay.results import Estimate, Result

if TYPE_CHECKING:
    from assay.rows import RowsLike


@dataclass(frozen=True)
class VarianceComponents:
    """The decomposition of one metric (pass@1 or a marker)."""

    metric: str
    mean: Estimate
    n_tasks: int
    samples_per_task: float
    between: float
    within: float
    se: float
    se_double_samples: float
    se_double_tasks: float
    se_floor_samples: float
    sampling_share: float
    run_means: tuple[float, ...]
    run_sd: float | None
    run_sd_expected: float | None
    run_spread_p: float | None
    #: the empirical se of the mean over tasks (sd of task means / sqrt(T)): pass_at's ``se``
    se_tasks: float | None = None

    def __str__(self) -> str:
        s = (f"{self.mean}: se {self.se:.4f} = sqrt((between {self.between:.4f} + within "
             f"{self.within:.4f}/{self.samples_per_task:.3g}) / {self.n_tasks}); x2 samples -> se "
             f"{self.se_double_samples:.4f}, x2 tasks -> se {self.se_double_tasks:.4f}")
        if self.run_sd is not None:
            s += (f"; run sd {self.run_sd:.4f} over {len(self.run_means)} runs (sampling predicts "
                  f"{self.run_sd_expected:.4f})")
        return s

    def to_dict(self) -> dict[str, object]:
        from assay.results import to_plain

        return to_plain({f: getattr(self, f) for f in self.__dataclass_fields__})


@dataclass(frozen=True)
class EvalVariance(Result):
    """Variance decomposition per metric; ``components[0]`` is pass@1."""

    components: tuple[VarianceComponents, ...]
    n_runs: int
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def _headline(self) -> Estimate:
        """pass@1's mean with its interval (``se`` and the components are in ``components[0]``)."""
        return self.components[0].mean

    def __getitem__(self, name: str) -> VarianceComponents:
        for c in self.components:
            if c.metric in (name, f"marker:{name}"):
                return c
        raise KeyError(f"no metric {name!r}; decomposed: {[c.metric for c in self.components]}")

    def __str__(self) -> str:
        return " | ".join(str(c) for c in self.components)

    def report(self) -> str:
        lines = ["eval_variance (Miller 2024, arXiv:2411.00640): "
                 "Var(score) = (between + within / K) / T"]
        for c in self.components:
            lines.append(f"  {c}")
            lines.append(
                f"    {100 * c.sampling_share:.0f}% of the score's variance is sampling noise; "
                "more samples per task can shrink se by at most "
                f"{100 * (1 - c.se_floor_samples / c.se) if c.se > 0 else 0:.0f}%, doubling the "
                "tasks shrinks it by "
                f"{100 * (1 - c.se_double_tasks / c.se) if c.se > 0 else 0:.0f}%"
            )
            which = se_which(c)
            if which:
                lines.append(f"    {which}")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def se_which(c: VarianceComponents) -> str | None:
    """Which standard error of this mean to quote, when the model's differs from the empirical one.

    The model's ``se`` is ``sqrt((between + within / K) / T)`` with ``between`` truncated at 0;
    the empirical se over tasks (sd of the task means / sqrt(T), pass_at's ``se`` and the basis of
    every interval) is the same number unless the truncation (or unequal samples per task)
    moves it. One estimate has one se: say which.
    """
    if c.se_tasks is None or not np.isfinite(c.se) or abs(c.se - c.se_tasks) <= 5e-5:
        return None
    why = ("the between-task estimate was truncated at 0" if c.between == 0.0
           else "tasks have unequal numbers of samples")
    return (f"se of the mean: {c.se_tasks:.4f} over tasks (as pass_at reports it and its interval "
            f"uses); the {c.se:.4f} above is the components' model se ({why}), meant for planning "
            "how more samples or tasks change it, not for this estimate's interval")


def _decompose(metric: str, per_run: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]],
               n_tasks: int, level: float, binary: bool,
               notes: list[str]) -> VarianceComponents | None:
    """per_run: (codes, values, mask, block) for each run; the runs' rows are pooled per task."""
    run_stats = [task_stats(c, v, m, n_tasks, binary=binary, block=b) for c, v, m, b in per_run]
    st = run_stats[0]
    for extra in run_stats[1:]:
        st = st + extra
    present = st.n > 0
    T = int(present.sum())
    if T == 0:
        return None
    n = st.n[present]
    x = st.s[present] / n
    wv = st.within_var()[present]
    has_w = ~np.isnan(wv)
    floor = float(np.mean(1.0 / n))
    if binary:
        interval = task_interval(x, floor=floor, level=level)
    else:  # tasks are the clusters: a t interval over the per-task means
        interval = cluster_t_interval(x, level, method="t over tasks")
    mean = Estimate(metric, float(x.mean()), interval, T, "tasks", int(st.rows[present].sum()))
    # harmonic mean samples per task
    K = float(n[0]) if np.all(n == n[0]) else float(len(n) / np.sum(1.0 / n))
    if not has_w.any():
        notes.append(f"{metric}: every task has one sample, so within-task variance cannot be "
                     "estimated (need k >= 2)")
        within = float("nan")
        within_over_k = float("nan")
        between = float(x.var(ddof=1)) if T > 1 else float("nan")
    else:
        within = float(wv[has_w].mean())
        within_over_k = float(np.mean(np.where(has_w, wv, within) / n))
        total = float(x.var(ddof=1)) if T > 1 else 0.0
        between = max(total - within_over_k, 0.0)
        if total - within_over_k < 0:
            notes.append(f"{metric}: the between-task estimate was negative (sampling noise) and "
                         "is truncated at 0")
    var_mean = (between + (within / K if np.isfinite(within) else 0.0)) / T
    se = float(np.sqrt(var_mean))
    w = within if np.isfinite(within) else 0.0
    se2k = float(np.sqrt((between + w / (2 * K)) / T))
    se2t = float(np.sqrt((between + w / K) / (2 * T)))
    floor_se = float(np.sqrt(between / T))
    share = float((w / K) / (between + w / K)) if (between + w / K) > 0 else float("nan")
    # Run-to-run spread of the same tasks: sampling alone predicts sqrt(mean(w_i / K_i) / T).
    run_means: list[float] = []
    for s in run_stats:
        p = s.n > 0
        if p.any():
            run_means.append(float((s.s[p] / s.n[p]).mean()))
    run_sd = expected = pval = None
    if len(per_run) >= 2 and len(run_means) >= 2:
        run_sd = float(np.std(run_means, ddof=1))
        k_run = K / len(per_run)
        if np.isfinite(within):
            expected = float(np.sqrt(within / k_run / T))
            if expected > 0:
                r = len(run_means)
                chi = (r - 1) * run_sd ** 2 / expected ** 2
                pval = float(special.chdtrc(r - 1, chi))
    se_tasks = float(x.std(ddof=1) / np.sqrt(T)) if T > 1 else None
    return VarianceComponents(metric, mean, T, K, between, within, se, se2k, se2t, floor_se, share,
                              tuple(run_means), run_sd, expected, pval, se_tasks)


def eval_variance(*runs: RowsLike, level: float = 0.95) -> EvalVariance:
    """Decompose an eval score's variance into between-task and within-task parts (Miller 2024).

    Args:
        runs: one or more runs of graded rows (each any row-like input), on the same tasks.
        level: level of the interval on each mean.

    Example:
        >>> run = [{"task_id": f"t{i}", "reward": float((i + j) % 3 == 0)}
        ...        for i in range(30) for j in range(4)]
        >>> ev = eval_variance(run)
        >>> c = ev["pass@1"]
        >>> c.n_tasks, c.samples_per_task, c.se_double_samples < c.se
        (30, 4.0, True)
    """
    if not runs:
        raise MeasureError("eval_variance needs at least one run of rows")
    frames, task_ids = read_runs(list(runs), argument="runs")
    n_tasks = len(task_ids)
    notes: list[str] = []
    warnings: list[str] = []
    comps: list[VarianceComponents] = []
    per_run = [(f.codes, f.reward, f.binary_mask(), f.block) for f in frames]
    c = _decompose("pass@1", per_run, n_tasks, level, True, notes)
    if c is None:
        raise MeasureError("eval_variance: no row has a binary reward; grade the rows first")
    comps.append(c)
    skipped = sum(f.counts()["partial"] + f.counts()["unjudged"] for f in frames)
    if skipped:
        notes.append(f"{skipped} partial or unjudged rows are not in pass@1")
    shared = set.intersection(*[set(f.markers) for f in frames])
    for name in sorted(shared):
        per = []
        for f in frames:
            vals = f.markers[name]
            have = ~np.isnan(vals)
            per.append((f.codes, vals if have.all() else np.where(have, vals, 0.0), have, f.block))
        mc = _decompose(f"marker:{name}", per, n_tasks, level, False, notes)
        if mc is not None:
            comps.append(mc)
    if len(frames) >= 2:
        for comp in comps:
            if comp.run_spread_p is not None and comp.run_spread_p < 0.01:
                warnings.append(
                    f"{comp.metric}: runs differ more than sampling explains (run sd "
                    f"{comp.run_sd:.4f} vs {comp.run_sd_expected:.4f}, p={comp.run_spread_p:.3g}): "
                    "the runs may not be the same tasks, judge or settings"
                )
        notes.append("re-run noise is within-task sampling variance, already inside the interval "
                     "over tasks; do not add it again as a separate hurdle")
    elif c.within != c.within:
        warnings.append("one sample per task: give k >= 2 samples per task to separate sampling "
                        "from task variance")
    return EvalVariance(tuple(comps), len(frames), tuple(notes), tuple(warnings))
