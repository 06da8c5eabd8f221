"""A multiple-choice study and a perplexity study through the Prefect flow on a real server:
the scoring stages run as their gpu-slot tasks, and a rerun is fully cached."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a Prefect flow run twice on a tiny model
def test_choice_and_perplexity_study_as_a_flow(prefect_server: str, tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.tiny_bpe import build_tiny_bpe_lm

    from assay import stages
    from assay.flows.study import run_spec
    from assay.tasks.stages import TASKS

    # each log-likelihood stage's task runs its stage function, holding the gpu slot
    for name, fn in (("score-choices", stages.run_score_choices),
                     ("score-documents", stages.run_score_documents)):
        assert TASKS[name].name == name and stages.STAGES[name].fn is fn
        assert stages.STAGES[name].device
    model = build_tiny_bpe_lm(tmp_path / "m")
    lines = (ROOT / "configs" / "data" / "mmlu_tiny" / "test.jsonl").read_text().splitlines()[:8]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"text": json.loads(x)["question"]}) + "\n" for x in lines))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
name: llflow
sources:
  - name: mc
    kind: file
    path: q.jsonl
    fields: {{prompt: question}}
    choices: {{model: {{kind: hf, path: "{model}", dtype: float32}}}}
  - name: ppl
    kind: file
    path: d.jsonl
    perplexity: {{model: {{kind: hf, path: "{model}", dtype: float32}}}}
measure:
  choice_accuracy: {{}}
  perplexity: {{}}
execution: {{shard_rows: 4}}
""")
    first = run_spec(str(spec), str(tmp_path / "run1"), str(tmp_path / "store"), embedded=True)
    assert "score-choices[mc shard 2/2]" in first["computed"]
    assert "score-documents[ppl shard 1/2]" in first["computed"]
    second = run_spec(str(spec), str(tmp_path / "run2"), str(tmp_path / "store"), embedded=True)
    assert second["computed"] == []
    md = (tmp_path / "run1" / "report.md").read_text()
    assert "choice_accuracy[mc]" in md and "perplexity[ppl]" in md and "bits_per_byte" in md
    assert md == (tmp_path / "run2" / "report.md").read_text()
