"""Per-category results: pass@1/pass@k per value of a row field (subject, level), a macro
average over categories with its interval, and paired comparisons per category with Holm.

Each category's numbers are :func:`assay.pass_at` / :func:`assay.compare` on that category's rows
alone, so their intervals are over that category's tasks and samples.

The macro average gives every category the same weight: ``m = mean_c m_c``. Categories are
strata: their tasks are independent samples, so ``Var(m) = sum_c v_c / C^2`` with
``v_c = s_c^2 / T_c`` (the variance of category c's per-task values over its T_c tasks; 0.25,
the largest a rate can have, when a category has a single task). The interval is a Wilson
score interval on the effective sample size ``n_eff = m (1 - m) / Var(m)`` (capped at the
Kish size ``C^2 / sum_c 1/T_c`` of the equal category weights divided by the binomial floor,
and equal to the Kish size, the all-or-nothing worst case, when ``m`` is 0 or 1), with a
Student t quantile on Welch-Satterthwaite degrees of freedom (Korn & Graubard 1998 for the
design-effect Wilson interval; Satterthwaite 1946). Its coverage has been checked by the
simulation in tests/measure/test_categories.py, not on the full grid of docs/statistics.md.

Example:
    >>> rows = [{"task_id": f"{s}{i}", "reward": float((i + j) % 3 != 0), "meta": {"subject": s}}
    ...         for s in ("alg", "geo") for i in range(12) for j in range(4)]
    >>> res = pass_at_by(rows, "subject")
    >>> [c.category for c in res.categories], round(res.macro.value, 3)
    (['alg', 'geo'], 0.667)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assay.errors import MeasureError, RowsError
from assay.intervals import STRATIFIED_METHOD, stratified_interval
from assay.measure.comparison import Comparison, MetricComparison, _holm, compare
from assay.measure.grouping import frame_of_table, task_stats
from assay.measure.passk import PassAt, pass_at_frame, pass_at_k_unbiased
from assay.measure.signflip import min_attainable_p
from assay.results import Estimate, Result
from assay.rowfields import field_values
from assay.rows import RowsLike, as_table

MACRO_METHOD = STRATIFIED_METHOD
#: The category of rows whose field is missing (None): shown, never merged into another.
if TYPE_CHECKING:
    from assay.rows import RowsLike

MISSING = "(missing)"


def _label(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def category_labels(table: pa.Table, by: str) -> list[str]:
    """The category of every row: the value of ``by`` as text (:data:`MISSING` for None).

    Example:
        >>> import assay
        >>> t = assay.rows(["a", "b"], ["x", "y"], [1, 0], meta=[{"level": 2}, None]).to_arrow()
        >>> category_labels(t, "level")
        ['2', '(missing)']
    """
    try:
        vals = field_values(table, by, where="by")
    except RowsError as e:
        raise MeasureError(str(e)) from None
    return [MISSING if (lab := _label(v)) is None else lab for v in vals]


def _split(table: pa.Table, labels: list[str]) -> dict[str, pa.Table]:
    arr = pa.array(labels, type=pa.string())
    return {c: table.filter(pc.equal(arr, c)) for c in sorted(set(labels))}


def macro_average(per_task: Sequence[np.ndarray], floors: Sequence[float], *, level: float = 0.95,
                  name: str = "macro pass@1") -> Estimate:
    """Equal-weight mean over categories of the mean of each one's per-task values in [0, 1],
    with :func:`assay.intervals.stratified_interval`.

    Example:
        >>> e = macro_average([np.array([1.0, 0.0, 1.0, 1.0]), np.array([0.5, 0.5, 0.0])],
        ...                   [0.25, 0.25])
        >>> round(e.value, 4), e.n, e.unit
        (0.5417, 7, 'tasks')
    """
    if not per_task:
        raise MeasureError("macro average of no categories")
    m, iv = stratified_interval(list(per_task), list(floors), level)
    return Estimate(name, m, iv, int(sum(len(x) for x in per_task)), "tasks",
                    note=f"{len(per_task)} categories weighted equally")


@dataclass(frozen=True)
class CategoryPassAt:
    """One category's :class:`PassAt` (None when it has no binary row: see ``why``)."""

    category: str
    result: PassAt | None
    why: str | None = None


