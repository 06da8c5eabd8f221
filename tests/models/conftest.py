"""Fixtures for the model tests: the OpenAI-protocol server on 127.0.0.1 and a fresh store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.openai_server import OpenAIServer


@pytest.fixture(autouse=True)
def fresh_budgets() -> Iterator[None]:
    """Each test starts with no server budgets (a port the OS reuses is another server), and
    ends with none leaking a slot or a parked waiter: every path gives its slot back."""
    from assay.models import openai

    openai._BUDGETS.clear()
    yield
    leaks = {url: (b.in_flight, len(b._waiters)) for url, b in openai._BUDGETS.items()
             if b.in_flight or b._waiters or b.calls}
    openai._BUDGETS.clear()
    assert not leaks, f"server budgets left with (in flight, waiters): {leaks}"


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff in milliseconds, so retry-heavy tests take seconds (the rule is unchanged)."""
    from assay.models import openai

    monkeypatch.setattr(openai, "BACKOFF_BASE_S", 0.005)
    monkeypatch.setattr(openai, "BACKOFF_MAX_S", 0.05)


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    srv = OpenAIServer(["tiny-ckpt", "other-ckpt"]).start()
    yield srv
    srv.stop()


@pytest.fixture
def store(tmp_path):
    from assay.store import Store

    return Store(tmp_path / "store")


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama + WordLevel tokenizer saved to a temp dir, built once per session."""
    from helpers.tiny_lm import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))
