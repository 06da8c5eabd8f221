"""pass@1, pass@k and pass^k over tasks from graded rows, each with an interval over tasks.

Unbiased per-task estimators (Chen et al. 2021 for pass@k), averaged with equal task weights.

pass@1 is the mean over tasks of each task's pass rate ``c/n`` (binary rows only; a reward
strictly between 0 and 1 is partial and an unjudged row has none: both are skipped and
counted). For a task with ``n >= k`` samples of which ``c`` pass:

- pass@k = ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021, arXiv:2107.03374), the chance that
  at least one of k draws without replacement passes;
- pass^k = ``C(c, k) / C(n, k)`` (Yao et al. 2024, tau-bench, arXiv:2406.12045), the chance that
  all k pass.

A task with ``n < k`` has no unbiased estimate: it is left out of both and counted, never
scored as 1. Row weights (for example the multiplicities of a duplicate collapse) make a row
count as ``w`` samples of its task; tasks stay the unit of every interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import gammaln

from assay.errors import MeasureError
from assay.intervals import TASK_METHOD, task_interval
from assay.measure.grouping import Frame, read_frame, task_stats
from assay.results import Estimate, Result

if TYPE_CHECKING:
    from assay.rows import RowsLike


def _log_choose(n: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def pass_at_k_unbiased(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Chen et al. (2021) unbiased pass@k per task; NaN where ``n < k``.

    Real-valued ``n``, ``c`` (weighted counts) use the gamma-function binomial.

    Example:
        >>> n, c = np.array([4.0, 4.0, 1.0]), np.array([1.0, 0.0, 2.0])
        >>> pass_at_k_unbiased(n, c, 2).round(3).tolist()
        [0.5, 0.0, nan]
    """
    n = np.asarray(n, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    out = np.full(n.shape, np.nan)
    ok = n >= k
    fail = n - c
    some_fail = ok & (fail >= k)
    with np.errstate(invalid="ignore"):
        out[some_fail] = 1.0 - np.exp(_log_choose(fail[some_fail], k)
                                      - _log_choose(n[some_fail], k))
    out[ok & (fail < k)] = 1.0
    return out


def pass_hat_k_unbiased(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass^k = C(c, k) / C(n, k) per task; NaN where ``n < k``.

    Example:
        >>> pass_hat_k_unbiased(np.array([4.0, 4.0]), np.array([3.0, 4.0]), 2).round(3).tolist()
        [0.5, 1.0]
    """
    n = np.asarray(n, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    out = np.full(n.shape, np.nan)
    ok = n >= k
    enough = ok & (c >= k)
    out[enough] = np.exp(_log_choose(c[enough], k) - _log_choose(n[enough], k))
    out[ok & (c < k)] = 0.0
    return out


@dataclass(frozen=True)
class PassAt(Result):
    """pass@1, pass@k, pass^k and headroom (pass@k - pass@1), each an Estimate over tasks.

    ``se`` is the standard error of pass@1 over tasks (sample sd of task rates / sqrt(T)), the
    cluster-robust standard error of a mean clustered by task. ``design_effect`` is the
    dispersion phi (1: tasks are all-or-nothing; 1/k: samples within a task are independent).
    """

    pass_at_1: Estimate
    pass_at_k: Estimate | None
    pass_hat_k: Estimate | None
    headroom: Estimate | None
    k: int
    n_tasks: int
    n_rows: int
    n_partial: int
    n_unjudged: int
    n_tasks_below_k: int
    n_tasks_without_binary: int
    se: float
    design_effect: float
    weighted: bool
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    #: share of the rows used whose completion was cut off (marker ``truncated``), when known
    truncated_share: float | None = None

    _headline_field = "pass_at_1"

    @property
    def value(self) -> float:
        return self.pass_at_1.value

    def __str__(self) -> str:
        parts = [str(e) for e in (self.pass_at_1, self.pass_at_k, self.pass_hat_k, self.headroom)
                 if e is not None]
        line = " | ".join(parts)
        if self.truncated_share is not None and self.truncated_share > MOSTLY_TRUNCATED:
            line += (f" [warning: {100 * self.truncated_share:.0f}% of these rows were truncated"
                     " (finish 'length')]")
        return line

    def report(self) -> str:
        lines = [self._line()]
        lines.append(
            f"rows: {self.n_rows} binary used, {self.n_partial} partial skipped, {self.n_unjudged} "
            f"unjudged skipped; se(pass@1) {self.se:.4f}, design effect phi "
            f"{self.design_effect:.3f}; intervals: {TASK_METHOD}"
        )
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


#: A pass rate over more than this share of truncated rows carries a warning on its line.
MOSTLY_TRUNCATED = 0.5


def pass_at(rows: RowsLike, k: int | None = None, *, level: float = 0.95,
            weights: object = None) -> PassAt:
    """pass@1 with its interval over tasks, plus pass@k, pass^k and headroom at ``k``.

    Args:
        rows: graded rows (Rows, list of dicts, DataFrame or Arrow table); grouped by task_id.
        k: draw size for pass@k and pass^k; default: the smallest number of binary samples any
            task has (so no task is left out). With k = 1 only pass@1 is reported.
        level: confidence level of every interval.
        weights: optional per-row weights (a sequence, or the name of a marker): a row counts
            as ``w`` samples of its task, e.g. the multiplicities of a duplicate collapse.

    Example:
        >>> rows = [{"task_id": t, "reward": r} for t, rs in
        ...         {"a": [1, 0, 1, 1], "b": [0, 0, 1, 0],
        ...          "c": [1, 1, 1, 1], "d": [1, 0, 1, 1]}.items()
        ...         for r in rs]
        >>> res = pass_at(rows)
        >>> round(res.value, 3), res.k, res.n_tasks
        (0.688, 4, 4)
        >>> str(res).split(" | ")[0]
        'pass@1 0.688 [0.305, 0.917] (4 tasks, 16 rows)'
    """
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise MeasureError(f"k must be a positive integer, got {k!r}")
    if not 0.0 < level < 1.0:
        raise MeasureError(f"level must be in (0, 1), got {level!r}")
    frame = read_frame(rows, argument="rows", weights=weights, markers=False)
    return pass_at_frame(frame, k, level=level)


def pass_at_frame(frame: Frame, k: int | None, *, level: float = 0.95) -> PassAt:
    """:func:`pass_at` on an already read :class:`Frame`."""
    counts = frame.counts()
    binary = frame.binary_mask()
    if counts["binary"] == 0:
        raise MeasureError(
            f"rows: no row has a binary reward (0 or 1): {counts['partial']} partial, "
            f"{counts['unjudged']} unjudged; pass@k counts passes. Threshold partial scores into "
            "0/1 first, or grade the rows"
        )
    st = task_stats(frame.codes, frame.reward, binary, frame.n_tasks, frame.weight, binary=True,
                    block=frame.block)
    present = st.n > 0
    n, c = st.n[present], st.s[present]
    n_rows_used = int(st.rows[present].sum())
    T = int(present.sum())
    rates = c / n
    floor = float(np.mean(1.0 / n))
    notes: list[str] = []
    warnings: list[str] = []
    interval = task_interval(rates, floor=floor, level=level)
    if interval is None:
        warnings.append("one task: no interval over tasks is possible; give more tasks (each its "
                        "own task_id)")
    p1 = Estimate("pass@1", float(rates.mean()), interval, T, "tasks", n_rows_used,
                  None if interval is not None else "no interval: one task cannot show "
                                                    "task-to-task variation")
    se = float(rates.std(ddof=1) / np.sqrt(T)) if T > 1 else float("nan")
    phi = 1.0
    if T > 1 and 0 < p1.value < 1:
        phi = float(np.clip(rates.var(ddof=1) / (p1.value * (1 - p1.value)), floor, 1.0))
    if counts["partial"]:
        notes.append(f"{counts['partial']} rows with a partial reward (strictly between 0 and 1) "
                     "are not in these numbers")
    if counts["unjudged"]:
        notes.append(f"{counts['unjudged']} unjudged rows (no reward) are not in these numbers")
    n_without = frame.n_tasks - T
    if n_without:
        notes.append(f"{n_without} tasks have no binary row and are left out")
    if frame.weight is not None:
        notes.append("rows weighted: a row of weight w counts as w samples of its task; tasks "
                     "weigh equally")
    if 1 < T < 10:
        warnings.append(f"only {T} tasks: the interval is wide and its coverage is only "
                        "approximate below 10 tasks")

    k_eff = int(k) if k is not None else max(1, int(np.floor(st.rows[present].min())))
    at_k = hat_k = head = None
    below = 0
    if k_eff > 1:
        pk = pass_at_k_unbiased(n, c, k_eff)
        ph = pass_hat_k_unbiased(n, c, k_eff)
        ok = ~np.isnan(pk)
        below = int((~ok).sum())
        if below:
            notes.append(
                f"{below} of {T} tasks have fewer than {k_eff} samples: pass@{k_eff} and "
                f"pass^{k_eff} are undefined for them (left out, not scored as 1)"
            )
        if ok.any():
            rows_k = int(st.rows[present][ok].sum())
            Tk = int(ok.sum())
            fk = float(np.mean(1.0 / n[ok]))
            at_k = Estimate(f"pass@{k_eff}", float(pk[ok].mean()),
                            task_interval(pk[ok], floor=fk, level=level), Tk, "tasks", rows_k)
            hat_k = Estimate(f"pass^{k_eff}", float(ph[ok].mean()),
                             task_interval(ph[ok], floor=fk, level=level), Tk, "tasks", rows_k)
            gap = pk[ok] - rates[ok]
            head = Estimate("headroom", float(gap.mean()),
                            task_interval(gap, floor=fk, level=level), Tk, "tasks", rows_k,
                            note=f"pass@{k_eff} - pass@1")
            if Tk < 30:
                notes.append(f"pass@{k_eff}/pass^{k_eff} intervals are approximate below 30 tasks "
                             "(skewed per-task values: about 88% coverage at 10 tasks in "
                             "simulation, see docs/statistics.md)")
        else:
            warnings.append(f"no task has {k_eff} binary samples: pass@{k_eff} and pass^{k_eff} "
                            "are undefined")
    elif k is None:
        notes.append("some task has a single sample, so k defaults to 1: pass@k and pass^k need k "
                     ">= 2 samples per task")
    trunc = _truncated_share(frame, binary)
    if trunc is not None and trunc > MOSTLY_TRUNCATED:
        warnings.append(f"{100 * trunc:.0f}% of the rows measured were truncated (finish 'length', "
                        "marker truncated): the rate measures the length limit as much as the "
                        "model; raise max_tokens")
    return PassAt(p1, at_k, hat_k, head, k_eff, T, n_rows_used, counts["partial"],
                  counts["unjudged"], below, n_without, se, phi, frame.weight is not None,
                  tuple(notes), tuple(warnings), trunc)


def _truncated_share(frame: Frame, used: np.ndarray) -> float | None:
    """Share of the used rows that carry ``truncated`` = 1, over those carrying the marker."""
    t = frame.markers.get("truncated")
    if t is None:
        return None
    t = t[used & ~np.isnan(t)]
    return round(float(t.mean()), 4) if len(t) else None
