"""A grade shard where most rows raised one error stops there, naming the verifier, the count,
the error and its first row; the report says per source how many rows went unjudged and why."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from assay import stages
from assay.errors import VerifierError
from assay.spec import load_spec
from assay.store import Store


def _study(tmp_path: Path, body: str, n: int = 8) -> Path:
    mod = f"graders_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{mod}.py").write_text(textwrap.dedent(body))
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(n):
            for c in (str(i), f"x{i}"):
                f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": c, "gold": str(i)}) + "\n")
    p = tmp_path / "s.yaml"
    p.write_text(f"""
name: unjudged
sources:
  - name: m
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: function, function: "{mod}:grade"}}
measure: {{pass_at: {{k: 2}}}}
""")
    return p


def test_a_verifier_failing_on_most_rows_is_named_by_the_grade_stage(tmp_path: Path) -> None:
    spec = _study(tmp_path, """
        import re
        def grade(completion, row):
            # a user's bug: the row is a dict, re.search wants a string
            return bool(re.search(r"\\d", row)) if completion != "3" else 1.0
    """)
    with pytest.raises(VerifierError) as e:
        stages.run_study(load_spec(spec), Store(tmp_path / "st"), progress=None, workers=1)
    msg = str(e.value)
    assert msg.startswith("grade[m] shard 1/1: verifier ")
    assert ":grade failed on 15 of 16 rows with one error (TypeError); the first, row 0 " \
           "(task t0, rollout 0): TypeError: expected string" in msg
    assert "rows has a reward" not in msg


def test_the_report_counts_unjudged_rows_per_source_with_top_reasons(tmp_path: Path) -> None:
    spec = _study(tmp_path, """
        def grade(completion, reference):
            if completion == "x0":
                raise ValueError("cannot read x0")
            if completion.startswith("x") and completion in ("x1", "x2", "x3"):
                return None
            return completion == reference
    """)
    store = Store(tmp_path / "st")
    run = stages.run_study(load_spec(spec), store, progress=None, workers=1)
    md = stages.report_files(store, run.report)["report.md"].decode()
    assert ("- m: 4 of 16 rows unjudged (no reward; left out of the measurements); top reasons: "
            "no_verdict: judge returned None (cannot judge) (3); error: ValueError: cannot read x0 "
            "(1)") in md
    doc = json.loads(stages.report_files(store, run.report)["report.json"])
    assert doc["sources"][0]["unjudged"]["rows"] == 4


def test_the_summary_reads_only_the_unjudged_rows_into_python() -> None:
    """(issue 50: the measure stage turned every row of a study into a dict to count the few
    without a reward)"""
    import assay
    from assay import unjudged

    n = 1000
    rewards = [[None if i in (3, 500, 998) else float(i % 2)] for i in range(n)]
    rows = assay.rows([f"q{i}" for i in range(n)], [["a"]] * n, rewards)
    read = unjudged._records(rows, unjudged=True)
    assert [r["reward"] for r in read] == [None, None, None]
    got = unjudged.unjudged_summary(rows)
    assert got == unjudged.unjudged_summary([dict(r) for r in rows]) and got["rows"] == 3
