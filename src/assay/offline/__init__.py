"""Benchmarks that ship offline: HumanEval problems and a seeded synthetic code policy.

``humaneval()`` feeds ``assay.rows()``; ``seeded_code_policy()`` stands in for a model.
"""

from assay.offline.policy import (
    VARIANT_KINDS,
    VARIANT_WEIGHTS,
    broken_variant,
    difficulty,
    p_correct,
    sample_kinds,
    seeded_code_policy,
)
from assay.offline.problems import CodeBenchmark, CodeProblem, humaneval

__all__ = [
    "CodeBenchmark", "CodeProblem", "VARIANT_KINDS", "VARIANT_WEIGHTS", "broken_variant",
    "difficulty", "humaneval", "p_correct", "sample_kinds", "seeded_code_policy",
]
