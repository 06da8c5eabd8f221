"""What a reward model's scores on a study's graded rows say: best-of-n next to pass@1 and the
oracle pick, within-task ranking of passing over failing completions, and length sensitivity.

Every estimate has an interval over tasks (the independent units) and its n; methods below.

Methods (per task ``i`` with ``n_i`` usable rows: a 0/1 verdict and a finite score):

- best-of-n: the verdict of the completion the model ranks first, ties split evenly (the mean
  verdict of the top-scored rows), as in the best-of-n evaluations of Nakano et al. (2021,
  WebGPT, arXiv:2112.09332) and Gao, Schulman & Hilton (2023, arXiv:2210.10760); next to
  pass@1 (a random pick: the task's pass rate) and the oracle pick (pass@n_i: 1 when any row
  passes). Each is a mean over tasks with the clustered Wilson interval of
  :mod:`assay.intervals`; ``gain`` = best-of-n - pass@1 per task, with a Student t
  interval over tasks.
- ranking accuracy: over tasks with both passing and failing rows, the share of (pass, fail)
  pairs the model scores pass higher (a tie counts half): the per-task AUC, i.e. the probability
  that a random passing row outranks a random failing one (Hanley & McNeil 1982). Tasks weigh
  equally; interval by :func:`assay.reward.stats.cluster_proportion` (Wilson at a
  cluster-robust effective n, Korn & Graubard 1998) with tasks as clusters.
- length concordance: over pairs of rows of one task with the same verdict and different
  lengths, the share where the longer completion scores higher (ties half): 0.5 is no length
  preference, and because the verdict is held fixed, a correlation of length with passing
  cannot produce it (Singhal et al. 2023, arXiv:2310.03716, on length and reward). Tasks weigh
  equally; same interval as ranking accuracy. An interval above 0.5 flags a length-loving model.

Example:
    >>> rows = [{"task_id": f"t{i}", "reward": float(j == 0), "final_text": "x" * (j + 1),
    ...          "markers": {"rm:len": float(j + 1)}} for i in range(12) for j in range(3)]
    >>> res = reward_rows(rows, "rm:len")
    >>> res.best_of_n.value, round(res.pass_at_1.value, 3), res.oracle.value
    (0.0, 0.333, 1.0)
    >>> res.ranking_accuracy.value, res.length_concordance.value, res.length_biased
    (0.0, 1.0, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.compute as pc

from assay.errors import MeasureError
from assay.results import Estimate, Result
from assay.reward.stats import cluster_mean, cluster_proportion

if TYPE_CHECKING:
    from assay.rows import RowsLike


@dataclass(frozen=True)
class RewardRows(Result):
    """A reward model read on graded rows: best-of-n with pass@1 and the oracle, the gain over a
    random pick, ranking accuracy within tasks, and length concordance at a fixed verdict."""

    marker: str
    best_of_n: Estimate
    pass_at_1: Estimate
    oracle: Estimate
    gain: Estimate
    ranking_accuracy: Estimate
    length_concordance: Estimate
    n_tasks: int
    n_rows: int
    n_unscored: int
    n_not_binary: int
    n_top_ties: int
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def length_biased(self) -> bool:
        """True when the length-concordance interval lies above 0.5."""
        iv = self.length_concordance.interval
        return iv is not None and iv.low > 0.5

    def __str__(self) -> str:
        return " | ".join(str(e) for e in (self.best_of_n, self.pass_at_1, self.oracle,
                                            self.ranking_accuracy, self.length_concordance))

    def report(self) -> str:
        lines = [f"reward model {self.marker} on {self.n_tasks} tasks, {self.n_rows} rows:",
                 f"  {self.best_of_n}", f"  {self.pass_at_1}", f"  {self.oracle}",
                 f"  {self.gain}", f"  {self.ranking_accuracy}", f"  {self.length_concordance}"]
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _groups(codes: np.ndarray) -> list[np.ndarray]:
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, cuts) if len(order) else []


def _pair_outcomes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 where a > b, 0.5 where equal, 0 where a < b (all pairs, a's rows x b's columns)."""
    d = a[:, None] - b[None, :]
    return np.where(d > 0, 1.0, np.where(d == 0, 0.5, 0.0)).ravel()


def _task_proportion(per_task: list[np.ndarray], rows: list[int], name: str, what: str,
                     level: float, empty: str) -> Estimate:
    """Mean over tasks of each task's mean outcome, with the cluster interval (tasks as
    clusters, each task's pairs weighted 1/pairs so every task weighs equally)."""
    keep = [i for i, o in enumerate(per_task) if len(o)]
    if not keep:
        return Estimate(name, math.nan, None, 0, "tasks", 0, empty)
    y = np.concatenate([per_task[i] for i in keep])
    w = np.concatenate([np.full(len(per_task[i]), 1.0 / len(per_task[i])) for i in keep])
    cl = np.concatenate([np.full(len(per_task[i]), j) for j, i in enumerate(keep)]).astype(str)
    e = cluster_proportion(y, list(cl), w, name=name, level=level)
    note = f"{len(y)} {what}" + ("; no variation: effective n = tasks" if e.note else "")
    return Estimate(name, e.value, e.interval, e.n, "tasks", int(sum(rows[i] for i in keep)), note)


