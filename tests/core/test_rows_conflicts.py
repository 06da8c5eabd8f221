"""Records with one task id must agree on prompt and reference (issue 19: a changed reference
merged silently and moved pass@1 from 0.850 to 0.833); every source kind builds through
``assay.rows``, so a file source names its file, records and field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import assay
from assay.errors import AssayError, RowsError
from assay.sources import FieldMap
from assay.stages import rows_from_records


def test_same_prompt_twice_is_one_task_when_it_agrees() -> None:
    r = assay.rows(["q", "q"], ["a", "b"], [1, 0], references=["x", "x"])
    assert len({x["task_id"] for x in r}) == 1 and [x["rollout_index"] for x in r] == [0, 1]


def test_same_prompt_different_reference_is_refused() -> None:
    with pytest.raises(RowsError, match=r"prompts\[0\] and prompts\[2\] have the same task id .* "
                                        r"different reference \('x' vs 'y'\)"):
        assay.rows(["q", "p", "q"], ["a", "b", "c"], [1, 0, 1], references=["x", "z", "y"])


def test_same_task_id_different_prompt_is_refused() -> None:
    with pytest.raises(RowsError, match=r"prompts\[0\] and prompts\[1\] have the same task id 't1' "
                                        r"but a different prompt \('q' vs 'p'\)"):
        assay.rows(["q", "p"], ["a", "b"], [1, 0], task_ids=["t1", "t1"])
    # same last turn, different conversation before it
    convs = [[{"role": "system", "content": "A"}, {"role": "user", "content": "q"}],
             [{"role": "system", "content": "B"}, {"role": "user", "content": "q"}]]
    with pytest.raises(RowsError, match="different prompt"):
        assay.rows(convs, ["a", "b"], [1, 0], task_ids=["t", "t"])
    assert len({x["task_id"] for x in assay.rows(convs, ["a", "b"], [1, 0])}) == 2


def test_file_source_names_file_records_and_field(tmp_path: Path) -> None:
    recs = [{"id": "a", "q": "2+2?", "c": "4", "gold": "4", "s": 1},
            {"id": "b", "q": "3+3?", "c": "6", "gold": "6", "s": 1},
            {"id": "a", "q": "2+2?", "c": "5", "gold": "5", "s": 0}]
    fields = FieldMap(prompt="q", completion="c", reference="gold", task_id="id", reward="s")
    with pytest.raises(AssayError, match=r"\(data.jsonl\): record 1 and record 3 have the same "
                                         r"task id 'a' but a different reference"):
        rows_from_records(recs, fields, where="source 'm' (data.jsonl)")


@pytest.mark.parametrize("bad,why", [("x", "must be a number, got str 'x'"),
                                     (float("nan"), "is NaN"), (1.5, "outside"), (None, "")])
def test_file_source_value_errors_name_file_record_field(bad: object, why: str) -> None:
    recs = [{"q": "a", "c": "x", "s": 1}, {"q": "b", "c": "y", "s": bad}]
    fields = FieldMap(prompt="q", completion="c", reward="s")
    if bad is None:  # None is an unjudged row, allowed
        assert rows_from_records(recs, fields, where="w")[1]["judge_status"] == "unjudged"
        return
    want = "source 'm' (d.jsonl): record 2, field 's' (fields.reward): reward "
    with pytest.raises(AssayError, match=re.escape(want) + ".*" + re.escape(why)):
        rows_from_records(recs, fields, where="source 'm' (d.jsonl)")


def test_file_source_completion_type(tmp_path: Path) -> None:
    recs = [{"q": "a", "c": 3, "s": 1}]
    with pytest.raises(AssayError, match=r"source 'm' \(f\): record 1, field 'c' "
                                         r"\(fields.completion\): expected a string"):
        rows_from_records(recs, FieldMap(prompt="q", completion="c", reward="s"),
                          where="source 'm' (f)")


def test_spec_file_source_refuses_conflicting_records(tmp_path: Path) -> None:
    """A spec's file source builds through the same check, naming the file."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [
        {"task_id": "t", "prompt": "p", "completion": "a", "reference": "1"},
        {"task_id": "t", "prompt": "p", "completion": "b", "reference": "2"}]))
    from assay.spec import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: x\nsources:\n  - {{name: m, kind: file, path: {data.name}, "
                    "fields: {task_id: task_id, reference: reference}, "
                    "verifier: {kind: exact_match}}\n")
    s = load_spec(spec)
    with pytest.raises(AssayError, match=r"d.jsonl\): record 1 and record 2 have the same "
                                        r"task id 't' but a different reference \('1' vs '2'\)"):
        s.sources[0].build_rows(s)
