"""What a log-likelihood scorer answers (:class:`Loglik`) and the registry of scorers by backend
kind; below :mod:`assay.models.loglik` (the cached API) and the scorer modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: backend kind -> ``factory(model spec) -> scorer`` (filled by the scorer modules).
SCORERS: dict[str, Callable[[Any], Any]] = {}
#: backend kind -> why its scorer cannot score whole documents in rolling windows (perplexity:),
#: for the kinds that cannot.
NO_ROLLING: dict[str, str] = {}


@dataclass(frozen=True)
class Loglik:
    """The log-probability (natural log) of a continuation, whether greedy decoding would have
    produced it token by token, and how many tokens it spans."""

    logprob: float
    is_greedy: bool
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"logprob": self.logprob, "is_greedy": self.is_greedy, "tokens": self.tokens}


def register_scorer(kind: str, *, no_rolling: str | None = None
                    ) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Register the log-likelihood scorer of a backend kind; ``no_rolling``: why it cannot score
    whole documents (``perplexity:`` is then refused at validation with that reason)."""
    def deco(factory: Callable[[Any], Any]) -> Callable[[Any], Any]:
        SCORERS[kind] = factory
        if no_rolling is not None:
            NO_ROLLING[kind] = no_rolling
        return factory
    return deco