def reward_rows(rows: RowsLike, marker: str, *, level: float = 0.95) -> RewardRows:
    """Best-of-n, ranking accuracy and length concordance of the scores in ``marker``.

    Args:
        rows: graded rows (Rows, dicts, DataFrame, Arrow) with the reward model's scores as
            marker ``marker`` (the score-rows stage writes ``rm:<model>``).
        marker: the marker holding the scores (``"marker:"`` prefix optional).
        level: confidence level of every interval.

    Rows without a 0/1 verdict or without the score are left out and counted in the notes.
    See the module docstring for the methods.
    """
    from assay.intervals import task_interval
    from assay.measure.grouping import read_frame
    from assay.rows import as_table

    marker = marker.removeprefix("marker:")
    table = as_table(rows, require=("final_text",), argument="rows")
    frame = read_frame(table, argument="rows")
    if marker not in frame.markers:
        raise MeasureError(f"rows: no marker {marker!r}; markers present: {sorted(frame.markers)}. "
                           "List the source under reward.score.sources so its rows are scored")
    score = frame.markers[marker]
    lengths = pc.utf8_length(table.column("final_text")).to_numpy(
        zero_copy_only=False).astype(np.float64)
    binary = frame.binary_mask()
    scored = np.isfinite(score)
    use = binary & scored
    n_unscored = int((binary & ~scored).sum())
    n_not_binary = int((~binary).sum())
    if not use.any():
        raise MeasureError(f"rows: no row has both a 0/1 verdict and a {marker} score; grade the "
                           "rows and score them first")
    codes = frame.codes[use]
    y, s, ln = frame.reward[use], score[use], lengths[use]

    bon, p1, orc, ties_floor, n_floor, gains = [], [], [], [], [], []
    ranked: list[np.ndarray] = []
    concord: list[np.ndarray] = []
    top_ties = 0
    groups = _groups(codes)
    for g in groups:
        yg, sg, lg = y[g], s[g], ln[g]
        top = sg == sg.max()
        top_ties += int(top.sum() > 1)
        bon.append(float(yg[top].mean()))
        p1.append(float(yg.mean()))
        orc.append(float(yg.max()))
        gains.append(bon[-1] - p1[-1])
        ties_floor.append(1.0 / top.sum())
        n_floor.append(1.0 / len(g))
        ok, bad = yg == 1.0, yg == 0.0
        ranked.append(_pair_outcomes(sg[ok], sg[bad]) if ok.any() and bad.any() else np.zeros(0))
        out = []
        for v in (ok, bad):
            i, j = np.triu_indices(int(v.sum()), 1)
            ls, ss = lg[v], sg[v]
            keep = ls[i] != ls[j]
            longer_i = ls[i][keep] > ls[j][keep]
            d = np.where(longer_i, ss[i][keep] - ss[j][keep], ss[j][keep] - ss[i][keep])
            out.append(np.where(d > 0, 1.0, np.where(d == 0, 0.5, 0.0)))
        concord.append(np.concatenate(out))
    T = len(bon)
    n_rows = int(use.sum())
    ks = {int(round(1 / f)) for f in n_floor}
    k_name = f"pass@{ks.pop()}" if len(ks) == 1 else "pass@n"
    bon_a, p1_a, orc_a = map(np.asarray, (bon, p1, orc))

    def est(name: str, v: np.ndarray, floor: float, note: str | None = None) -> Estimate:
        return Estimate(name, float(v.mean()), task_interval(v, floor=floor, level=level), T,
                        "tasks", n_rows, note)

    best = est("best-of-n", bon_a, float(np.mean(ties_floor)),
               f"top-scored completion per task, {top_ties} tasks with tied top scores "
               "split evenly")
    pass1 = est("pass@1", p1_a, float(np.mean(n_floor)), "a random pick")
    oracle = est(k_name, orc_a, 1.0, "the oracle pick: any passing completion")
    ge = cluster_mean(np.asarray(gains), [str(i) for i in range(T)], name="gain", level=level,
                      unit="tasks")
    gain = Estimate("gain", ge.value, ge.interval, T, "tasks", n_rows, "best-of-n - pass@1")
    sizes = [len(g) for g in groups]
    rank = _task_proportion(ranked, sizes, "ranking accuracy", "(pass, fail) pairs", level,
                            "no task has both passing and failing completions")
    conc = _task_proportion(concord, sizes, "length concordance",
                            "same-verdict pairs of different length", level,
                            "no two completions of one task share a verdict and differ in length")

    notes, warnings = [], []
    if n_unscored:
        notes.append(f"{n_unscored} graded rows have no {marker} score (an empty completion) and "
                     "are left out")
    if n_not_binary:
        notes.append(f"{n_not_binary} rows without a 0/1 verdict (partial or unjudged) "
                     "are left out")
    notes.append(f"ranking accuracy over {rank.n} tasks with passing and failing completions; "
                 f"length concordance over {conc.n} tasks (0.5: no length preference)")
    if T < 10:
        warnings.append(f"only {T} tasks: the intervals are wide and approximate below 10 tasks")
    if conc.interval is not None and conc.interval.low > 0.5:
        warnings.append(f"{marker} prefers longer completions at a fixed verdict ({conc}): its "
                        "scores partly measure length")
    elif conc.interval is not None and conc.interval.high < 0.5:
        warnings.append(f"{marker} prefers shorter completions at a fixed verdict ({conc})")
    if rank.interval is not None and rank.interval.high < 0.5:
        warnings.append(f"{marker} ranks failing completions above passing ones ({rank})")
    if gain.interval is not None and gain.interval.high < 0:
        warnings.append(f"picking by {marker} is worse than a random pick ({gain})")
    return RewardRows(marker, best, pass1, oracle, gain, rank, conc, T, n_rows, n_unscored,
                      n_not_binary, top_ties, tuple(notes), tuple(warnings))
