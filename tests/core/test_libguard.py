"""assay.libguard: what a spec's kinds declare is imported before the graph (and what it leaves
out), and the grading pool never forks while another thread holds the libraries' lock."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from assay import grading, libguard
from assay.spec import parse_spec


def test_spec_imports_follow_the_kinds(tmp_path: Path) -> None:
    spec = parse_spec("""
name: t
sources:
  - {name: a, kind: file, path: a.jsonl, fields: {prompt: q, completion: c}, verifier:
     {kind: judge, params: {model: {kind: hf, path: ./m}}}}
  - {name: b, kind: hf_dataset, path: d, fields: {prompt: q, completion: c},
     verifier: {kind: math_equal}}
reward:
  models:
    - {name: st, kind: embedding, params: {backend: sentence-transformers}}
    - {name: bundled, kind: embedding}
  data: null
  score: {sources: [a]}
""", base_dir=str(tmp_path))
    got = libguard.spec_imports(spec)
    for want in ("torch", "transformers:PreTrainedTokenizerBase",
                 "transformers:AutoModelForCausalLM", "datasets", "math_verify",
                 "sentence_transformers", "tokenizers"):
        assert want in got, (want, got)
    # a model that loads in a process of its own is not imported here
    skipped = libguard.spec_imports(spec, skip=spec.reward.scoring_models())
    assert "sentence_transformers" not in skipped and "datasets" in skipped
    plain = parse_spec("name: p\nsources:\n  - {name: a, kind: file, path: a.jsonl, fields: "
                       "{prompt: q, completion: c, reward: r}}\n", base_dir=str(tmp_path))
    assert libguard.spec_imports(plain) == ()


def test_the_grading_pool_forks_only_when_no_thread_holds_the_libraries() -> None:
    held, release, forked = threading.Event(), threading.Event(), []

    def hold() -> None:  # another node, half way through a heavy import or a datasets load
        with libguard.LIBRARIES:
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(60)
    forker = threading.Thread(target=lambda: forked.extend(
        grading._fork_slots(multiprocessing.get_context("fork"), None, 1)))
    forker.start()
    try:
        forker.join(1.0)  # whatever the wait, no fork may happen while the lock is held
        assert forker.is_alive() and forked == []
    finally:
        release.set()
        holder.join(60)
        forker.join(60)
    try:
        assert len(forked) == 1 and forked[0].proc.is_alive()
    finally:
        for s in forked:
            s.stop()
