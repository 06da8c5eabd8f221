"""Fixtures for the model tests: the OpenAI-protocol server on 127.0.0.1 and a fresh store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.openai_server import OpenAIServer


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
