"""choices: sources without a model: contexts with few-shot examples, gold answers in every
form, the hub folder's split files, and errors that name the record, the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.errors import SpecError
from assay.sources.choices import ChoicesSpec, gold_index
from assay.spec import parse_spec

MODEL = '{kind: hf, path: "./m"}'


def _write(path: Path, recs: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _spec(tmp: Path, choices: str, extra: str = "", fields: str = "{prompt: q}") -> object:
    return parse_spec(f"""
version: 1
name: t
sources:
  - name: s
    kind: file
    path: q.jsonl
    fields: {fields}
    choices: {{model: {MODEL}, {choices}}}{extra}
""", source="t.yaml", base_dir=str(tmp))


QS = [{"q": f"question {i}?", "choices": ["yes", "no", "maybe"], "answer": i % 3,
       "topic": "ab"[i % 2]} for i in range(6)]


def test_contexts_have_seeded_examples_and_never_the_question(tmp_path: Path) -> None:
    _write(tmp_path / "q.jsonl", QS)
    spec = _spec(tmp_path, "fewshot: {k: 2, seed: 7}, target_delimiter: ' '")
    rows = spec.sources[0].build(spec.paths)[0]
    again = spec.sources[0].build(spec.paths)[0]
    assert rows == again  # the same draw every time
    for i, r in enumerate(rows):
        shots, question = r["prompt"].rsplit("\n\n", 1)
        assert question == f"question {i}?"
        parts = shots.split("\n\n")
        assert len(parts) == 2 and all(p.startswith("question ") for p in parts)
        assert f"question {i}?" not in parts[0] and f"question {i}?" not in parts[1]
        for p in parts:  # each example ends with its gold choice after the delimiter
            j = int(p.split()[1].rstrip("?"))
            assert p.endswith("? " + ["yes", "no", "maybe"][j % 3])
        assert r["privileged"] == {"reference": ["yes", "no", "maybe"][i % 3],
                                   "choices": ["yes", "no", "maybe"], "gold": i % 3}
        assert r["meta"] == {"topic": "ab"[i % 2]}
    # with examples from their own file, a question's context does not depend on which other
    # questions are in the run (seeded by its task id, not by its position)
    _write(tmp_path / "dev.jsonl", [{**q, "q": "dev " + q["q"]} for q in QS])
    spec = _spec(tmp_path, "fewshot: {k: 2, path: dev.jsonl}", fields="{prompt: q, task_id: q}")
    full = spec.sources[0].build(spec.paths)[0]
    _write(tmp_path / "q.jsonl", QS[:1] + QS[2:])
    fewer = spec.sources[0].build(spec.paths)[0]
    assert fewer[0]["prompt"] == full[0]["prompt"] and fewer[1]["prompt"] == full[2]["prompt"]
    assert len({r["prompt"].split("\n\n")[0] for r in full}) > 1  # not one draw for all


@pytest.mark.parametrize("answer,labels,want", [(2, None, 2), ("maybe", None, 2), ("C", None, 2),
                                                ("2", None, 2), ("z", ["x", "y", "z"], 2)])
def test_gold_answer_forms(answer, labels, want) -> None:
    c = ChoicesSpec.model_validate({"model": {"kind": "hf", "path": "m"},
                                    "labels": "labels" if labels else None})
    rec = {"answer": answer, "labels": labels}
    assert gold_index(rec, c, ["yes", "no", "maybe"], "r") == want


@pytest.mark.parametrize("answer,match", [(5, "not an index of the 3 choices"),
                                          ("perhaps", "neither an index"),
                                          (True, "boolean"), (None, "is missing")])
def test_bad_answers_name_the_record_and_field(tmp_path: Path, answer, match) -> None:
    _write(tmp_path / "q.jsonl", [{**QS[0]}, {**QS[1], "answer": answer}])
    spec = _spec(tmp_path, "answer: answer")
    with pytest.raises(SpecError, match=match) as e:
        spec.sources[0].build(spec.paths)
    assert "record 2" in str(e.value) and "'answer' (choices.answer)" in str(e.value)


def test_spec_errors(tmp_path: Path) -> None:
    _write(tmp_path / "q.jsonl", QS)
    with pytest.raises(SpecError, match="drop \\['verifier'\\]"):
        _spec(tmp_path, "answer: answer", "\n    verifier: {kind: exact_match}")
    with pytest.raises(SpecError, match="one template per choice"):
        _spec(tmp_path, "templates: [A]")
    spec = _spec(tmp_path, "fewshot: {k: 6}")
    with pytest.raises(SpecError, match="fewshot.k is 6 but only 5 examples"):
        spec.sources[0].build(spec.paths)
    spec = _spec(tmp_path, "fewshot: {k: 1, split: dev}")
    with pytest.raises(SpecError, match="fewshot.split needs an hf_dataset"):
        spec.sources[0].build(spec.paths)


def test_hf_folder_reads_the_split_named_file(tmp_path: Path) -> None:
    d = tmp_path / "mc"
    d.mkdir()
    _write(d / "test.jsonl", QS[:4])
    _write(d / "dev.jsonl", [{**q, "q": "dev " + q["q"]} for q in QS[4:]])
    spec = parse_spec(f"""
version: 1
name: t
sources:
  - name: s
    kind: hf_dataset
    path: mc
    split: test
    fields: {{prompt: q}}
    choices: {{model: {MODEL}, fewshot: {{k: 1, split: dev}}}}
