"""Fixtures for the model tests: the OpenAI-protocol server on 127.0.0.1 and a fresh store."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from openai_server import OpenAIServer  # noqa: E402


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    srv = OpenAIServer(["tiny-ckpt", "other-ckpt"]).start()
    yield srv
    srv.stop()


@pytest.fixture
def store(tmp_path):
    from assay.store import Store

    return Store(tmp_path / "store")
