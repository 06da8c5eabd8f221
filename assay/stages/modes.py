"""Each source mode's per-shard scoring stage: the one table the chain, the graph and the head
start read, so none of them probes a source's optional fields to find out what it is.

Example:
    >>> from assay.stages.modes import LOGLIK_STAGES
    >>> sorted(LOGLIK_STAGES)
    ['choices', 'perplexity']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from assay.stages.cache import StageResult
from assay.stages.score_choices import run_score_choices
from assay.stages.score_documents import run_score_documents

#: Modes whose rows a model scores by log-likelihood, shard by shard, in place of generate and
#: grade (``scores``, ``verify`` and ``generate`` sources are graded by the grade stage).
LOGLIK_STAGES: Mapping[str, Callable[..., StageResult]] = {
    "choices": run_score_choices,
    "perplexity": run_score_documents,
}

__all__ = ["LOGLIK_STAGES"]
