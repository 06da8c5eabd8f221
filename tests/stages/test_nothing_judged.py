"""A study in which no row of a source could be judged (a grader returning NaN, a judge that
never answers in its format) still writes its report, rows and view, with the reasons, and
``assay run`` exits EXIT_PARTIAL (4) saying so, rather than exit 2 with nothing (issue 47)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from assay import stages
from assay.errors import EXIT_OK, EXIT_PARTIAL
from assay.spec import load_spec
from assay.stages.finish import finish_run, outcome
from assay.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _study(tmp_path: Path, grader: str, measure: str) -> Path:
    mod = f"nj_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{mod}.py").write_text(textwrap.dedent(grader))
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(6):
            for c in (str(i), f"x{i}"):
                f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": c, "gold": str(i)}) + "\n")
    p = tmp_path / "s.yaml"
    p.write_text(f"""
name: nothing-judged
sources:
  - name: good
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: exact_match}}
  - name: bad
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: function, function: "{mod}:grade"}}
measure: {measure}
""")
    return p


NAN = """
    def grade(completion, reference):
        return float("nan")
"""
NO_VERDICT = """
    def grade(completion, reference):
        return None  # a judge that never answers in its format
"""


def _measurements(store: Store, run: stages.StudyRun) -> list[dict]:
    return json.loads(stages.report_files(store, run.report)["report.json"])["measurements"]


def test_nan_grader_measures_the_other_source_and_writes_the_run(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path, NAN, "{pass_at: {k: 2}, eval_variance: {}, "
                            "compare: [{before: good, after: bad}]}"))
    store = Store(tmp_path / "st")
    run = stages.run_study(spec, store, progress=None, workers=1)
    docs = {(d["kind"], d["label"]): d for d in _measurements(store, run)}
    assert ("pass_at", "pass_at[good]") in docs  # the judged source is still measured
    assert docs[("pass_at", "pass_at[good]")]["estimates"][0]["value"] == 0.5
    for label in ("pass_at[bad]", "eval_variance[bad]", "compare[bad]"):
        d = docs[("not_measured", label)]
        assert d["text"] == ("not measured: no row of bad was judged (12 rows; invalid_result: "
                             "judge returned NaN (12))")
    info = finish_run(store, spec, run, tmp_path / "out")
    assert info["nothing_judged"] == {"bad": {"rows": 12, "reasons": [
        ["invalid_result: judge returned NaN", 12]]}}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "### pass_at[bad]\n\n```text\nnot measured: no row of bad was judged" in md
    assert pq.read_table(tmp_path / "out" / "rows" / "bad.parquet").num_rows == 12
    lines, status = outcome(info)
    assert status == EXIT_PARTIAL and len(lines) == 1
    assert lines[0].startswith("partial: no row of bad could be judged (12 rows; invalid_result")

    from assay.view import write_view

    assert write_view(tmp_path / "out").is_file()


def test_every_source_unjudged_still_writes_a_report(tmp_path: Path) -> None:
    spec_path = _study(tmp_path, NO_VERDICT, "{pass_at: {k: 2, sources: [bad]}, "
                       "select: {source: bad, band: [0.2, 0.8]}}")
    store = Store(tmp_path / "st")
    run = stages.run_study(load_spec(spec_path), store, progress=None, workers=1)
    kinds = [(d["kind"], d["label"]) for d in _measurements(store, run)]
    assert kinds == [("not_measured", "pass_at[bad]"), ("not_measured", "select[bad]")]


def test_a_judged_study_is_unchanged(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path, "def grade(completion, reference):\n"
                            "    return completion == reference\n", "{pass_at: {k: 2}}"))
    store = Store(tmp_path / "st")
    run = stages.run_study(spec, store, progress=None, workers=1)
    assert [d["kind"] for d in _measurements(store, run)] == ["pass_at", "pass_at"]
    info = finish_run(store, spec, run, tmp_path / "out")
    assert "nothing_judged" not in info and outcome(info) == ([], EXIT_OK)


def test_assay_run_exits_partial_for_a_study_nothing_judged(tmp_path: Path) -> None:
    """The real command, on the store the study already filled (served without Prefect)."""
    spec_path = _study(tmp_path, NAN, "{pass_at: {k: 2}}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])}
    subprocess.run([sys.executable, "-c", "import sys; from assay import stages; from assay.spec "
                    "import load_spec; from assay.store import Store; stages.run_study(load_spec("
                    "sys.argv[1]), Store(sys.argv[2]), progress=None, workers=1)",
                    str(spec_path), str(tmp_path / "st")], check=True, env=env, cwd=tmp_path,
                   timeout=300)
    p = subprocess.run([sys.executable, "-m", "assay.cli", "run", str(spec_path), "--store",
                        str(tmp_path / "st"), "--output", str(tmp_path / "out"), "--no-view"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == EXIT_PARTIAL, p.stderr
    assert "partial: no row of bad could be judged (12 rows" in p.stderr
    assert "error:" not in p.stderr
    assert (tmp_path / "out" / "report.md").is_file()
