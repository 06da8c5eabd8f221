"""docs/extending.md's worked examples run as written, and a kind registered from a module named
in a spec's ``plugins:`` validates, runs, and appears in ``assay schema``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_extending_examples_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "extending.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    # A fresh interpreter: the example registers kinds, which must not leak into other tests.
    script = tmp_path / "examples.py"
    script.write_text("\n\n".join(blocks) + "\nprint('examples ok')\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "examples ok" in res.stdout, res.stderr[-3000:]


PLUGIN = '''
"""Kinds of a user's own: a verifier and a source, registered on import."""
from typing import Literal

import assay
from assay.judging import Verifier
from assay.sources import SOURCES, SourceSpec
from assay.verify.registry import VERIFIERS


@VERIFIERS.register("ends_with")
class EndsWith(Verifier):
    name = "ends_with"
    needs_reference = False

    def __init__(self, suffix: str = "!") -> None:
        self.suffix = suffix

    def check(self, candidate, reference, row):
        return float(candidate.endswith(self.suffix))


class Greetings(SourceSpec):
    kind: Literal["greetings"]
    n: int = 3

    def build_rows(self, study):
        return assay.rows([f"greet {i}" for i in range(self.n)],
                          [["hi!", "hi"] for _ in range(self.n)])


SOURCES.register("greetings", spec=Greetings)(Greetings)
'''

SPEC = """
name: plugged
plugins: [mykinds]
sources:
  - {name: g, kind: greetings, n: 4, verifier: {kind: ends_with, params: {suffix: "!"}}}
measure: {pass_at: {k: 2}}
"""


def test_plugin_kinds_validate_run_and_appear_in_the_schema(tmp_path: Path) -> None:
    (tmp_path / "mykinds.py").write_text(textwrap.dedent(PLUGIN))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env_cwd = tmp_path.parent  # not the spec's folder: the module must import via the spec's path
    v = subprocess.run([str(BIN / "assay"), "validate", str(spec)], capture_output=True, text=True,
                       cwd=env_cwd, timeout=120)
    assert v.returncode == 0, v.stderr
    s = subprocess.run([str(BIN / "assay"), "schema", str(spec)], capture_output=True, text=True,
                       cwd=env_cwd, timeout=120)
    assert s.returncode == 0, s.stderr
    schema = json.loads(s.stdout)
    assert "Greetings" in schema["$defs"]
    kinds = schema["$defs"]["VerifierSpec"]["properties"]["kind"]["anyOf"][0]["enum"]
    assert "ends_with" in kinds and "numeric" in kinds
    # The default schema (no plugins) does not list them.
    plain = json.loads((ROOT / "configs" / "schema.json").read_text())
    assert "Greetings" not in plain["$defs"]
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(f"""
            from assay import stages
            from assay.spec import load_spec
            from assay.store import Store
            spec = load_spec({str(spec)!r})
            run = stages.run_study(spec, Store({str(tmp_path / 'store')!r}), progress=None)
            rows = stages.concat_rows(Store({str(tmp_path / 'store')!r}), run.graded["g"])
            print([r["reward"] for r in rows])
        """)], capture_output=True, text=True, cwd=env_cwd, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str([1.0, 0.0] * 4)


def test_unknown_plugin_module_is_a_spec_error_with_its_line(tmp_path: Path) -> None:
    from assay.errors import SpecError
    from assay.spec import parse_spec

    with pytest.raises(SpecError, match=r"s.yaml:2: plugins: .*cannot import.*no_such_mod"):
        parse_spec("name: x\nplugins: [no_such_mod]\nsources: []\n", source="s.yaml",
                   base_dir=str(tmp_path))


def test_unknown_kinds_name_the_closest_registered_one() -> None:
    from assay.errors import SpecError
    from assay.spec import parse_spec

    with pytest.raises(SpecError, match="did you mean 'numeric'"):
        parse_spec("name: x\nsources: [{name: a, kind: humaneval, verifier: {kind: numerik}}]\n")
    with pytest.raises(SpecError,
                       match=r"kind 'humaneva'.*known kinds: "
                             r"\['file', 'hf_dataset', 'humaneval', 'lm_eval'\]"):
        parse_spec("name: x\nsources: [{name: a, kind: humaneva}]\n")
