"""User functions are called by parameter name (graders, judges, reward and model functions),
and a name assay does not pass is refused at ``assay validate``, naming the function."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

import assay
from assay import stages
from assay.cli import main
from assay.errors import RowsTypeError
from assay.models import generate
from assay.reward.function import FunctionRewardModel
from assay.spec import load_spec
from assay.store import Store


def _module(tmp_path: Path, body: str) -> str:
    name = f"userfns_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    return name


USER = """
def grade(prompt, completion, reference):
    # the order most people write; a positional call would pass the row as `reference`
    assert prompt.endswith("?"), prompt
    return completion == reference

def grade_kw(**kwargs):
    assert set(kwargs) == {"prompt", "completion", "reference", "row", "meta", "tol"}, kwargs
    return kwargs["completion"] == kwargs["reference"] and kwargs["meta"]["level"] == "1"

def grade_bad(answer, gold):
    return answer == gold

def score(completions, prompts):
    return [float(len(c)) for c in completions]

def model(seeds, prompts):
    return [f"{p}|{s}" for p, s in zip(prompts, seeds)]

def model_bad(texts, n):
    return texts
"""


def _spec(tmp_path: Path, verifier: str, extra: str = "") -> Path:
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(6):
            for c in (str(i), str(i + 1)):
                f.write(json.dumps({"id": f"t{i}", "q": f"{i}?", "a": c, "gold": str(i),
                                    "level": "1"}) + "\n")
    p = tmp_path / "s.yaml"
    p.write_text(f"""
name: binding
sources:
  - name: m
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id, meta: [level]}}
    verifier: {verifier}
{extra}
measure: {{pass_at: {{k: 2}}}}
""")
    return p


def _rewards(tmp_path: Path, spec: Path) -> list:
    store = Store(tmp_path / "store")
    run = stages.run_study(load_spec(spec), store, progress=None, workers=1)
    rows = stages.concat_rows(store, run.graded["m"])
    return [(r["final_text"], r["reward"], r["judge_status"]) for r in rows]


def test_a_grader_written_prompt_completion_reference_is_called_by_name(tmp_path: Path) -> None:
    mod = _module(tmp_path, USER)
    spec = _spec(tmp_path, f'{{kind: function, function: "{mod}:grade"}}')
    assert main(["validate", str(spec)]) == 0
    got = _rewards(tmp_path, spec)
    assert got == [(str(i + j), float(j == 0), "ok") for i in range(6) for j in (0, 1)]


def test_kwargs_gets_every_name_and_the_params(tmp_path: Path) -> None:
    mod = _module(tmp_path, USER)
    spec = _spec(tmp_path, f'{{kind: function, function: "{mod}:grade_kw", params: {{tol: 0}}}}')
    assert main(["validate", str(spec)]) == 0
    assert [r for _, r, _ in _rewards(tmp_path, spec)] == [1.0, 0.0] * 6


def test_validate_names_the_function_and_the_names_it_may_take(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = _module(tmp_path, USER)
    spec = _spec(tmp_path, f'{{kind: function, function: "{mod}:grade_bad"}}')
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"sources[0].verifier.function: verifier function '{mod}:grade_bad' takes parameter " \
           "'answer'" in err
    assert "prompt, completion, reference, row, meta" in err
    # a reward function and a model function named in a spec are checked the same way
    spec = _spec(tmp_path, "{kind: exact_match}", f"""
reward:
  models: [{{name: r, kind: function, function: "{mod}:grade_bad"}}]
  data: null
""")
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "reward.models[0].function: reward function 'grade_bad' takes parameter 'answer'" in err
    assert "prompts, completions" in err


def test_a_model_function_with_an_unknown_parameter_is_refused_at_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = _module(tmp_path, USER)
    (tmp_path / "p.jsonl").write_text('{"q": "1?", "gold": "1"}\n')
    spec = tmp_path / "g.yaml"
    spec.write_text(f"""
name: g
sources:
  - name: m
    kind: file
    path: p.jsonl
    fields: {{prompt: q, reference: gold}}
    generate: {{model: {{kind: function, callable: "{mod}:model_bad"}}}}
    verifier: {{kind: exact_match}}
""")
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["validate", str(spec)]) == 2
    finally:
        sys.path.remove(str(tmp_path))
    err = capsys.readouterr().err
    assert f"model.callable '{mod}:model_bad' takes parameter 'texts'" in err
    assert "prompts, seeds, params" in err


def test_reward_and_model_functions_bind_by_name(tmp_path: Path, monkeypatch) -> None:
    mod = _module(tmp_path, USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    fns = __import__(mod)
    rm = FunctionRewardModel(fns.score, batched=True, by_name=True)
    assert rm.score(["a long prompt", "p"], ["xy", "xyz"]).tolist() == [2.0, 3.0]
    g = generate(["q1", "q2"], {"kind": "function", "callable": f"{mod}:model"}, api="completions",
                 store=Store(tmp_path / "st"))
    assert [c[0].partition("|")[0] for c in g.completions] == ["q1", "q2"]
    assert [c[0].partition("|")[2] for c in g.completions] == [str(r["seed"]) for r in g.records]


def test_a_judge_callable_binds_by_name_and_short_lambdas_stay_positional() -> None:
    rows = assay.rows(["2+3?", "2+2?"], ["5", "5"], lambda completion, prompt: prompt == "2+3?"
                      and completion == "5")
    assert [r["reward"] for r in rows] == [1.0, 0.0]
    rows = assay.rows(["2+3?"], ["5"], lambda p, c: c == "5")
    assert [r["reward"] for r in rows] == [1.0]
    with pytest.raises(RowsTypeError, match=r"takes parameter 'gold'.*prompt, completion"):
        assay.rows(["2+3?"], ["5"], lambda completion, gold: 1)


BUILDER = """
def build(completion, prompt, reference=None):
    return f"Q: {prompt}\\nA: {completion}\\nGold: {reference}\\nGRADE: " + (
        "C" if completion == reference else "I")

def build_bad(question, answer):
    return question
"""


def test_a_judge_prompt_builder_is_called_by_name_and_checked_at_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = _module(tmp_path, BUILDER)
    # the echo model answers with the prompt itself, so its "GRADE:" line is the builder's
    judge = ('{kind: judge, params: {model: {kind: function, callable: '
             f'"assay.models.function:echo"}}, template: "{mod}:build", '
             f'store: "{tmp_path / "st"}"}}}}')
    spec = _spec(tmp_path, judge)
    assert main(["validate", str(spec)]) == 0, capsys.readouterr().err
    got = _rewards(tmp_path, spec)
    assert got == [(str(i + j), float(j == 0), "ok") for i in range(6) for j in (0, 1)]
    bad = _spec(tmp_path, judge.replace(":build", ":build_bad"))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"judge template '{mod}:build_bad' takes parameter 'question'" in err
