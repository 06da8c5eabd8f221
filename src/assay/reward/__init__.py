"""assay.reward: reward-model scoring (the score-reward-model stage) and the reward-model audit.

torch, transformers and sentence-transformers load only when a model is built, never on import.

Example:
    >>> from assay.reward import FunctionRewardModel
    >>> rm = FunctionRewardModel(lambda p, r: float(len(r)), name="length", version="1")
    >>> rm.score(["Q"], ["abc"]).tolist()
    [3.0]
"""

from __future__ import annotations

import importlib
from typing import Any

# The built-in kinds register on import (light modules: pydantic only, no torch), so
# REWARD_MODELS and PREFERENCE_DATA list them whichever module a caller imported first.
from assay.reward import kinds as kinds
from assay.reward import prefdata as prefdata

# name -> defining module; loaded on first use (PEP 562) so the torch adapters and matplotlib
# stay out of ``import assay.reward``.
_LAZY: dict[str, str] = {
    "PROTOCOL_VERSION": "assay.reward.base",
    "RewardModel": "assay.reward.base",
    "RewardModelError": "assay.reward.base",
    "ScoreRun": "assay.reward.base",
    "HFRewardModel": "assay.reward.hf",
    "Invariance": "assay.reward.hf",
    "EmbeddingRewardModel": "assay.reward.embedding",
    "bundled_model_path": "assay.reward.embedding",
    "FunctionRewardModel": "assay.reward.function",
    "length_reward": "assay.reward.function",
    "length_rewards": "assay.reward.function",
    "plan_batches": "assay.reward.batching",
    "score_view": "assay.reward.scoring",
    "score_key": "assay.reward.scoring",
    "audit": "assay.reward.auditing",
    "Audit": "assay.reward.auditing",
    "DimensionAudit": "assay.reward.auditing",
    "QuadrupleAudit": "assay.reward.auditing",
    "TournamentAudit": "assay.reward.auditing",
    "cluster_proportion": "assay.reward.stats",
    "length_bias": "assay.reward.stats",
    "SCORE_SCHEMA": "assay.reward.scoring",
}

__all__ = sorted(_LAZY)




def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'assay.reward' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
