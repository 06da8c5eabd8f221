"""A model entry's relative ``path`` resolves from the spec file's folder, like every other path
in a spec: ``assay run`` from another working directory (or on a cluster worker, whose working
folder is its own) finds the model beside the spec, and two specs' ``./lm`` are two models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.tiny_lm import build_tiny_lm

from assay.models.generation import shared_backend
from assay.spec import load_spec

SPEC = """name: rel
sources:
  - name: a
    kind: file
    path: p.jsonl
    fields: {prompt: q, reference: gold, task_id: id}
    generate:
      model: {kind: hf, path: ./lm, device: cpu}
      api: completions
      params: {max_tokens: 3, temperature: 0}
    verifier: {kind: exact_match}
"""


def _study(folder: Path, seed: int) -> Path:
    folder.mkdir(parents=True)
    build_tiny_lm(folder / "lm", seed=seed)
    (folder / "p.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"what is {i} + {i} ?", "gold": str(2 * i)}) + "\n"
        for i in range(3)))
    (folder / "spec.yaml").write_text(SPEC)
    return folder / "spec.yaml"


def test_two_specs_relative_models_are_their_own(tmp_path: Path) -> None:
    one = load_spec(_study(tmp_path / "one", seed=0)).sources[0].generate.model
    two = load_spec(_study(tmp_path / "two", seed=1)).sources[0].generate.model
    assert one.model_dump() == two.model_dump()  # the same entry as written
    b1, b2 = shared_backend(one), shared_backend(two)
    assert b1 is not b2
    assert Path(b1.dir).resolve() == (tmp_path / "one" / "lm").resolve()
    assert Path(b2.dir).resolve() == (tmp_path / "two" / "lm").resolve()
    assert shared_backend(one) is b1  # still built once per folder


@pytest.mark.slow
def test_assay_run_from_another_folder_finds_the_model_beside_the_spec(tmp_path: Path) -> None:
    spec = _study(tmp_path / "study", seed=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ASSAY_STORE": str(tmp_path / "store")}
    p = subprocess.run([str(Path(sys.executable).with_name("assay")), "run", str(spec),
                        "--output", str(tmp_path / "out"), "--no-view"],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (src,) = report["sources"]
    assert (src["rows"], src["generation"]["completions"], src["generation"]["errors"]) == (3, 3, 0)
