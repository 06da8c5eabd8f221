"""Judge calls are cached per rendered grading prompt, not per shard (issue 49): a changed gold
answer the rubric does not show asks the judge nothing, one it shows asks only the prompts it
changed, and an inserted or reordered record asks only grading prompts never asked."""

from __future__ import annotations

import importlib
import json
import random
import sys
from pathlib import Path

import pytest

from assay import stages
from assay.spec import load_spec
from assay.store import Store

# A judge as a user writes one; CALLS counts the grading prompts it answers
JUDGE_MODULE = '''
CALLS = []


def grade(prompts):
    CALLS.extend(p if isinstance(p, str) else p[-1]["content"] for p in prompts)
    out = []
    for p in prompts:
        text = p if isinstance(p, str) else p[-1]["content"]
        answer = text.split("A: ", 1)[1].split("\\n", 1)[0]
        ref = text.split("R: ", 1)[1].split("\\n", 1)[0] if "R: " in text else str(len(answer))
        out.append("GRADE: C" if answer == ref else "GRADE: I")
    return out
'''
#: 12 answers, 2 per task: 3 shards of 4 rows
RECORDS = [{"id": f"t{i // 2}", "q": f"What is {i // 2} + {i // 2}?", "a": str(i + i % 3),
            "g": str(i - i % 2)} for i in range(12)]
WITH_REFERENCE = "Q: {question}\\nA: {answer}\\nR: {reference}\\nGrade it."
WITHOUT_REFERENCE = "Q: {question}\\nA: {answer}\\nGrade it."
SPEC = """
name: judged
sources:
  - name: s
    kind: file
    path: d.jsonl
    fields: {{prompt: q, completion: a, reference: g, task_id: id}}
    verifier:
      kind: judge
      params:
        model: {{kind: function, callable: "jdg:grade"}}
        template: "{template}"
        store: "{store}"
measure: {{pass_at: {{k: 2}}}}
execution: {{shard_rows: 4}}
"""


@pytest.fixture
def judge(tmp_path: Path):
    """The counting judge's module (a fresh copy per test)."""
    from assay.models import generation

    sys.modules.pop("jdg", None)
    (tmp_path / "jdg.py").write_text(JUDGE_MODULE)
    sys.path.insert(0, str(tmp_path))
    getattr(generation, "_SHARED", {}).clear()  # a backend built by another test is another copy
    yield lambda: importlib.import_module("jdg").CALLS
    sys.modules.pop("jdg", None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def run(folder: Path, records: list[dict], store: Store, template: str,
        judge_store: Path) -> stages.StudyRun:
    folder.mkdir(exist_ok=True)
    (folder / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "s.yaml").write_text(SPEC.format(template=template, store=judge_store))
    return stages.run_study(load_spec(folder / "s.yaml"), store, progress=None, workers=1)


def rewards(store: Store, r: stages.StudyRun) -> list[float | None]:
    return [x["reward"] for x in stages.concat_rows(store, r.graded["s"])]


@pytest.mark.parametrize("template", [WITH_REFERENCE, WITHOUT_REFERENCE])
def test_a_changed_gold_asks_the_judge_only_prompts_it_changed(tmp_path, judge, template):
    store, js = Store(tmp_path / "store"), tmp_path / "judge_store"
    first = run(tmp_path / "a", RECORDS, store, template, js)
    assert len(first.graded["s"]) == 3 and len(judge()) == 12
    changed = [{**r, "g": "3"} if r["id"] == "t1" else r for r in RECORDS]  # rows 2, 3
    again = run(tmp_path / "b", changed, store, template, js)
    assert any(s.startswith("grade") for s in again.computed_stages)
    if template == WITH_REFERENCE:
        # the two rows of t1 show the new gold: their prompts alone are asked
        assert judge()[12:] == ["Q: What is 1 + 1?\nA: 4\nR: 3\nGrade it.",
                                "Q: What is 1 + 1?\nA: 3\nR: 3\nGrade it."]
        assert rewards(store, first)[2:4] == [0.0, 0.0]
        assert rewards(store, again)[2:4] == [0.0, 1.0]
        assert rewards(store, again)[4:] == rewards(store, first)[4:]
    else:
        assert len(judge()) == 12  # no grading prompt changed: the judge is asked nothing
        assert rewards(store, again) == rewards(store, first)


def test_an_inserted_or_shuffled_record_asks_only_new_grading_prompts(tmp_path, judge):
    store, js = Store(tmp_path / "store"), tmp_path / "judge_store"
    run(tmp_path / "a", RECORDS, store, WITH_REFERENCE, js)
    new = {"id": "new", "q": "What is new?", "a": "x", "g": "x"}
    again = run(tmp_path / "b", [new] + RECORDS, store, WITH_REFERENCE, js)
    assert judge()[12:] == ["Q: What is new?\nA: x\nR: x\nGrade it."]
    assert rewards(store, again)[0] == 1.0
    shuffled = RECORDS[:]
    random.Random(2).shuffle(shuffled)
    run(tmp_path / "c", shuffled, store, WITH_REFERENCE, js)
    assert len(judge()) == 13
