"""A source says its mode once (``SourceSpec.mode``), and the stages take their per-shard scorer
from one table keyed by it."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.spec import load_spec
from assay.stages import run_score_choices, run_score_documents
from assay.stages.modes import LOGLIK_STAGES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _source(tmp_path: Path, body: str) -> object:
    (tmp_path / "d.jsonl").write_text('{"q": "x", "a": "y", "r": 1.0, "c": ["p", "q"], "l": 0}\n')
    (tmp_path / "s.yaml").write_text(f"name: m\nsources:\n  - {{name: s, kind: file, "
                                     f"path: d.jsonl, {body}}}\n")
    return load_spec(tmp_path / "s.yaml").sources[0]


@pytest.mark.parametrize("body, mode", [
    ("fields: {prompt: q, completion: a, reward: r}", "scores"),
    ("fields: {prompt: q, completion: a, reference: a}, verifier: {kind: exact_match}", "verify"),
    ("fields: {prompt: q, reference: a}, verifier: {kind: exact_match}, generate: {model: "
     "{kind: openai, base_url: 'http://127.0.0.1:9/v1', model: m}}", "generate"),
    ("fields: {prompt: q}, choices: {model: {kind: hf, path: m}, field: c, answer: l}",
     "choices"),
    ("perplexity: {model: {kind: hf, path: m}, field: q}", "perplexity"),
])
def test_each_mode_is_said_once(tmp_path: Path, body: str, mode: str) -> None:
    src = _source(tmp_path, body)
    assert src.mode == mode  # type: ignore[attr-defined]
    loglik = mode in ("choices", "perplexity")
    assert (src.scoring_model is not None) == loglik  # type: ignore[attr-defined]
    assert (mode in LOGLIK_STAGES) == loglik


def test_the_table_names_the_stages() -> None:
    assert LOGLIK_STAGES == {"choices": run_score_choices, "perplexity": run_score_documents}


def test_shipped_specs_modes() -> None:
    modes = {p.name: [s.mode for s in load_spec(p).sources]
             for p in sorted(CONFIGS.glob("*.yaml"))}
    assert modes["mmlu_tiny.yaml"] == ["choices"] * len(modes["mmlu_tiny.yaml"])
    assert "generate" in modes["generate_openai.yaml"]
    assert all(m in ("scores", "verify", "generate", "choices", "perplexity")
               for ms in modes.values() for m in ms)
