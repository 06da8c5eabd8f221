"""Records into rows: dotted field paths, markers and meta from record fields, prompt templates
and reference_regex, each bad input an error naming the record and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import assay
from assay.errors import SpecError
from assay.sources.records import FieldMap, rows_from_records
from assay.sources.templates import PromptTemplate
from assay.spec import parse_spec
from assay.stages.filter_rows import apply_row_steps

NESTED = [{"item": {"q": "2+2?", "meta": {"level": 1}},
           "out": {"text": "4", "usage": {"tokens": 7}},
           "gold": "#### 4", "lang": "en"},
          {"item": {"q": "3+3?", "meta": {"level": 2}},
           "out": {"text": "5", "usage": {"tokens": 9}},
           "gold": "#### 6", "lang": "de"}]


def test_dotted_paths_markers_and_meta() -> None:
    fm = FieldMap(prompt="item.q", completion="out.text", reference="gold",
                  markers={"tokens": "out.usage.tokens", "level": "item.meta.level"})
    r = rows_from_records(NESTED, fm, where="src", reference_regex=r"####\s*(.+)$")
    assert ([x["prompt"] for x in r] == ["2+2?", "3+3?"]
            and [x["final_text"] for x in r] == ["4", "5"])
    assert [x["privileged"]["reference"] for x in r] == ["4", "6"]
    assert [x["markers"] for x in r] == [{"tokens": 7.0, "level": 1.0},
                                         {"tokens": 9.0, "level": 2.0}]
    # fields the map consumes whole leave meta; nested ones keep their parent
    assert r[0]["meta"] == {"item": {"q": "2+2?", "meta": {"level": 1}},
                            "out": {"text": "4", "usage": {"tokens": 7}}, "lang": "en"}
    only = rows_from_records(NESTED, fm.model_copy(update={"meta": ["lang", "item.meta.level"]}),
                             where="src")
    assert only[1]["meta"] == {"lang": "de", "item.meta.level": 2}
    # steps and by: read meta
    assert len(apply_row_steps(r, [{"op": "where", "field": "meta.lang", "cmp": "==",
                                    "value": "de"}])) == 1
    assert len(apply_row_steps(r, [{"op": "where", "field": "lang", "cmp": "==",
                                    "value": "de"}])) == 1


@pytest.mark.parametrize("value, message", [
    ("7", r"src record 2: marker field 'out.usage.tokens' is str '7'; markers are numbers"),
    (math.nan, r"src: markers \(record 2\): marker 'out.usage.tokens' is NaN"),
])
def test_a_bad_marker_value_names_record_and_field(value, message) -> None:
    recs = json.loads(json.dumps(NESTED))
    recs[1]["out"]["usage"]["tokens"] = value
    with pytest.raises(SpecError, match=message):
        rows_from_records(recs,
                          FieldMap(prompt="item.q", completion="out.text",
                                   markers=["out.usage.tokens"]),
                          where="src")


def test_a_missing_marker_value_is_left_out_but_a_missing_field_is_an_error() -> None:
    recs = json.loads(json.dumps(NESTED))
    recs[0]["out"]["usage"]["tokens"] = None
    r = rows_from_records(recs,
                          FieldMap(prompt="item.q", completion="out.text",
                                   markers=["out.usage.tokens"]),
                          where="src")
    assert [x["markers"] for x in r] == [{}, {"out.usage.tokens": 9.0}]
    del recs[1]["out"]["usage"]
    with pytest.raises(SpecError, match=r"src record 2: marker field 'out.usage.tokens' "
                                        r"\(fields.markers\) is missing"):
        rows_from_records(recs,
                          FieldMap(prompt="item.q", completion="out.text",
                                   markers=["out.usage.tokens"]),
                          where="src")


def test_meta_must_be_json_data() -> None:
    recs = [{"prompt": "a", "completion": "b", "blob": b"\x00\x01"}]
    with pytest.raises(SpecError, match=r"src: meta \(record 1\): value is not JSON-serializable "
                                        r"\(bytes\).*fields.meta"):
        rows_from_records(recs, FieldMap(), where="src")
    assert rows_from_records(recs, FieldMap(meta=[]), where="src")[0]["meta"] is None


def test_templates_render_record_fields_and_name_what_is_missing() -> None:
    rec = {"question": "2+2?", "choices": ["3", "4"], "info": {"topic": "sums"}}
    assert (PromptTemplate("Q: {question} ({info[topic]})").render(rec, where="r")
            == "Q: 2+2? (sums)")
    j = PromptTemplate("{% for c in choices %}{{ loop.index }}. {{ c }}\n{% endfor %}"
                       "Q: {{ question }}")
    assert (j.render(rec, where="r") == "1. 3\n2. 4\nQ: 2+2?"
            and j.fields() == {"choices", "question"})
    with pytest.raises(SpecError,
                       match=r"r: prompt_template names field 'questoin', which the record lacks"):
        PromptTemplate("Q: {questoin}").render(rec, where="r")
    with pytest.raises(SpecError, match=r"r: prompt_template: 'questoin' is undefined"):
        PromptTemplate("Q: {{ questoin }}").render(rec, where="r")
    with pytest.raises(SpecError, match=r"Jinja2 syntax error on line 1"):
        PromptTemplate("{{ question ").check()
    # jinja's sandbox: a template cannot reach Python internals
    with pytest.raises(SpecError, match=r"SecurityError"):
        PromptTemplate("{{ question.__class__.__mro__[1].__subclasses__() }}").render(
            rec, where="r")


def test_reference_regex_no_match_is_an_error_not_an_empty_reference() -> None:
    with pytest.raises(SpecError, match=r"src record 1 field 'gold': reference_regex "
                                        r"'####\\\\s\*\(\.\+\)\$' does not match the reference "
                                        r"'the answer is 4'"):
        rows_from_records([{"prompt": "q", "completion": "4", "gold": "the answer is 4"}],
                          FieldMap(reference="gold"), where="src", reference_regex=r"####\s*(.+)$")


def test_a_file_source_with_template_regex_markers_and_by(tmp_path: Path) -> None:
    with open(tmp_path / "gsm.jsonl", "w") as f:
        for i in range(20):
            for j in range(2):
                f.write(json.dumps({"id": i, "question": f"{i}+{i}?",
                                    "answer": f"{i}+{i}={2 * i}\n#### {2 * i}",
                                    "response": f"The answer is {2 * i + j * (i % 3 == 0)}",
                                    "level": f"L{i % 2}", "stats": {"ms": 10 * i + j}}) + "\n")
    spec = parse_spec("""
