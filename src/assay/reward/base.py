"""The reward-model protocol every adapter implements, its run record and input checks.

Torch-free: adapters import torch lazily; this module is what ``score_view`` and ``audit`` read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from assay.errors import DataError, RewardModelError

# Bump when the meaning of a stored score changes (template rendering, pooling, tie handling):
# it is part of every score cache key, so old caches stop matching instead of being reused.
PROTOCOL_VERSION = 1

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class ScoreRun:
    """What one ``score()`` call did: items, tokens, batches, truncations, OOM backoffs.

    ``truncated`` counts items whose input was cut to fit ``max_length`` (never silent);
    ``truncated_items`` lists their indices in the call's input order.

    Example:
        >>> r = ScoreRun(n_items=4, n_scored=3, truncated=1, truncated_items=(2,))
        >>> str(r)
        '4 items (3 forward), 1 truncated, 0 batches, 0 OOM backoffs'
    """

    n_items: int
    n_scored: int = 0
    n_tokens: int = 0
    n_padded_tokens: int = 0
    n_batches: int = 0
    truncated: int = 0
    truncated_items: tuple[int, ...] = ()
    oom_backoffs: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    dtype: str = "float32"
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        return (f"{self.n_items} items ({self.n_scored} forward), {self.truncated} truncated, "
                f"{self.n_batches} batches, {self.oom_backoffs} OOM backoffs")

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@runtime_checkable
class RewardModel(Protocol):
    """What assay needs from a reward model.

    ``score(prompts, responses)`` returns one finite float64 per (prompt, response), higher is
    better. ``fingerprint`` identifies weights, tokenizer, chat template and scoring protocol;
    it keys the score cache, so two models that can score differently must never share one.
    ``last_run`` describes the latest ``score()`` call (or is None before the first).
    """

    name: str

    @property
    def fingerprint(self) -> str: ...

    @property
    def last_run(self) -> ScoreRun | None: ...

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray: ...


def check_texts(prompts: Sequence[str], responses: Sequence[str]) -> tuple[list[str], list[str]]:
    """Validate ``score()`` inputs: equal-length sequences of non-empty strings.

    Example:
        >>> check_texts(["Q"], ["A"])
        (['Q'], ['A'])
    """
    for name, seq in (("prompts", prompts), ("responses", responses)):
        if isinstance(seq, (str, bytes)) or not isinstance(seq, Sequence):
            raise DataError(f"score(): {name} must be a list of strings, got {type(seq).__name__}")
    if len(prompts) != len(responses):
        raise DataError(
            f"score(): got {len(prompts)} prompts but {len(responses)} responses; pass one "
            "prompt per response (repeat a prompt for each of its responses)"
        )
    for name, seq in (("prompts", prompts), ("responses", responses)):
        for i, t in enumerate(seq):
            if not isinstance(t, str):
                raise DataError(
                    f"score(): {name}[{i}] is {type(t).__name__} ({t!r:.40}), not a string; "
                    "None is not the text 'None': fix or drop the item"
                )
            if name == "responses" and not t.strip():
                raise DataError(f"score(): responses[{i}] is empty; every response needs text")
    return list(prompts), list(responses)


def check_scores(scores: object, n: int, who: str) -> np.ndarray:
    """Coerce a model's output to a float64 vector of ``n`` finite values or raise, naming
    the first bad item (a NaN score is an error, never a tie or a loss).

    Example:
        >>> check_scores([1, 2.5], 2, "m").tolist()
        [1.0, 2.5]
    """
    try:
        arr = np.asarray(scores, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise RewardModelError(f"{who} returned scores that are not numbers: {e}") from None
    if arr.shape[0] != n:
        raise RewardModelError(f"{who} returned {arr.shape[0]} scores for {n} items")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise RewardModelError(
            f"{who} returned a non-finite score ({arr[i]}) for item {i} "
            f"({bad.size} such items); a reward must be a finite number"
        )
    return arr


def unique_index(keys: Sequence[K]) -> tuple[list[K], np.ndarray]:
    """Unique keys in first-seen order and, per input, the position of its key.

    Used to score each distinct (prompt, response) once.

    Example:
        >>> unique_index(["a", "b", "a"])
        (['a', 'b'], array([0, 1, 0]))
    """
    pos: dict[K, int] = {}
    inv = np.empty(len(keys), dtype=np.int64)
    for i, k in enumerate(keys):
        inv[i] = pos.setdefault(k, len(pos))
    return list(pos), inv
