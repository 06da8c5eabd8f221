"""Every package registers its built-in kinds when it is imported: a registry read through its
own module (in a fresh interpreter) already lists them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    ("assay.reward.registry", "REWARD_MODELS", {"embedding", "function", "hf"}),
    ("assay.reward.registry", "PREFERENCE_DATA", {"builtin", "file", "hf_dataset"}),
    ("assay.sources.registry", "SOURCES", {"file", "hf_dataset", "humaneval"}),
    ("assay.verify.registry", "VERIFIERS", {"exact_match", "numeric", "code_exec", "function"}),
    ("assay.models.registry", "BACKENDS", {"function", "hf", "openai"}),
]


@pytest.mark.parametrize("module, name, expected", CASES)
def test_registry_lists_builtin_kinds_on_first_import(module: str, name: str,
                                                      expected: set[str]) -> None:
    code = (f"import json, sys\nfrom {module} import {name}\n"
            f"print(json.dumps({name}.names()))\n"
            "print(any(m.split('.')[0] in ('torch', 'transformers', 'prefect') "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert expected <= set(json.loads(out[0])), out
    assert out[1] == "False"  # registering the kinds loads no model runtime
