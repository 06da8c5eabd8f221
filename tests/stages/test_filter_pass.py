"""A source without steps: filter-rows names the built rows again instead of decoding and
storing them a second time (issue 50: the whole table was held once more for nothing), and
what follows is the same as when the rows are filtered by a step that keeps them all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from assay import stages
from assay.spec import load_spec
from assay.stages import filter_rows
from assay.store import Store

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "flows"))

from test_study_flow import SPEC, write_study  # noqa: E402


def _results(tmp: Path, spec_text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list]:
    write_study(tmp, spec_text)
    loaded: list[str] = []
    real = filter_rows.load_rows

    def counted(store, res, name="rows"):  # type: ignore[no-untyped-def]
        loaded.append(res.label)
        return real(store, res, name)

    monkeypatch.setattr(filter_rows, "load_rows", counted)
    run = stages.run_study(load_spec(tmp / "spec.yaml"), Store(tmp / "store"), progress=None)
    return {f"{r.stage}[{r.label}]": r for r in run.results}, loaded


def test_a_source_without_steps_is_not_decoded_or_stored_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res, loaded = _results(tmp_path, SPEC, monkeypatch)
    assert loaded == ["a"]  # a's slice reads its rows; b, without steps, reads none
    built, kept = res["build-rows[b]"], res["filter-rows[b]"]
    assert kept.outputs["rows"] == built.outputs["rows"]
    assert kept.checksums["rows"] == built.checksums["rows"]
    assert kept.summary["rows"] == built.summary["rows"] == 36
    assert res["filter-rows[a]"].outputs["rows"] != res["build-rows[a]"].outputs["rows"]


def test_what_follows_equals_a_step_that_keeps_every_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plain").mkdir()
    plain, _ = _results(tmp_path / "plain", SPEC, monkeypatch)
    keep_all = SPEC.replace("reward: r}\n", "reward: r}\n    steps: [{op: slice, start: 0}]\n")
    assert keep_all != SPEC
    (tmp_path / "all").mkdir()
    stepped, loaded = _results(tmp_path / "all", keep_all, monkeypatch)
    assert sorted(loaded) == ["a", "b"]  # the step decodes b's rows and stores them again
    assert stepped["filter-rows[b]"].checksums == plain["filter-rows[b]"].checksums
    for name, r in plain.items():  # every node after filter-rows has the same outputs (the
        # report quotes the spec, whose steps differ)
        if not name.startswith(("build-rows", "filter-rows[b]", "report")):
            assert stepped[name].checksums == r.checksums, name
