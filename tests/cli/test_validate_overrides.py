"""``assay validate`` takes the overrides ``assay run`` takes (--set, --model, --revision), so
it checks the study that command would run, not the spec file alone (issue 47)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.cli import main

SPEC = """name: v
sources:
  - name: m
    kind: file
    path: nope.jsonl
    fields: {prompt: q, reference: gold}
    generate: {model: {kind: openai, model: ckpt-1, base_url: "http://127.0.0.1:9/v1"}}
    verifier: {kind: exact_match}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    (tmp_path / "d.jsonl").write_text(json.dumps({"q": "1 + 1 = ?", "gold": "2"}) + "\n")
    p = tmp_path / "s.yaml"
    p.write_text(SPEC)
    return p


def _checksum(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("checksum: "))


def test_set_changes_what_is_validated(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(spec)]) == 2
    assert "sources[0].path: file not found" in capsys.readouterr().err
    assert main(["validate", str(spec), "--set", "sources.m.path=d.jsonl"]) == 0
    assert "ok (sources: m)" in capsys.readouterr().out


def test_a_bad_override_is_one_error_line(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["validate", str(spec), "--set", "sources.m.path=d.jsonl",
               "--set", "sources.m.verifier.kind=no_such_verifier"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "verifier" in err


def test_model_and_revision_reach_the_checksum(spec: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    base = ["validate", str(spec), "--set", "sources.m.path=d.jsonl"]
    assert main(base) == 0
    plain = _checksum(capsys.readouterr().out)
    assert main([*base, "--model", "ckpt-2"]) == 0
    model = _checksum(capsys.readouterr().out)
    assert main([*base, "--model", "ckpt-2", "--revision", "abc"]) == 0
    revision = _checksum(capsys.readouterr().out)
    assert len({plain, model, revision}) == 3
    # the same override spelled as --set is the same study
    assert main([*base, "--set", "generate.model.model=ckpt-2"]) == 0
    assert _checksum(capsys.readouterr().out) == model
