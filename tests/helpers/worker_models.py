"""Reward-model entries for the scoring worker's tests: picklable, importable by a spawned child.

Each behaves as ``behavior`` says: score, fail to build, exit mid-score, hang mid-score.
"""

from __future__ import annotations

import os
import time

import numpy as np

from assay.reward.base import RewardModelError


class Adapter:
    fingerprint = "rm:test-worker"
    device = "cpu"

    def __init__(self, behavior: str) -> None:
        self.behavior = behavior

    def score(self, prompts: list[str], responses: list[str]) -> np.ndarray:
        if self.behavior == "exit":
            os._exit(3)
        if self.behavior == "hang":
            time.sleep(3600)
        return np.array([len(p) / 7 + len(r) / 3 for p, r in zip(prompts, responses)])


class ChatAdapter(Adapter):
    def score_conversations(self, convs: list, responses: list[str]) -> np.ndarray:
        return np.array([len(c) + len(r) / 11 for c, r in zip(convs, responses)])


class Entry:
    """What a spec's reward-model entry gives the worker: a name and ``build(paths)``."""

    kind = "test"

    def __init__(self, name: str, behavior: str = "ok") -> None:
        self.name, self.behavior = name, behavior

    def build(self, paths: object) -> Adapter:
        if self.behavior == "fail_build":
            raise RewardModelError(f"{self.name}: cannot load (bad weights)")
        return (ChatAdapter if self.behavior == "chat" else Adapter)(self.behavior)
