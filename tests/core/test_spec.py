"""Study spec: YAML loading, errors with YAML paths, checksum scope, schema, row steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import assay
from assay.errors import SpecError
from assay.spec import json_schema_text, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]

BASE = """
name: demo
description: a demo
sources:
  - name: mine
    kind: file
    path: data.jsonl
    fields: {prompt: q, completion: a, reference: gold, task_id: id}
    verifier: {kind: exact_match}
    steps:
      - {op: slice, start: 0, stop: 3}
measure:
  pass_at: {k: 1}
output: runs/demo
execution: {runner: local, log_level: warning}
"""


def _write(tmp_path: Path, text: str = BASE, data: str | None = None) -> Path:
    (tmp_path / "data.jsonl").write_text(data if data is not None else
                                         '{"id": "1", "q": "2+2?", "a": "4", "gold": "4"}\n')
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


def _problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as ei:
        parse_spec(text, source="s.yaml")
    return [line.strip() for line in str(ei.value).splitlines()[1:]]


def test_shipped_configs_validate() -> None:
    names = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))
    assert {"quickstart.yaml", "own_completions.yaml",
            "transformers_reward_model.yaml"} <= set(names)
    for name in names:
        spec = load_spec(ROOT / "configs" / name)
        assert spec.checksum().startswith("spec:")


def test_schema_file_is_current() -> None:
    assert (ROOT / "configs" / "schema.json").read_text() == json_schema_text()
    schema = json.loads(json_schema_text())
    assert "sources" in schema["properties"] and "execution" in schema["properties"]


def test_errors_carry_yaml_path_and_line() -> None:
    text = """name: t
sources:
  - name: a
    kind: humaneval
    policy: {k: 0}
    steps:
      - {op: slice, start: 0}
      - {op: sample, n: -1, seed: 0}
  - name: b
    kind: file
    path: x.jsonl
  - name: c
    kind: nope