name: f
sources:
  - name: m
    kind: file
    path: gsm.jsonl
    prompt_template: "Q: {question}"
    fields: {completion: response, reference: answer, task_id: id, markers: {latency_ms: stats.ms}}
    reference_regex: "####\\\\s*(.+)$"
    verifier: {kind: numeric}
measure: {pass_at: {by: level}}
""", base_dir=str(tmp_path))
    from assay import stages
    from assay.store import Store

    run = stages.run_study(spec, Store(tmp_path / "store"), progress=None)
    rows = stages.concat_rows(Store(tmp_path / "store"), run.graded["m"])
    assert rows[0]["prompt"] == "Q: 0+0?" and rows[2]["markers"] == {"latency_ms": 10.0}
    assert rows[0]["meta"] == {"level": "L0", "stats": {"ms": 0}}
    res = assay.pass_at_by(rows, "level")
    # wrong answers: the second completion of tasks 0, 3, 6, ..., 18
    wrong = {i for i in range(20) if i % 3 == 0}
    for lev in ("L0", "L1"):
        tasks = [i for i in range(20) if f"L{i % 2}" == lev]
        brute = sum(0.5 if i in wrong else 1.0 for i in tasks) / len(tasks)
        assert res[lev].pass_at_1.value == pytest.approx(brute)
    md = stages.report_files(Store(tmp_path / "store"), run.report)["report.md"].decode()
    assert "### pass_at[m] by level" in md


def test_rows_meta_column_contract(tmp_path: Path) -> None:
    from assay.errors import RowsTypeError
    from assay.rows import COLUMNS, TRAINING_COLUMNS, Rows

    r = assay.rows(["a?", "b?"], [["x", "y"], "z"], [[1, 0], 1],
                   meta=[[{"s": "alg"}, {"s": "alg"}], {"s": "geo"}])
    assert [x["meta"] for x in r] == [{"s": "alg"}, {"s": "alg"}, {"s": "geo"}]
    assert "meta" in COLUMNS and "meta" not in TRAINING_COLUMNS
    r.to_parquet(tmp_path / "r.parquet")
    assert Rows.read_parquet(tmp_path / "r.parquet") == r
    assert Rows.from_pandas(r.to_pandas()) == r
    # a table written before the column existed still loads, with meta empty
    old = Rows.from_arrow(r.to_arrow().drop_columns(["meta"]))
    assert ([x["meta"] for x in old] == [None, None, None]
            and old.to_arrow().schema == r.to_arrow().schema)
    with pytest.raises(RowsTypeError,
                       match=r"meta \(prompt 1, completion 0\): meta must be a dict"):
        assay.rows(["a?", "b?"], ["x", "y"], meta=[{"s": 1}, "geo"])
    with pytest.raises(RowsTypeError, match=r"rows\[0\]: 'meta' must be a dict, got str"):
        Rows.from_records([{"prompt": "a", "final_text": "b", "meta": "x"}])
