"""Every ``measure:`` field of the spec is a registered measure, and a registered measure is
what the measure stage runs for it."""

from __future__ import annotations

from pathlib import Path

from assay.spec import MeasureSpec, load_spec
from assay.stages import (
    RunContext,
    Shard,
    run_build_rows,
    run_filter_rows,
    run_grade_shard,
    run_measure,
)
from assay.stages.cache import load_doc, load_rows
from assay.stages.grade import shard_bounds
from assay.stages.measure import MEASURES
from assay.store import Store


def test_each_spec_field_has_its_measure() -> None:
    assert sorted(MEASURES.names()) == sorted(MeasureSpec.model_fields)


def test_the_stage_runs_the_registered_measure(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "d.jsonl").write_text("".join(
        f'{{"id": "t{i}", "q": "q{i}", "a": "{i % 2}", "g": "1"}}\n' for i in range(6)))
    (tmp_path / "s.yaml").write_text(
        "name: m\nsources:\n  - {name: s, kind: file, path: d.jsonl, fields: {prompt: q, "
        "completion: a, reference: g, task_id: id}, verifier: {kind: exact_match}}\n"
        "measure: {pass_at: {}, eval_variance: {}}\n")
    spec = load_spec(tmp_path / "s.yaml")
    store = Store(tmp_path / "store")
    ctx = RunContext(store, spec)
    built = run_build_rows(ctx.on("s"))
    filtered = run_filter_rows(ctx.on("s"), built)
    b = shard_bounds(load_rows(store, filtered), 256)
    graded = {"s": [run_grade_shard(ctx.on("s"), filtered, Shard(0, 1, b[0]))]}
    seen: list[str] = []
    real = MEASURES.get("eval_variance").obj

    def spy(e, ctx):  # type: ignore[no-untyped-def]
        seen.append(type(e).__name__)
        return real(e, ctx)

    monkeypatch.setitem(MEASURES._kinds, "eval_variance",
                        MEASURES._kinds["eval_variance"].__class__("eval_variance", spy))
    res = run_measure(ctx, graded)
    docs = load_doc(store, res, "measurements")
    assert seen == ["VarianceSpec"]
    assert [d["kind"] for d in docs] == ["pass_at", "eval_variance"]