@dataclass(frozen=True)
class PassAtBy(Result):
    """pass@1/pass@k per category, and their macro averages over categories."""

    by: str
    k: int
    categories: tuple[CategoryPassAt, ...]
    macro: Estimate
    macro_pass_at_k: Estimate | None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def value(self) -> float:
        return self.macro.value

    def __getitem__(self, category: str) -> PassAt:
        for c in self.categories:
            if c.category == category and c.result is not None:
                return c.result
        raise KeyError(f"no category {category!r} with results; categories: "
                       f"{[c.category for c in self.categories]}")

    def __str__(self) -> str:
        return f"by {self.by}: {self.macro}" + (f" | {self.macro_pass_at_k}"
                                                if self.macro_pass_at_k else "")

    def report(self) -> str:
        lines = [f"per {self.by} ({len(self.categories)} categories), intervals over each "
                 "category's tasks:"]
        width = max(len(c.category) for c in self.categories)
        for c in self.categories:
            if c.result is None:
                lines.append(f"  {c.category:<{width}}  no result: {c.why}")
                continue
            r = c.result
            parts = [str(e) for e in (r.pass_at_1, r.pass_at_k) if e is not None]
            lines.append(f"  {c.category:<{width}}  " + " | ".join(parts))
        lines.append(f"{self.macro}")
        if self.macro_pass_at_k is not None:
            lines.append(f"{self.macro_pass_at_k}")
        lines.append(f"macro interval: {MACRO_METHOD}")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _task_spans(table: pa.Table, labels: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    bad = []
    for t, lab in zip(table.column("task_id").to_pylist(), labels):
        if seen.setdefault(t, lab) != lab and t not in bad:
            bad.append(t)
    return bad


def pass_at_by(rows: RowsLike, by: str, k: int | None = None, *, level: float = 0.95) -> PassAtBy:
    """pass@1 and pass@k per category of the row field ``by``, each with its interval over
    that category's tasks, and the macro average over categories with its interval.

    Args:
        rows: graded rows (any row-like input).
        by: a row field: ``meta.<name>`` or a bare record field kept in ``meta``, a marker
            (``markers.<name>`` or its bare name), or a column (``judge_name``).
        k: for pass@k; default the overall default (the fewest binary samples of any task),
            the same k in every category.
        level: confidence level.

    Rows whose field is missing form the category ``(missing)``; a task whose rows fall in
    several categories is counted in each and warned about.
    """
    table = as_table(rows, require=())
    labels = category_labels(table, by)
    overall = pass_at_frame(frame_of_table(table, argument="rows"), k, level=level)
    k_eff = overall.k
    notes: list[str] = []
    warnings: list[str] = []
    if MISSING in labels:
        notes.append(f"{labels.count(MISSING)} rows have no {by!r}: they are the category "
                     f"{MISSING!r}")
    spans = _task_spans(table, labels)
    if spans:
        warnings.append(f"{len(spans)} tasks have rows in several {by} categories (e.g. "
                        f"{spans[0]!r}): they count in each, so categories are not independent; "
                        "use a field that is constant within a task")
    cats: list[CategoryPassAt] = []
    per_task: list[np.ndarray] = []
    per_task_k: list[np.ndarray] = []
    floors: list[float] = []
    for cat, sub in _split(table, labels).items():
        frame = frame_of_table(sub, argument=f"rows[{by}={cat}]")
        try:
            res = pass_at_frame(frame, k_eff, level=level)
        except MeasureError as e:
            cats.append(CategoryPassAt(cat, None, str(e).split(":")[0] + ": no binary reward"))
            warnings.append(f"category {cat!r}: no binary reward, left out of the macro average")
            continue
        cats.append(CategoryPassAt(cat, res))
        st = task_stats(frame.codes, frame.reward, frame.binary_mask(), frame.n_tasks, frame.weight,
                        binary=True, block=frame.block)
        present = st.n > 0
        n, c = st.n[present], st.s[present]
        per_task.append(c / n)
        floors.append(float(np.mean(1.0 / n)))
        if k_eff > 1:
            pk = pass_at_k_unbiased(n, c, k_eff)
            per_task_k.append(pk[~np.isnan(pk)])
        if res.n_tasks < 10:
            warnings.append(f"category {cat!r} has {res.n_tasks} tasks: its interval is wide and "
                            "approximate below 10 tasks")
    if not per_task:
        raise MeasureError(f"by {by!r}: no category has a binary reward; grade the rows first")
    macro = macro_average(per_task, floors, level=level)
    macro_k = None
    if k_eff > 1 and all(len(x) for x in per_task_k) and len(per_task_k) == len(per_task):
        macro_k = macro_average(per_task_k, floors, level=level, name=f"macro pass@{k_eff}")
    elif k_eff > 1:
        notes.append(f"macro pass@{k_eff} not reported: some category has no task with {k_eff} "
                     "binary samples")
    return PassAtBy(by, k_eff, tuple(cats), macro, macro_k, tuple(notes), tuple(warnings))


# ------------------------------------------------------------------------------- compare by


@dataclass(frozen=True)
class CategoryComparison:
    """One category's paired comparison of one metric, its p-value Holm-adjusted across every
    (category, metric) tested."""

    category: str
    comparison: MetricComparison


@dataclass(frozen=True)
class ComparisonBy(Result):
    """Paired comparisons per category, Holm-corrected across categories (and metrics)."""

    by: str
    categories: tuple[CategoryComparison, ...]
    alpha: float
    n_tests: int
    correction: str
    only_before: tuple[str, ...] = ()
    only_after: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __getitem__(self, category: str) -> MetricComparison:
        for c in self.categories:
            if c.category == category:
                return c.comparison
        raise KeyError(f"no category {category!r}; compared: "
                       f"{[c.category for c in self.categories]}")

    def __str__(self) -> str:
        return " | ".join(f"{c.category}: {c.comparison.verdict}" for c in self.categories)

    def report(self) -> str:
        lines = [f"per {self.by}: {self.n_tests} tests, {self.correction} at family-wise alpha "
                 f"{self.alpha}"]
        for c in self.categories:
            lines.append(f"  [{c.category}] {c.comparison}")
        if self.only_before or self.only_after:
            lines.append("categories in one arm only (not compared): before "
                         f"{list(self.only_before)}, after {list(self.only_after)}")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def compare_by(before: RowsLike, after: RowsLike, by: str, *, metrics: Sequence[str] | None = None,
               alpha: float = 0.05, lower_is_better: Sequence[str] = (), level: float = 0.95,
               seed: int = 0) -> ComparisonBy:
    """:func:`assay.compare` within each category of ``by`` (tasks paired by task_id), with
    Holm's correction across every (category, metric) test and a warning for each category
    with too few paired tasks for its test to reach significance.

    Args:
        before, after: graded rows of the two arms.
        by: the category field (see :func:`pass_at_by`).
        metrics: per category; default ``["pass@1"]``.
        alpha: family-wise significance level across categories and metrics.

    Example:
        >>> b = [{"task_id": f"{s}{i}", "reward": float(j < 2), "meta": {"s": s}}
        ...      for s in "xy" for i in range(12) for j in range(4)]
        >>> a = [{**r, "reward": 1.0 if r["meta"]["s"] == "x" else r["reward"]} for r in b]
        >>> res = compare_by(b, a, "s")
        >>> res["x"].verdict, res["y"].verdict, res.correction
        ('better', 'no difference detected', 'Holm across 2 tests')
    """
    tb = as_table(before, require=(), argument="before")
    ta = as_table(after, require=(), argument="after")
    sb, sa = _split(tb, category_labels(tb, by)), _split(ta, category_labels(ta, by))
    shared = sorted(set(sb) & set(sa))
    if not shared:
        raise MeasureError(f"by {by!r}: no category is in both arms (before {sorted(sb)}, after "
                           f"{sorted(sa)})")
    per: list[tuple[str, MetricComparison]] = []
    notes: list[str] = []
    for cat in shared:
        try:
            res: Comparison = compare(sb[cat], sa[cat], metrics=list(metrics or ["pass@1"]),
                                      alpha=alpha, lower_is_better=lower_is_better, level=level,
                                      seed=seed)
        except MeasureError as e:
            notes.append(f"category {cat!r} not compared: {e}")
            continue
        per += [(cat, m) for m in res.metrics]
    tested = [i for i, (_, m) in enumerate(per) if m.n_paired > 0]
    adj = _holm(np.array([per[i][1].p_value for i in tested])) if tested else np.array([])
    m_tests = len(tested)
    out: list[CategoryComparison] = []
    warnings: list[str] = []
    adj_of = dict(zip(tested, adj))
    for i, (cat, m) in enumerate(per):
        if i in adj_of:
            pa_ = float(adj_of[i])
            pmin = min_attainable_p(m.n_paired)
            if pmin >= alpha:
                verdict = "insufficient data"
                warnings.append(f"category {cat!r} ({m.metric}): {m.n_paired} paired tasks; the "
                                f"exact test's smallest possible p is {pmin:.4f} >= alpha {alpha}: "
                                "it cannot reach significance, compare on more tasks")
            else:
                verdict = (("better" if (m.delta.value > 0) == m.higher_is_better else "worse")
                           if pa_ < alpha else "no difference detected")
                if m_tests > 1 and pmin * m_tests >= alpha:
                    warnings.append(
                        f"category {cat!r} ({m.metric}): {m.n_paired} paired tasks; its smallest "
                        f"possible p ({pmin:.4f}) is above alpha/{m_tests}, so under Holm across "
                        f"{m_tests} tests it can reach significance only after other categories do")
            m = replace(m, p_adjusted=pa_, verdict=verdict, detectable=m.detectable if verdict ==
                        "no difference detected" else None)
        out.append(CategoryComparison(cat, m))
    return ComparisonBy(by, tuple(out), alpha, m_tests,
                        f"Holm across {m_tests} tests" if m_tests > 1 else "none (one test)",
                        tuple(sorted(set(sb) - set(sa))), tuple(sorted(set(sa) - set(sb))),
                        tuple(notes), tuple(warnings))
