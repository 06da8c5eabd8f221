"""Issue 52: a log-likelihood has the same bits whatever else is scored with it, in any order,
at any torch thread count, resumed from a journal or not, and in a fresh process run as a Dask
nanny starts its workers (``OMP_NUM_THREADS=1``) -- compared as ``float.hex``, not to a tolerance.

The model is the tests' byte-level BPE Llama at hidden 64: on this code's old batched scoring
its answers differed by batch (row neighbours, padding, kept positions) and by thread count
(3 and 6 threads against 1), so each check below fails there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from assay.models.hf_loglik import HFScorer
from assay.models.loglik import loglikelihoods

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers.tiny_bpe import build_tiny_bpe_lm

    return build_tiny_bpe_lm(tmp_path_factory.mktemp("bits"), hidden=64)


@pytest.fixture
def threads() -> Iterator[None]:
    """Restores the test process's torch thread count after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _pairs() -> list[tuple[str, str]]:
    """ARC-style (the choice texts: multi-token continuations after the question) and
    MMLU-style (one-token letters after one context) requests over the shipped fixture."""
    recs = [json.loads(x) for x in
            (ROOT / "configs" / "data" / "mmlu_tiny" / "test.jsonl").read_text().splitlines()]
    pairs = [(r["question"], " " + c) for r in recs for c in r["choices"]]
    return pairs + [(r["question"] + "\nAnswer:", " " + x) for r in recs for x in "ABCD"]


def _bits(answers: list) -> list[str]:
    return [f"{a.logprob.hex()} {a.is_greedy} {a.tokens}" for a in answers]


def _scorer(lm: Path) -> HFScorer:
    return HFScorer({"kind": "hf", "path": str(lm), "dtype": "float32", "device": "cpu"})


def test_same_bits_alone_in_any_batch_and_order(lm: Path) -> None:
    pairs = _pairs()
    sc = _scorer(lm)
    alone = [_bits(sc.score([p]))[0] for p in pairs]
    assert _bits(sc.score(pairs)) == alone
    assert _bits(sc.score(pairs[::-1]))[::-1] == alone
    # a request next to a longer one (old code: right-padded into its row's width)
    assert _bits(sc.score([pairs[0], (pairs[0][0] + " " + pairs[1][0], " water")]))[0] == alone[0]


def test_same_bits_at_any_torch_thread_count(lm: Path, threads: None) -> None:
    pairs = _pairs()
    sc = _scorer(lm)
    torch.set_num_threads(1)
    want = _bits(sc.score(pairs))
    for n in (3, 6):
        torch.set_num_threads(n)
        assert _bits(sc.score(pairs)) == want, n
        assert torch.get_num_threads() == n  # the caller's setting is restored


def test_a_resumed_call_gives_the_bits_of_an_uninterrupted_one(lm: Path, tmp_path: Path) -> None:
    """A killed run's rerun: every request but three already in the journal. The three are
    scored on their own (old code: one small batch instead of rows among all the others), and
    every answer still has the bits of one uninterrupted call."""
    from assay.store import Store

    pairs = _pairs()
    whole = _bits(loglikelihoods(pairs, _scorer(lm), store=Store(tmp_path / "a")))
    left = {0, 1, 2}
    resumed = Store(tmp_path / "b")
    loglikelihoods([p for i, p in enumerate(pairs) if i not in left], _scorer(lm), store=resumed)
    again = _scorer(lm)
    assert _bits(loglikelihoods(pairs, again, store=resumed)) == whole
    assert again.stats["forward_rows"] == 3  # the three were scored now, the rest read back


_CHILD = """
import json, sys
from assay.models.hf_loglik import HFScorer
pairs = [tuple(p) for p in json.loads(sys.stdin.read())]
sc = HFScorer({"kind": "hf", "path": sys.argv[1], "dtype": "float32", "device": "cpu"})
print(json.dumps([f"{a.logprob.hex()} {a.is_greedy} {a.tokens}" for a in sc.score(pairs)]))
"""


def test_a_fresh_single_thread_process_gives_the_same_bits(lm: Path, threads: None) -> None:
    """The Dask nanny's environment (one OpenMP/MKL thread, a cold process) against this process
    at six torch threads."""
    pairs = _pairs()
    torch.set_num_threads(6)
    here = _bits(_scorer(lm).score(pairs))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", _CHILD, str(lm)], input=json.dumps(pairs),
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.splitlines()[-1]) == here


def test_the_thread_count_is_in_the_identity_and_checked(lm: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers at another ASSAY_LOGLIK_THREADS are another cache key, never mixed into one
    journal; a value that is not a count is one error naming the variable."""
    from assay.errors import SpecError

    monkeypatch.delenv("ASSAY_LOGLIK_THREADS", raising=False)
    sc = _scorer(lm)
    assert sc.identity()["cpu_threads"] == 1
    monkeypatch.setenv("ASSAY_LOGLIK_THREADS", "4")
    assert sc.identity()["cpu_threads"] == 4
    monkeypatch.setenv("ASSAY_LOGLIK_THREADS", "all")
    with pytest.raises(SpecError, match="ASSAY_LOGLIK_THREADS='all'"):
        sc.identity()
