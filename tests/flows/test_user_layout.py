"""A user's own ``tasks.py`` and ``flows/`` are theirs: assay's orchestration is ``assay.tasks``
and ``assay.flows``, so a grader beside the spec imports the user's ``tasks`` inside ``assay run``,
the Python API and the nightly deployment's entrypoint, and assay never imports those names.

The user's ``tasks.py`` carries a mark the grader checks (another module named ``tasks`` fails the
run); their ``flows/`` raises on import (assay importing it fails the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

SPEC = """
name: user-layout
sources:
  - name: m
    kind: file
    path: data.jsonl
    fields: {prompt: q, completion: a, reference: gold, task_id: id}
    verifier: {kind: function, function: "my_grader:grade"}
measure: {pass_at: {k: 1}}
execution: {workers: 1}
"""


def _user_folder(d: Path) -> Path:
    """A spec folder holding the user's own tasks.py (used by their grader) and flows/ (raises
    if imported)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "tasks.py").write_text(textwrap.dedent("""
        OWNER = "user"

        def expected(reference):
            return reference
        """))
    (d / "flows").mkdir(exist_ok=True)
    (d / "flows" / "__init__.py").write_text("raise RuntimeError('the user flows/ was imported')\n")
    (d / "my_grader.py").write_text(textwrap.dedent("""
        import tasks  # the user's own module beside the spec

        def grade(completion, reference):
            if getattr(tasks, "OWNER", None) != "user":
                raise RuntimeError(f"'import tasks' gave {tasks.__file__}, not the user's")
            return float(completion == tasks.expected(reference))
        """))
    with open(d / "data.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": str(i % 2), "gold": "1"}) + "\n")
    (d / "spec.yaml").write_text(SPEC)
    return d


def _env(first: Path | None = None) -> dict[str, str]:
    """No PYTHONPATH of the caller's: assay is found where it is installed; ``first`` goes first
    on the path (a worker started in the user's folder, a spec's folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if first is not None:
        env["PYTHONPATH"] = str(first)
    return env


@pytest.mark.slow
def test_assay_run_grades_with_the_users_own_tasks_module(tmp_path):
    user = _user_folder(tmp_path / "study")
    # run from another folder: the spec's folder alone puts the user's modules on the path
    out = subprocess.run(
        [str(BIN / "assay"), "run", str(user / "spec.yaml"), "--output", str(tmp_path / "out"),
         "--store", str(tmp_path / "store"), "--prefect-home", str(tmp_path / "prefect")],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["sources"][0]["rows"] == 4
    (est,) = [e for m in report["measurements"] for e in m["estimates"] if e["name"] == "pass@1"]
    assert est["value"] == 0.5  # the user's grader ran on every row: two of four answers are "1"


def test_python_api_grades_with_the_users_own_tasks_module(tmp_path):
    user = _user_folder(tmp_path / "study")
    code = textwrap.dedent("""
        import sys
        from assay import stages
        from assay.spec import load_spec
        from assay.store import Store
        run = stages.run_study(load_spec("spec.yaml"), Store("store"), progress=None)
        rows = stages.concat_rows(Store("store"), run.graded["m"])
        print(sorted(r["reward"] for r in rows), sys.modules["tasks"].OWNER)
        """)
    out = subprocess.run([sys.executable, "-c", code], cwd=user, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[0.0, 0.0, 1.0, 1.0] user"


def test_the_deployment_entrypoint_imports_the_installed_flow_once(tmp_path):
    user = _user_folder(tmp_path / "study")
    code = textwrap.dedent("""
        import importlib, sys
        from prefect.flows import load_flow_from_entrypoint
        f = load_flow_from_entrypoint("assay.flows.nightly.nightly")
        assert f is importlib.import_module("assay.flows.nightly").nightly  # one module object
        import tasks
        print(f.name, "flows" in sys.modules, tasks.OWNER)
        """)
    # the user's folder first on sys.path and as the working directory, as a Prefect worker
    # started there has it
    out = subprocess.run([sys.executable, "-c", code], cwd=user, env=_env(user),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["assay-nightly", "False", "user"]