""", source="t.yaml", base_dir=str(tmp_path))
    rows = spec.sources[0].build(spec.paths)[0]
    assert len(rows) == 4 and all(r["prompt"].startswith("dev question") for r in rows)


def test_validate_names_the_choices_problem_and_a_missing_by(tmp_path: Path) -> None:
    from assay.spec import check_data

    _write(tmp_path / "q.jsonl", [QS[0], {**QS[1], "answer": 9}])
    spec = _spec(tmp_path, "answer: answer", "\nmeasure: {choice_accuracy: {by: level}}")
    problems, _ = check_data(spec)
    assert any(p.startswith("sources[0].choices:") and "record 2" in p for p in problems), problems
    _write(tmp_path / "q.jsonl", QS)
    problems, _ = check_data(spec)
    assert any("measure.choice_accuracy.by: 'level' is not a field" in p for p in problems)
    with pytest.raises(SpecError, match="unknown source 'nope'"):
        _spec(tmp_path, "answer: answer", "\nmeasure: {perplexity: {sources: [nope]}}")


def test_first_n_and_lm_eval_samplers(tmp_path: Path) -> None:
    """first_n: the first k examples for every question (the question itself skipped when the
    examples are the evaluated records); lm_eval: one generator advanced question by question,
    so a question's examples depend on the questions before it (seeded: they do not)."""
    _write(tmp_path / "q.jsonl", QS)
    _write(tmp_path / "dev.jsonl", [{**q, "q": "dev " + q["q"]} for q in QS])

    def shots(choices: str, path: str = "q.jsonl") -> list[list[str]]:
        spec = _spec(tmp_path, choices)
        rows = spec.sources[0].build(spec.paths)[0]
        return [[p.rsplit("?", 1)[0] for p in r["prompt"].split("\n\n")[:-1]] for r in rows]

    assert shots("fewshot: {k: 2, sampler: first_n, path: dev.jsonl}") == \
        [["dev question 0", "dev question 1"]] * 6
    own = shots("fewshot: {k: 2, sampler: first_n}")
    assert own[0] == ["question 1", "question 2"] and own[1] == ["question 0", "question 2"]
    assert own[2:] == [["question 0", "question 1"]] * 4
    full = shots("fewshot: {k: 2, sampler: lm_eval}")
    assert all(f"question {i}" not in s for i, s in enumerate(full))
    _write(tmp_path / "q.jsonl", QS[1:])  # one question fewer: the later draws move
    assert shots("fewshot: {k: 2, sampler: lm_eval}") != full[1:]
    assert shots("fewshot: {k: 2, sampler: lm_eval, seed: 5}") != shots(
        "fewshot: {k: 2, sampler: lm_eval}")


def test_description_is_a_template_and_new_options_keep_checksums(tmp_path: Path) -> None:
    """description renders per record (a missing field names choices.description); a spec
    that leaves the options added for lm-eval at their defaults dumps as before them."""
    _write(tmp_path / "q.jsonl", QS)
    spec = _spec(tmp_path, "description: 'About {{ topic }}: '")
    assert [r["prompt"] for r in spec.sources[0].build(spec.paths)[0]][:2] == \
        ["About a: question 0?", "About b: question 1?"]
    spec = _spec(tmp_path, "description: 'About {{ subject }}: '")
    with pytest.raises(SpecError, match=r"record 1: choices.description: 'subject' is undefined"):
        spec.sources[0].build(spec.paths)
    with pytest.raises(Exception, match="choices.choice_template: Jinja2 syntax error"):
        _spec(tmp_path, "choice_template: '{{ choice | }}'")
    dumped = json.dumps(_spec(tmp_path, "fewshot: {k: 1}").model_dump(mode="json"))
    for key in ("sampler", "exclude_question", "choice_template", "max_length"):
        assert f'"{key}"' not in dumped
    dumped = json.dumps(_spec(tmp_path, "fewshot: {k: 1, sampler: first_n}").model_dump())
    assert '"sampler": "first_n"' in dumped


def test_choice_template_and_regex_replace(tmp_path: Path) -> None:
    _write(tmp_path / "q.jsonl", [{"q": "x?", "choices": [" a [step] b ", "c  d"], "answer": 0}])
    spec = _spec(tmp_path, "choice_template: '{{ choice | trim | regex_replace(\"\\\\[.*?\\\\]"
                 " *\", \"\") | replace(\"  \", \" \") }}'")
    row = spec.sources[0].build(spec.paths)[0][0]
    assert row["privileged"]["choices"] == ["a b", "c d"]


def test_too_few_examples_apart_from_the_question(tmp_path: Path) -> None:
    """Copies of a question leave too few other examples: an error naming the record, for
    every sampler (never a short context, never Python's sample() error)."""
    _write(tmp_path / "q.jsonl", [QS[0]] * 3 + [QS[1]])
    for sampler in ("seeded", "first_n", "lm_eval"):
        spec = _spec(tmp_path, f"fewshot: {{k: 2, sampler: {sampler}, exclude_question: true, "
                     "path: q.jsonl}")
        with pytest.raises(SpecError, match=r"record 1: fewshot.k is 2 but only 1 examples"):
            spec.sources[0].build(spec.paths)
    spec = _spec(tmp_path, "fewshot: {k: 4, sampler: lm_eval, exclude_question: true, "
                 "path: q.jsonl}")
    with pytest.raises(SpecError, match="record 1: fewshot: the lm_eval sampler draws k \\+ 1 = 5"):
        spec.sources[0].build(spec.paths)
