"""What a log-likelihood scorer answers (:class:`Loglik`) and the registry of scorers by backend
kind; below :mod:`assay.models.loglik` (the cached API) and the scorer modules.

A scorer kind is a class built from the model's spec entry, registered under its backend's kind
(``@SCORERS.register("hf")``); a class attribute ``no_rolling`` says why it cannot score whole
documents, for the kinds that cannot.

Example:
    >>> from assay.models import openai_loglik  # registers "openai"
    >>> no_rolling("openai")[:26], no_rolling("no_such_kind")
    ("a document's perplexity is", None)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from assay.registry import Registry


class Scorer(Protocol):
    """What :func:`assay.models.loglik.loglikelihoods` asks of a scorer: the identity that keys
    its answers and one answer per (context, continuation) pair. A scorer may also offer
    ``score_batches`` and ``score_rolling_batches`` (``(indices, answers)`` per batch)."""

    def identity(self) -> dict[str, object]: ...

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Loglik]: ...


class RollingScorer(Scorer, Protocol):
    """A scorer that also scores whole documents in rolling windows (``perplexity:``)."""

    def score_rolling_batches(self, texts: Sequence[str]
                              ) -> Iterator[tuple[list[int], list[Loglik]]]: ...


#: backend kind -> the scorer class (``cls(model spec)``), filled by the scorer modules.
SCORERS: Registry[Callable[..., Scorer]] = Registry("log-likelihood scorer")


def no_rolling(kind: str) -> str | None:
    """Why the scorer of backend ``kind`` cannot score whole documents in rolling windows
    (``perplexity:``), or None when it can (or has no scorer: that is another refusal)."""
    return getattr(SCORERS.get(kind).obj, "no_rolling", None) if kind in SCORERS else None


@dataclass(frozen=True)
class Loglik:
    """The log-probability (natural log) of a continuation, whether greedy decoding would have
    produced it token by token, and how many tokens it spans."""

    logprob: float
    is_greedy: bool
    tokens: int

    def to_dict(self) -> dict[str, object]:
        return {"logprob": self.logprob, "is_greedy": self.is_greedy, "tokens": self.tokens}

