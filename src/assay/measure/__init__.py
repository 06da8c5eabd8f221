"""The measure stage: pass@k, paired comparison, variance decomposition, sizing, RL selection.

Every call reads any row-like input, groups by task_id, and puts intervals over tasks.

Example:
    >>> import assay
    >>> r = assay.rows(["What is 2 + 3?", "What is 7 * 6?"], [["5", "4"], ["42", "42"]],
    ...                [[1, 0], [1, 1]])
    >>> assay.pass_at(r).n_tasks
    2
"""

from __future__ import annotations

from assay.measure.categories import ComparisonBy, PassAtBy, compare_by, pass_at_by
from assay.measure.comparison import Comparison, MetricComparison, compare
from assay.measure.passk import PassAt, pass_at, pass_at_k_unbiased, pass_hat_k_unbiased
from assay.measure.selection import Gate, Selection, select
from assay.measure.signflip import SignFlip, signflip_test
from assay.measure.sizing import HoldoutSize, holdout_size
from assay.measure.variance import EvalVariance, VarianceComponents, eval_variance

__all__ = [
    "Comparison",
    "ComparisonBy",
    "EvalVariance",
    "Gate",
    "HoldoutSize",
    "MetricComparison",
    "PassAt",
    "PassAtBy",
    "Selection",
    "SignFlip",
    "VarianceComponents",
    "compare",
    "compare_by",
    "eval_variance",
    "holdout_size",
    "pass_at",
    "pass_at_by",
    "pass_at_k_unbiased",
    "pass_hat_k_unbiased",
    "select",
    "signflip_test",
]
