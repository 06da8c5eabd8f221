"""assay: LLM-evaluation and reward-model studies with honest statistics.

The core library: plain Python + numpy/pandas/pyarrow/scipy; never imports prefect, and torch
only lazily inside ``assay.reward``. Public names load on first use so ``import assay`` is cheap.

Example:
    >>> import assay
    >>> r = assay.rows(["What is 2 + 3?"], [["5", "4"]], [[1, 0]])
    >>> len(r), r[0]["reward"]
    (2, 1.0)
"""

from __future__ import annotations

import importlib
from typing import Any

# Eager: these are the core contract. ``assay.rows`` is the function (defined in
# assay/builder.py), bound here after the submodule assay/rows.py was imported, so the function,
# not the module, is ``assay.rows``.
from assay.builder import rows as rows
from assay.grading import grade as grade
from assay.rows import Rows as Rows

__version__ = "0.1.0"

# name -> module that defines it. Loaded lazily (PEP 562) so importing assay stays light and
# stage modules can land independently without editing this file.
_LAZY: dict[str, str] = {
    "Store": "assay.store",
    "content_hash": "assay.hashing",
    "pass_at": "assay.measure",
    "pass_at_by": "assay.measure",
    "compare": "assay.measure",
    "compare_by": "assay.measure",
    "eval_variance": "assay.measure",
    "holdout_size": "assay.measure",
    "select": "assay.measure",
    "decontaminate": "assay.decontam",
    "contamination": "assay.decontam",
    "ContaminationIndex": "assay.decontam",
    "PassAt": "assay.measure",
    "PassAtBy": "assay.measure",
    "Comparison": "assay.measure",
    "ComparisonBy": "assay.measure",
    "EvalVariance": "assay.measure",
    "HoldoutSize": "assay.measure",
    "Selection": "assay.measure",
    "DataView": "assay.data",
    "make_pair": "assay.data",
    "load_diagnostic_v3": "assay.data",
    "humaneval": "assay.offline",
    "seeded_code_policy": "assay.offline",
    "score_view": "assay.reward",
    "HFRewardModel": "assay.reward",
    "EmbeddingRewardModel": "assay.reward",
    "FunctionRewardModel": "assay.reward",
    "generate": "assay.models",
    "judge_trust": "assay.verify.trust",
    "Verdict": "assay.judging",
    "StudySpec": "assay.spec",
    "load_spec": "assay.spec",
}
_SUBMODULES = {
    "builder", "errors", "hashing", "store", "verify", "measure", "decontam", "data", "reward",
    "offline", "spec", "judging", "models", "grading", "results", "stages", "report", "cli",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = getattr(module, name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        module = importlib.import_module(f"assay.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'assay' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)
