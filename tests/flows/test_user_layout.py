"""A user's own ``tasks.py`` and ``flows/`` (beside their spec, and in the working directory)
never replace assay's: ``assay run``, the Python API and the nightly deployment's entrypoint
all run with them present. The user's files raise on import, so a mix-up cannot pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
    """A spec folder holding the user's own tasks.py and flows/ (each raises if imported)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "tasks.py").write_text("raise RuntimeError('the user tasks.py was imported')\n")
    (d / "flows").mkdir(exist_ok=True)
    (d / "flows" / "__init__.py").write_text("raise RuntimeError('the user flows/ was imported')\n")
    (d / "my_grader.py").write_text(textwrap.dedent("""
        def grade(completion, reference):
            return float(completion == reference)
        """))
    with open(d / "data.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": str(i % 2), "gold": "1"}) + "\n")
    (d / "spec.yaml").write_text(SPEC)
    return d


def _env(extra_path: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    parts = [str(extra_path)] if extra_path else []
    env["PYTHONPATH"] = os.pathsep.join([*parts, str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
def test_assay_run_with_a_user_tasks_py_and_flows_beside_the_spec_and_in_cwd(tmp_path):
    user = _user_folder(tmp_path / "study")
    out = subprocess.run(
        [str(BIN / "assay"), "run", "spec.yaml", "--output", str(tmp_path / "out"),
         "--store", str(tmp_path / "store"), "--prefect-home", str(tmp_path / "prefect")],
        cwd=user, env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["sources"][0]["rows"] == 4


def test_python_api_with_a_user_tasks_py_and_flows_in_cwd(tmp_path):
    user = _user_folder(tmp_path / "study")
    code = textwrap.dedent("""
        from assay import stages
        from assay.spec import load_spec
        from assay.store import Store
        run = stages.run_study(load_spec("spec.yaml"), Store("store"), progress=None)
        rows = stages.concat_rows(Store("store"), run.graded["m"])
        print(sorted(r["reward"] for r in rows))
        """)
    out = subprocess.run([sys.executable, "-c", code], cwd=user, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[0.0, 0.0, 1.0, 1.0]"


def test_the_deployment_entrypoint_loads_with_user_packages_first_on_the_path(tmp_path):
    user = _user_folder(tmp_path / "study")
    code = textwrap.dedent("""
        import sys
        from prefect.flows import load_flow_from_entrypoint
        f = load_flow_from_entrypoint("flows/nightly.py:nightly")
        print(f.name, sys.modules["tasks"].__file__, sys.modules["flows"].__file__)
        """)
    # the user's folder first on sys.path, as a worker started there (or a spec folder) puts it
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(user),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    name, tasks_file, flows_file = out.stdout.split()
    assert name == "assay-nightly"
    assert Path(tasks_file) == ROOT / "tasks" / "__init__.py"
    assert Path(flows_file) == ROOT / "flows" / "__init__.py"
