"""The openai log-likelihood scorer against a real loopback server serving a tiny model's
echoed logprobs: equal to the hf scorer (and so to lm-eval) on the same model; retries; errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from assay.errors import GenerationError
from assay.models.hf_loglik import HFScorer
from assay.models.loglik import loglikelihoods
from assay.models.openai_loglik import OpenAIScorer


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers.tiny_bpe import build_tiny_bpe_lm

    return build_tiny_bpe_lm(tmp_path_factory.mktemp("bpe_oa"))


Q = "water is the answer of it?\nAnswer:"
PAIRS = [(Q, " A"), (Q, " B"),
         ("Answer: ", "C"), ("who can call the people", " over the water"),
         ("what number did they", " find")]


def _entry(url: str) -> dict:
    return {"kind": "openai", "base_url": url, "model": "tiny", "max_retries": 3,
            "retry_total_s": 60}


def test_openai_echo_equals_hf_scorer(bpe_dir: Path, tmp_path: Path) -> None:
    from helpers.logprob_server import LogprobServer

    from assay.store import Store

    want = HFScorer({"kind": "hf", "path": str(bpe_dir), "dtype": "float32"}).score(PAIRS)
    with LogprobServer(bpe_dir, faults=[503]) as srv:
        scorer = OpenAIScorer(_entry(srv.base_url))
        got = loglikelihoods(PAIRS, scorer, store=Store(tmp_path / "s"))
        assert scorer.stats["retries"] == 1 and srv.requests == len(PAIRS) + 1
        np.testing.assert_allclose([g.logprob for g in got], [w.logprob for w in want],
                                   atol=1e-4, rtol=0)
        assert [g.is_greedy for g in got] == [w.is_greedy for w in want]
        assert [g.tokens for g in got] == [w.tokens for w in want]
        again = loglikelihoods(PAIRS, OpenAIScorer(_entry(srv.base_url)),
                               store=Store(tmp_path / "s"))
        assert srv.requests == len(PAIRS) + 1  # all from the journal
        assert again == got


def test_server_without_echo_is_a_clear_error(bpe_dir: Path) -> None:
    from helpers.logprob_server import LogprobServer

    with LogprobServer(bpe_dir, echo=False) as srv:
        with pytest.raises(GenerationError, match="got no token of its own"):
            OpenAIScorer(_entry(srv.base_url)).score(PAIRS[:1])
    with LogprobServer(bpe_dir, faults=[400]) as srv:
        with pytest.raises(GenerationError, match="HTTP 400"):
            OpenAIScorer(_entry(srv.base_url)).score(PAIRS[:1])
        with pytest.raises(GenerationError, match="empty context"):
            OpenAIScorer(_entry(srv.base_url)).score([("", "the")])
