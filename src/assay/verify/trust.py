"""``judge_trust``: how far a model judge agrees with gold labels on a labelled sample of rows.

Agreement with a clustered interval over tasks, Cohen's kappa, the confusion counts.

Rows the judge left unjudged (reward None) are counted apart, never as a disagreement or an
agreement. A judge score counts as a pass at ``threshold`` and above (GRADE: C/I judges give
exactly 0 or 1); gold labels must be 0/1 (or True/False).

Example:
    >>> import assay
    >>> r = assay.rows(["a", "b", "c", "d"], [["x", "y"]] * 4, [[1, 0], [1, 1], [0, 0], [1, None]])
    >>> t = judge_trust(r, gold=[1, 1, 1, 0, 0, 0, 1, 1])
    >>> t.agreement, t.n, t.n_unjudged, round(t.kappa, 3)
    (0.714, 7, 1, 0.417)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from assay.errors import RowsError, RowsTypeError
from assay.results import Interval, Result, _fmt

if TYPE_CHECKING:
    from assay.rows import RowsLike


@dataclass(frozen=True)
class JudgeTrust(Result):
    """Agreement of a judge with gold labels. ``agreement`` is rounded to 3 places; ``kappa`` is
    None when chance agreement is 1 (one label only)."""

    agreement: float
    interval: Interval | None
    kappa: float | None
    n: int
    n_tasks: int
    n_unjudged: int
    confusion: dict[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        ci = f" {self.interval}" if self.interval is not None else ""
        k = "n/a" if self.kappa is None else _fmt(self.kappa)
        return (f"judge agreement {_fmt(self.agreement)}{ci}, kappa {k} "
                f"({self.n_tasks} tasks, {self.n} rows; {self.n_unjudged} unjudged)")


def cohen_kappa(a: Sequence[int], b: Sequence[int]) -> float | None:
    """Cohen's kappa of two binary label sequences; None when chance agreement is 1.

    Example:
        >>> cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0])
        0.5
    """
    x, y = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    po = float(np.mean(x == y))
    pe = float(np.mean(x) * np.mean(y) + (1 - np.mean(x)) * (1 - np.mean(y)))
    return None if pe >= 1.0 else (po - pe) / (1.0 - pe)


def _gold_label(v: object, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)) or (
            isinstance(v, (int, float, np.integer, np.floating))
            and not (isinstance(v, float) and math.isnan(v)) and v in (0, 1)):
        return int(v)
    raise RowsTypeError(f"gold{where}: a gold label is 0/1 (or True/False, None = not labelled), "
                        f"got {v!r:.60}")


def judge_trust(rows: RowsLike, gold: Sequence[object] | Mapping[tuple[str, int], object], *,
                threshold: float = 0.5, level: float = 0.95) -> JudgeTrust:
    """The judge's agreement with ``gold`` on the labelled rows, its interval over tasks and kappa.

    Args:
        rows: judged rows (any form :func:`assay.rows.as_table` reads).
        gold: one label per row (None = not labelled), or ``{(task_id, rollout_index): label}``
            for a labelled sample.
        threshold: a judge score >= threshold is a pass.
    """
    from assay.intervals import task_interval
    from assay.rows import as_table

    table = as_table(rows, require=(), argument="rows")
    tids = table.column("task_id").to_pylist()
    ridx = table.column("rollout_index").to_pylist()
    reward = table.column("reward").to_pylist()
    if isinstance(gold, Mapping):
        labels = [_gold_label(gold.get((t, r)), f"[{(t, r)!r}]") for t, r in zip(tids, ridx)]
        if not any(lab is not None for lab in labels):
            raise RowsError("gold: none of its (task_id, rollout_index) keys matches a row")
    else:
        if len(gold) != len(reward):
            raise RowsError(f"gold: expected one label per row ({len(reward)}), got {len(gold)}; "
                            "or pass {(task_id, rollout_index): label}")
        labels = [_gold_label(v, f"[{i}]") for i, v in enumerate(gold)]
    judged, golds, tasks = [], [], []
    unjudged = 0
    for t, rw, lab in zip(tids, reward, labels):
        if lab is None:
            continue
        if rw is None:
            unjudged += 1
            continue
        judged.append(int(rw >= threshold))
        golds.append(lab)
        tasks.append(t)
    if not judged:
        raise RowsError("judge_trust: no labelled row has a judge score "
                        "(all unjudged or unlabelled)")
    agree = np.asarray(judged) == np.asarray(golds)
    per_task: dict[str, list[bool]] = {}
    for t, a in zip(tasks, agree):
        per_task.setdefault(t, []).append(bool(a))
    rates = np.array([np.mean(v) for v in per_task.values()])
    floor = float(np.mean([1.0 / len(v) for v in per_task.values()]))
    interval = task_interval(rates, floor=floor, level=level)
    j, g = np.asarray(judged), np.asarray(golds)
    confusion = {"judge_pass_gold_pass": int(((j == 1) & (g == 1)).sum()),
                 "judge_pass_gold_fail": int(((j == 1) & (g == 0)).sum()),
                 "judge_fail_gold_pass": int(((j == 0) & (g == 1)).sum()),
                 "judge_fail_gold_fail": int(((j == 0) & (g == 0)).sum())}
    warnings = []
    if unjudged:
        warnings.append(f"{unjudged} labelled rows were left unjudged (unparseable or failed judge "
                        "calls): they are outside the agreement; read their reasons")
    if len(per_task) < 10:
        warnings.append(f"only {len(per_task)} labelled tasks: the interval is wide")
    kappa = cohen_kappa(judged, golds)
    return JudgeTrust(round(float(agree.mean()), 3), interval, kappa, len(judged), len(per_task),
                      unjudged, confusion, tuple(warnings))
