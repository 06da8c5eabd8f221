"""Multiple-choice accuracy (acc, acc_norm, acc_bytes) over tasks, overall and per category,
from rows graded by log-likelihood (:mod:`assay.stages.score_choices`).

Each estimate is the mean over tasks of the task's verdicts, with the clustered Wilson interval
over tasks (:func:`assay.intervals.task_interval`); per category of ``by`` the same, plus the
macro average over categories (each category weighs the same, as lm-eval's group scores with
``weight_by_size: false``; the micro average is the overall line).

Example:
    >>> rows = [{"task_id": f"q{i}", "reward": float(i % 2), "markers": {"acc_norm": 1.0,
    ...          "acc_bytes": 1.0}, "meta": {"subject": "ab"[i % 2]}} for i in range(8)]
    >>> r = choice_accuracy(rows, by="subject")
    >>> r.acc.value, r.acc_norm.value, [c.acc.value for c in r.categories]
    (0.5, 1.0, [0.0, 1.0])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from assay.errors import MeasureError
from assay.intervals import TASK_METHOD, task_interval
from assay.results import Estimate, Result

if TYPE_CHECKING:
    import pyarrow as pa

    from assay.rows import RowsLike

METRICS = ("acc", "acc_norm", "acc_bytes")


@dataclass(frozen=True)
class ChoiceCategory:
    """One category's acc, acc_norm and acc_bytes."""

    category: str
    acc: Estimate
    acc_norm: Estimate
    acc_bytes: Estimate

    def __str__(self) -> str:
        return f"{self.category}: {self.acc} | {self.acc_norm} | {self.acc_bytes}"


@dataclass(frozen=True)
class ChoiceAccuracy(Result):
    """acc, acc_norm, acc_bytes over tasks; per category of ``by`` with macro averages."""

    acc: Estimate
    acc_norm: Estimate
    acc_bytes: Estimate
    n_tasks: int
    n_rows: int
    by: str | None = None
    categories: tuple[ChoiceCategory, ...] = ()
    macro: tuple[Estimate, ...] = ()
    warnings: tuple[str, ...] = ()

    _headline_field = "acc"

    def __str__(self) -> str:
        return f"{self.acc} | {self.acc_norm} | {self.acc_bytes}"

    def report(self) -> str:
        lines = [self._line(), f"{self.n_rows} rows over {self.n_tasks} tasks; intervals: "
                 f"{TASK_METHOD}"]
        if self.by is not None:
            lines.append(f"per {self.by}:")
            lines += [f"  {c}" for c in self.categories]
            lines.append("  macro average over categories: " + " | ".join(map(str, self.macro)))
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _per_task(table: pa.Table, labels: list[str] | None = None
              ) -> tuple[np.ndarray, dict[str, np.ndarray],
                                                                    list[str] | None]:
    tids = np.asarray(table.column("task_id").to_pylist(), dtype=object)
    uniq, codes = np.unique(tids, return_inverse=True)
    n = np.bincount(codes, minlength=len(uniq)).astype(np.float64)
    reward = table.column("reward").to_pylist()
    if any(r is None for r in reward):
        raise MeasureError("choice_accuracy: some rows have no reward; score the choices first")
    markers = table.column("markers").to_pylist()
    vals: dict[str, np.ndarray] = {}
    for m in METRICS:
        if m == "acc":
            v = np.asarray(reward, dtype=np.float64)
        else:
            got = [dict(mk or []).get(m) for mk in markers]
            if any(x is None for x in got):
                raise MeasureError(f"choice_accuracy: rows lack the {m!r} marker; these are not "
                                   "rows graded by log-likelihood (choices: sources)")
            v = np.asarray(got, dtype=np.float64)
        vals[m] = np.bincount(codes, weights=v, minlength=len(uniq)) / n
    task_labels = None
    if labels is not None:
        first: dict[int, str] = {}
        for i, c in enumerate(codes):
            first.setdefault(int(c), labels[i])
        task_labels = [first[i] for i in range(len(uniq))]
    return n, vals, task_labels


def _estimates(vals: dict[str, np.ndarray], n_rows: int, level: float) -> list[Estimate]:
    out = []
    for m in METRICS:
        v = vals[m]
        out.append(Estimate(m, float(v.mean()) if len(v) else float("nan"),
                            task_interval(v, floor=1.0, level=level), len(v), n_rows=n_rows))
    return out


def choice_accuracy(rows: RowsLike, *, by: str | None = None,
                    level: float = 0.95) -> ChoiceAccuracy:
    """acc, acc_norm and acc_bytes with intervals over tasks (module docstring).

    Args:
        rows: rows graded by log-likelihood (any row-like input).
        by: also per category of this row field (a meta field such as ``subject``).
        level: confidence level of every interval.
    """
    from assay.rows import as_table

    table = as_table(rows, require=("reward",))
    if table.num_rows == 0:
        raise MeasureError("choice_accuracy: no rows")
    labels = None
    if by is not None:
        from assay.measure.categories import category_labels

        labels = category_labels(table, by)
    n, vals, task_labels = _per_task(table, labels)
    acc, norm, byt = _estimates(vals, table.num_rows, level)
    cats: list[ChoiceCategory] = []
    macro: tuple[Estimate, ...] = ()
    warnings = []
    if len(n) < 10:
        warnings.append(f"only {len(n)} tasks: intervals are wide")
    if task_labels is not None:
        lab = np.asarray(task_labels, dtype=object)
        for c in sorted(set(task_labels)):
            mask = lab == c
            e = _estimates({m: v[mask] for m, v in vals.items()}, int(n[mask].sum()), level)
            cats.append(ChoiceCategory(c, *e))
        means = {m: np.array([getattr(c, m).value for c in cats]) for m in METRICS}
        macro = tuple(Estimate(f"{m} macro", float(means[m].mean()), None, len(cats),
                               unit="categories") for m in METRICS)
    return ChoiceAccuracy(acc, norm, byt, len(n), table.num_rows, by, tuple(cats), macro,
                          tuple(warnings))