execution: {runner: spark}
"""
    probs = _problems(text)
    joined = "\n".join(probs)
    assert "s.yaml:8: sources[0].steps[1].n: must be a non-negative int" in joined
    assert "s.yaml:5: sources[0].policy.k:" in joined
    assert "sources[1]: give a verifier" in joined
    assert "s.yaml:12: sources[2]:" in joined and "'nope'" in joined
    assert "s.yaml:14: execution.runner:" in joined
    assert len(probs) == 5


def test_unknown_field_and_bad_reference_are_named() -> None:
    probs = _problems("name: t\nsources: [{name: a, kind: humaneval, polcy: {}}]\n")
    assert probs == ["s.yaml:2: sources[0].polcy: unknown field "
                     "(check the spelling; see configs/schema.json)"]
    probs = _problems("name: t\nsources: [{name: a, kind: humaneval}]\n"
                      "measure: {compare: [{before: a, after: zz}]}\n")
    assert "measure.compare[0].after: unknown source 'zz'" in probs[0]
    probs = _problems("name: t\n"
                      "sources: [{name: a, kind: humaneval}, {name: a, kind: humaneval}]\n")
    assert "names must be unique" in probs[0]


def test_not_a_mapping_and_bad_yaml() -> None:
    with pytest.raises(SpecError, match="a spec is a YAML mapping"):
        parse_spec("- 1\n- 2\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_spec("name: [unclosed\n")


def test_checksum_ignores_output_logging_name_and_execution(tmp_path: Path) -> None:
    p = _write(tmp_path)
    ref = load_spec(p).checksum()
    for old, new in [("output: runs/demo", "output: /somewhere/else"),
                     ("log_level: warning", "log_level: debug"),
                     ("runner: local", "runner: dask"),
                     ("name: demo", "name: renamed"),
                     ("description: a demo", "description: other words")]:
        p.write_text(BASE.replace(old, new))
        assert load_spec(p).checksum() == ref, (old, new)


def test_checksum_changes_with_everything_that_changes_results(tmp_path: Path) -> None:
    p = _write(tmp_path)
    ref = load_spec(p).checksum()
    for old, new in [("stop: 3", "stop: 4"), ("kind: exact_match", "kind: numeric"),
                     ("pass_at: {k: 1}", "pass_at: {k: 2}"), ("name: mine", "name: yours"),
                     ("reference: gold", "reference: q")]:
        p.write_text(BASE.replace(old, new))
        assert load_spec(p).checksum() != ref, (old, new)
    # Editing the data file changes it; moving the same file elsewhere does not.
    p.write_text(BASE)
    (tmp_path / "data.jsonl").write_text('{"id": "1", "q": "2+2?", "a": "5", "gold": "4"}\n')
    edited = load_spec(p).checksum()
    assert edited != ref
    sub = tmp_path / "sub"
    sub.mkdir()
    (tmp_path / "data.jsonl").rename(sub / "moved.jsonl")
    p.write_text(BASE.replace("path: data.jsonl", "path: sub/moved.jsonl"))
    assert load_spec(p).checksum() == edited
    # The definition checksum (a nightly study's identity) ignores the data's content, not how
    # it is graded or measured.
    definition = load_spec(p).definition_checksum()
    (sub / "moved.jsonl").write_text('{"id": "1", "q": "2+2?", "a": "4", "gold": "4"}\n')
    assert load_spec(p).definition_checksum() == definition
    assert load_spec(p).checksum() != edited
    p.write_text(BASE.replace("path: data.jsonl", "path: sub/moved.jsonl")
                 .replace("stop: 3", "stop: 4"))
    assert load_spec(p).definition_checksum() != definition


def test_relative_paths_resolve_from_spec_dir(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    p = _write(tmp_path)
    monkeypatch.chdir("/")
    spec = load_spec(p)
    assert spec.resolve("data.jsonl") == tmp_path / "data.jsonl"
    assert spec.output_dir() == Path("runs/demo")
    assert spec.output_dir("x") == Path("x")


def test_yaml_round_trip(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path))
    again = parse_spec(spec.to_yaml(), base_dir=str(tmp_path))
    assert again == spec and again.checksum() == spec.checksum()


def test_row_steps_replay_on_tasks() -> None:
    from assay.stages import apply_row_steps

    r = assay.rows(["a", "b", "c", "d"], [["x", "y"], ["z"], ["w", "v"], ["u"]],
                   [[1, 0], [1], [0, 0], [1]], task_ids=["A", "B", "C", "D"])
    sl = apply_row_steps(r, [{"op": "slice", "start": 1, "stop": 3}])
    assert [x["task_id"] for x in sl] == ["B", "C", "C"]
    s1 = apply_row_steps(r, [{"op": "sample", "n": 2, "seed": 7}])
    s2 = apply_row_steps(r, [{"op": "sample", "n": 2, "seed": 7}])
    assert s1 == s2 and len({x["task_id"] for x in s1}) == 2
    wh = apply_row_steps(r, [{"op": "where", "field": "task_id", "cmp": "in", "value": ["A", "D"]}])
    assert [x["final_text"] for x in wh] == ["x", "y", "u"]
    with pytest.raises(SpecError, match=r"src\[0\].n = 9 but only 4 tasks"):
        apply_row_steps(r, [{"op": "sample", "n": 9, "seed": 0}], where="src")
    with pytest.raises(SpecError, match="field 'nope'"):
        apply_row_steps(r, [{"op": "where", "field": "nope", "cmp": "==", "value": 1}])


def test_shards_never_split_a_task() -> None:
    from assay.stages import shard_bounds

    r = assay.rows([f"p{i}" for i in range(7)], [["a"] * (i % 3 + 1) for i in range(7)],
                   [[1] * (i % 3 + 1) for i in range(7)])
    ids = r.to_arrow().column("task_id").to_pylist()
    for size in (1, 2, 3, 5, 100):
        b = shard_bounds(r, size)
        assert b[0][0] == 0 and b[-1][1] == len(r)
        assert all(x[1] == y[0] for x, y in zip(b, b[1:]))
        assert all(ids[lo - 1] != ids[lo] for lo, _ in b[1:])


def test_records_with_field_mapping_and_clear_errors(tmp_path: Path) -> None:
    from assay.sources import FieldMap
    from assay.stages import rows_from_records

    fm = FieldMap(prompt="q", completion="a", reference="gold", task_id="id")
    r = rows_from_records([{"id": 1, "q": "2+2?", "a": "4", "gold": "4"},
                           {"id": 1, "q": "2+2?", "a": "5", "gold": "4"}], fm, where="src")
    assert [x["rollout_index"] for x in r] == [0, 1] and r[0]["privileged"] == {"reference": "4"}
    with pytest.raises(SpecError,
                       match=r"src record 2: field 'a' \(fields.completion\) is missing"):
        rows_from_records([{"id": 1, "q": "x", "a": "4", "gold": "4"},
                           {"id": 2, "q": "y", "gold": "4"}],
                          fm, where="src")
