"""``assay validate`` finds what the run would refuse: null template fields, every bad record
(counted from 1, bounded), every bad JSON line, a gate metric typo, duplicate task ids beyond
the first records, pass@k above the samples generated, and an unquoted date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.cli import main
from assay.errors import SpecError
from assay.sources.templates import PromptTemplate


def _validate(tmp_path: Path, spec: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    p = tmp_path / "s.yaml"
    p.write_text(spec)
    rc = main(["validate", str(p)])
    return rc, capsys.readouterr().err


def _jsonl(path: Path, recs: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.mark.parametrize("text", ["Q: {q}", "Q: {{ q }}"])
def test_a_null_template_field_is_refused_naming_record_and_field(text: str) -> None:
    t = PromptTemplate(text)
    with pytest.raises(SpecError, match=r"^src record 2: prompt_template: field 'q' is null"):
        t.render({"q": None}, where="src record 2")
    # a null field only tested, not printed, is fine in Jinja2
    assert PromptTemplate("{% if h %}{{ h }} {% endif %}{{ q }}").render(
        {"h": None, "q": "x"}, where="r") == "x"


def test_validate_lists_every_bad_record_counted_from_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = [{"q": f"{i}?", "a": str(i)} for i in range(80)]
    for i in (3, 60, 79):  # records 4, 61 and 80 (lines 4, 61, 80)
        recs[i]["q"] = None
    _jsonl(tmp_path / "d.jsonl", recs)
    rc, err = _validate(tmp_path, "name: v\nsources:\n  - {name: a, kind: file, path: d.jsonl, "
                        "prompt_template: 'Q: {q}', fields: {completion: a}, "
                        "verifier: {kind: exact_match}}\n", capsys)
    assert rc == 2
    assert "has 3 problem(s) (records and lines count from 1):" in err
    for n in (4, 61, 80):
        assert f"d.jsonl) record {n}: prompt_template: field 'q' is null" in err


def test_validate_stops_after_a_bounded_number_of_bad_records(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _jsonl(tmp_path / "d.jsonl", [{"q": None, "a": "1"}] * 50)
    rc, err = _validate(tmp_path, "name: v\nsources:\n  - {name: a, kind: file, path: d.jsonl, "
                        "prompt_template: 'Q: {q}', fields: {completion: a}, "
                        "verifier: {kind: exact_match}}\n", capsys)
    assert rc == 2 and err.count("is null in this record") == 20
    assert "stopped after 20 bad records" in err


def test_validate_lists_every_bad_json_line_with_its_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "1?", "a": "1"}\n{"q": "2?", "a": 2\n\n[1]\n'
                                      '{"q": "5?" "a": "5"}\n')
    rc, err = _validate(tmp_path, "name: v\nsources:\n  - {name: a, kind: file, path: d.jsonl, "
                        "fields: {prompt: q, completion: a}, verifier: {kind: exact_match}}\n",
                        capsys)
    assert rc == 2
    d = tmp_path / "d.jsonl"
    assert (f"{d}:2: not valid JSON at column 19: Expecting ',' delimiter; one object per "
            "line") in err
    assert f"{d}:4: each line must be a JSON object, got list" in err
    assert f"{d}:5: not valid JSON at column 12: Expecting ',' delimiter" in err


def test_duplicate_task_ids_past_the_first_records_are_found(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = [{"id": f"t{i}", "q": f"{i}?", "a": str(i), "gold": str(i)} for i in range(70)]
    recs[65]["id"] = "t2"  # the same task id as record 3, another reference
    _jsonl(tmp_path / "d.jsonl", recs)
    rc, err = _validate(tmp_path, "name: v\nsources:\n  - {name: a, kind: file, path: d.jsonl, "
                        "fields: {prompt: q, completion: a, reference: gold, task_id: id}, "
                        "verifier: {kind: exact_match}}\n", capsys)
    assert rc == 2 and "record 3 and record 66 have the same task id 't2'" in err


def test_a_typo_in_a_gate_metric_and_k_above_generate_k(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _jsonl(tmp_path / "d.jsonl", [{"q": f"{i}?", "gold": str(i)} for i in range(4)])
    base = ("name: v\nsources:\n  - {name: a, kind: file, path: d.jsonl, fields: {prompt: q, "
            "reference: gold}, verifier: {kind: exact_match}, generate: {model: {kind: function, "
            "callable: 'assay.models.function:echo'}, k: %d}}\n")
    rc, err = _validate(tmp_path, base % 2 + "nightly: {must_not_regress: [pass@1, truncatd]}\n",
                        capsys)
    assert rc == 2
    assert ("nightly.must_not_regress[1]: 'truncatd' is neither pass@1 nor a marker of the "
            "sources' rows (did you mean 'truncated'?)") in err
    rc, err = _validate(tmp_path, base % 2 + "nightly: {must_not_regress: [pass@1, truncated]}\n",
                        capsys)
    assert rc == 0, err
    rc, err = _validate(tmp_path, base % 2 + "measure: {pass_at: {k: 4}}\n", capsys)
    assert rc == 2 and ("measure.pass_at.k: 4 is above sources[0].generate.k 2 ('a'): pass@4 "
                        "needs 4 samples per task") in err


def test_an_unquoted_baseline_date_names_that_night(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # YAML reads an unquoted 2026-11-02 as a date; for baseline it can only mean that night
    rc, err = _validate(tmp_path, "name: v\nsources: [{name: a, kind: humaneval}]\n"
                        "nightly: {baseline: 2026-11-02}\n", capsys)
    assert rc == 0, err
    import datetime as dt

    from assay.nightly.spec import NightlySpec

    assert NightlySpec.model_validate({"baseline": dt.date(2026, 11, 2)}).baseline == "2026-11-02"
