"""Each source mode's per-shard stages: the one table the study graph (and so the one-slot order
and the Prefect flow) reads, so nothing probes a source's optional fields to find out what it is.

A mode's stages run shard by shard, each on the previous one's output (the first on the
source's filtered rows, cut by its ``rows_per_shard``); a mode with none keeps the filtered
rows as they are (``scores``: given verdicts).

Example:
    >>> MODE_STAGES["generate"], MODE_STAGES["scores"]
    (('generate', 'grade'), ())
    >>> sorted(LOGLIK_STAGES)
    ['choices', 'perplexity']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from assay.sources.base import Mode
from assay.stages import generate, grade, score_choices, score_documents  # noqa: F401 (declared)
from assay.stages.cache import StageResult
from assay.stages.declare import STAGES

#: mode -> the names of its per-shard stages, in the order they run on a shard.
MODE_STAGES: Mapping[Mode, tuple[str, ...]] = {
    "scores": (),
    "verify": ("grade",),
    "generate": ("generate", "grade"),
    "choices": ("score-choices",),
    "perplexity": ("score-documents",),
}

#: Modes whose rows a model scores by log-likelihood, shard by shard, in place of generate and
#: grade: the mode's scoring stage function.
LOGLIK_STAGES: Mapping[str, Callable[..., StageResult]] = {
    mode: STAGES[names[0]].fn for mode, names in MODE_STAGES.items()
    if mode in ("choices", "perplexity")}

__all__ = ["LOGLIK_STAGES", "MODE_STAGES"]
