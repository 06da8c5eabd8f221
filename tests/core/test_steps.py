"""One step vocabulary: the ops a source's rows and a preference view accept, checked the same
way by `assay validate` (the spec) and by the run (filter-rows, apply_derivation)."""

from __future__ import annotations

from pathlib import Path

import pytest

import assay
from assay.data.items import make_pair
from assay.data.view import DataView, apply_derivation
from assay.errors import DataError, SpecError
from assay.reward.prefdata import FilePreferences
from assay.spec import load_spec
from assay.stages.filter_rows import apply_row_steps
from assay.steps import ROW_OPS, STEP_FIELDS, VIEW_OPS, validate_steps

SPEC = """
name: steps
sources:
  - name: mine
    kind: file
    path: data.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: exact_match}}
    steps: [{step}]
measure:
  pass_at: {{k: 1}}
"""
EXAMPLE = {
    "where": {"op": "where", "field": "task_id", "cmp": "!=", "value": "t9"},
    "slice": {"op": "slice", "start": 0, "stop": 2},
    "sample": {"op": "sample", "n": 2, "seed": 3},
    "collapse_duplicates": {"op": "collapse_duplicates"},
}


def _rows() -> assay.Rows:
    return assay.rows(["p0", "p1", "p2"], [["a", "b"], ["c"], ["d"]], [[1, 0], [1], [0]],
                      task_ids=["t0", "t1", "t2"])


def _spec(tmp_path: Path, step: dict) -> Path:
    (tmp_path / "data.jsonl").write_text('{"id": "1", "q": "2+2?", "a": "4", "gold": "4"}\n')
    p = tmp_path / "spec.yaml"
    flow = "{" + ", ".join(f"{k}: {v!r}" for k, v in step.items()) + "}"
    p.write_text(SPEC.format(step=flow.replace("'", '"')))
    return p


def test_op_sets() -> None:
    assert set(ROW_OPS) < set(VIEW_OPS) == set(STEP_FIELDS) == set(EXAMPLE)
    assert "collapse_duplicates" not in ROW_OPS


@pytest.mark.parametrize("op", VIEW_OPS)
def test_row_ops_pass_validate_and_run_others_fail_both(tmp_path: Path, op: str) -> None:
    step = EXAMPLE[op]
    path = _spec(tmp_path, step)
    if op in ROW_OPS:
        spec = load_spec(path)
        assert spec.sources[0].steps[0]["op"] == op
        assert len(apply_row_steps(_rows(), spec.sources[0].steps)) > 0
        return
    with pytest.raises(SpecError) as at_validate:
        load_spec(path)
    with pytest.raises(SpecError) as at_run:
        apply_row_steps(_rows(), [step], where="sources[0].steps")
    for e in (at_validate, at_run):
        assert "sources[0].steps[0].op" in str(e.value)
        assert f"{op!r} is not supported for a source's rows" in str(e.value)
        assert "applies to preference views" in str(e.value)


@pytest.mark.parametrize("op", VIEW_OPS)
def test_view_ops_replay_on_a_view_and_in_preference_data(op: str) -> None:
    pairs = [make_pair(f"Q{i % 3}", "a", "b", "x", seed_id=f"s{i % 3}", builder_id="h")
             for i in range(6)]
    step = dict(EXAMPLE[op])
    if op == "where":
        step = {"op": "where", "field": "axis", "cmp": "==", "value": "x"}
    assert len(apply_derivation(DataView(pairs), [step])) > 0
    entry = FilePreferences.model_validate({"kind": "file", "path": "p.jsonl", "steps": [step]})
    assert entry.steps == [step]


def test_unknown_op_is_refused_by_both_sets() -> None:
    for ops in (ROW_OPS, VIEW_OPS):
        with pytest.raises(DataError, match=r"steps\[0\]\.op is 'filter'"):
            validate_steps([{"op": "filter"}], ops)


def test_where_cmp_defaults_to_equality_in_rows_and_views(tmp_path: Path) -> None:
    no_cmp = {"op": "where", "field": "task_id", "value": "t1"}
    spec = load_spec(_spec(tmp_path, no_cmp))
    assert spec.sources[0].steps == [{**no_cmp, "cmp": "=="}]
    # the run: the same rows as the explicit ==, from the raw step too
    explicit = apply_row_steps(_rows(), [{**no_cmp, "cmp": "=="}])
    assert len(explicit) == 1
    assert apply_row_steps(_rows(), [no_cmp]).table.equals(explicit.table)
    view = FilePreferences.model_validate(
        {"kind": "file", "path": "p.jsonl", "steps": [{"op": "where", "field": "axis",
                                                        "value": "x"}]})
    assert view.steps[0]["cmp"] == "=="
