"""FunctionRewardModel: a Python function as a reward model (heuristics, planted-bias models).

Calibration models with a known bias (for instance "longer is better") check that the audit sees it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from assay.binding import Binding
from assay.errors import SpecError
from assay.hashing import code_identity, combine
from assay.reward.base import (
    PROTOCOL_VERSION,
    RewardModelError,
    ScoreRun,
    check_scores,
    check_texts,
)
from assay.reward.batching import batch_scored


class FunctionRewardModel:
    """Wrap ``fn(prompt, completion) -> float`` (or, with ``batched=True``,
    ``fn(prompts, completions) -> sequence of floats``, called once per ``batch_size`` items, by
    default once per ``score()``) as a reward model. The spec's ``kind: function`` is batched.
    The function is called by its parameter names (:mod:`assay.binding`; ``response(s)`` is
    accepted for ``completion(s)``); a function with none of those names (``lambda p, r``) is
    called positionally, unless ``by_name=True`` (a function named in a spec).

    The fingerprint hashes ``name`` and :func:`assay.hashing.code_identity`: ``version`` when
    given, else the function's module source and the helper modules it imports from its folder
    (or ``base_dir``, the spec's), so editing them invalidates cached scores. Behaviour that the
    source does not show (a closure over a changing value, a model loaded elsewhere) must be
    named in ``version``. A function without retrievable source (a builtin, a lambda typed at a
    prompt) needs ``version``.
    ``calls`` counts the items passed to ``fn`` (cache tests read it).

    Example:
        >>> longer = FunctionRewardModel(lambda p, r: len(r), name="length", version="1")
        >>> longer.score(["Q", "Q"], ["short", "much longer"]).tolist()
        [5.0, 11.0]
    """

    def __init__(self, fn: Callable[..., object], *, name: str | None = None,
                 version: str | None = None, batched: bool = False,
                 batch_size: int | None = None, by_name: bool = False,
                 base_dir: str | None = None) -> None:
        if not callable(fn):
            raise RewardModelError(f"FunctionRewardModel needs a callable, got {type(fn).__name__}")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise RewardModelError(
                f"FunctionRewardModel(batch_size={batch_size!r}): a positive integer, "
                "or None for one call per score()"
            )
        self.fn = fn
        self.batched = batched
        self.batch_size = batch_size
        self.name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        self.version = version
        names = ("prompts", "completions") if batched else ("prompt", "completion")
        self._bind = Binding(fn, names, what=f"reward function {self.name!r}",
                             aliases={"responses": "completions", "response": "completion"},
                             positional=None if by_name else names)
        try:
            self._code = code_identity(fn, version=version, base_dir=base_dir,
                                       what=f"FunctionRewardModel({self.name!r}):")
        except SpecError as e:
            raise RewardModelError(str(e)) from None
        self._last_run: ScoreRun | None = None
        self.calls = 0

    @property
    def fingerprint(self) -> str:
        return combine("rm", "function", self.name, self._code,
                       {"batched": self.batched, "protocol": PROTOCOL_VERSION})

    @property
    def last_run(self) -> ScoreRun | None:
        return self._last_run

    def __repr__(self) -> str:
        return f"FunctionRewardModel({self.name!r})"

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        """One float64 per item; a non-finite value is an error naming the item."""
        t0 = time.perf_counter()
        prompts, responses = check_texts(prompts, responses)
        n_calls = 0
        if self.batched:
            size = self.batch_size or max(len(prompts), 1)
            raw: list[object] = []
            for lo in range(0, len(prompts), size):
                part = self._bind.call({"prompts": prompts[lo:lo + size],
                                        "completions": responses[lo:lo + size]})
                n_calls += 1
                got = len(part) if hasattr(part, "__len__") else None
                if got != len(prompts[lo:lo + size]):
                    raise RewardModelError(
                        f"{self.name} returned "
                        f"{got if got is not None else type(part).__name__} scores for a batch "
                        f"of {len(prompts[lo : lo + size])} (items {lo}..); a batched reward "
                        "function returns one number per (prompt, response)"
                    )
                raw.extend(part)
                batch_scored(len(raw), len(prompts))
        else:
            raw = []
            for i, (p, r) in enumerate(zip(prompts, responses)):
                v = self._bind.call({"prompt": p, "completion": r})
                if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                    raise RewardModelError(
                        f"{self.name} returned {type(v).__name__} ({v!r:.40}) for item {i}; a "
                        "reward function must return a number")
                raw.append(v)
                n_calls += 1
                batch_scored(len(raw), len(prompts))
        self.calls += len(prompts)
        scores = check_scores(raw, len(prompts), self.name)
        self._last_run = ScoreRun(n_items=len(prompts), n_scored=len(prompts),
                                  n_batches=n_calls,
                                  seconds=time.perf_counter() - t0)
        return scores


def length_rewards(prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
    """:func:`length_reward` over a batch, the form a spec's ``kind: function`` calls.

    Example:
        >>> length_rewards(["Q", "Q"], ["four", "seven!!"])
        [4.0, 7.0]
    """
    return [length_reward(p, r) for p, r in zip(prompts, responses)]


def length_reward(prompt: str, response: str) -> float:
    """A planted length-preferring calibration model: the response's length in characters.

    Example:
        >>> length_reward("Q", "four")
        4.0
    """
    return float(len(response))
