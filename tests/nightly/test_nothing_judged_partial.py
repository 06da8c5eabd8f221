"""A night with a source none of whose rows could be judged (run.json ``nothing_judged``, the
verdict `assay run` exits 4 on) is a partial night for the gate: marked partial, never compared,
never a baseline, rather than the gate failing on a pass@1 with no reward (issue 47)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest
from helpers.nightly_runs import make_night, make_rows

import assay
from assay.errors import EXIT_PARTIAL
from assay.nightly.gates import candidate_nights, evaluate_night, night_markdown
from assay.nightly.partial import NOT_COMPARED, partial_text
from assay.nightly.spec import NightlySpec

UNJUDGED = {"rows": 8, "reasons": [["no_verdict", 8]]}


def _unjudged_rows() -> assay.Rows:
    # what a judge that never answers in its format leaves: no reward on any of 4 tasks x 2
    return assay.rows([f"q{i}" for i in range(4)], [["a", "b"]] * 4, [[None, None]] * 4,
                      task_ids=[f"t{i}" for i in range(4)])


def _nothing_judged_night(base: Path, night: str) -> Path:
    out = make_night(base, night, {"m": _unjudged_rows(), "ok": make_rows([0.5] * 10)})
    info = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**info, "nothing_judged": {"m": UNJUDGED}}))
    return out


def test_nothing_judged_source_makes_the_night_partial(tmp_path: Path) -> None:
    base = tmp_path / "s"
    make_night(base, "2026-11-01", {"m": make_rows([0.5] * 4), "ok": make_rows([0.5] * 10)})
    out = _nothing_judged_night(base, "2026-11-02")
    for allow in (False, True):  # nothing judged: no subset to compare, even when allowed
        doc = evaluate_night(out, study="s", night="2026-11-02", sources=["m", "ok"],
                             gates=NightlySpec(allow_partial=allow), spec_definition="specdef:test")
        assert doc["partial"] == ["m"] and doc["regressions"] == []
        m, ok = doc["sources"]
        assert m["partial"]["compared"] is False
        assert m["partial"]["left_out"] == ["t0", "t1", "t2", "t3"]
        assert m["partial"]["samples"] == 8
        (p1,) = m["metrics"]
        assert (p1["metric"], p1["value"], p1["n"], p1["verdict"]) == ("pass@1", None, 0,
                                                                       NOT_COMPARED)
        assert "partial" not in ok and ok["metrics"][0]["verdict"] != NOT_COMPARED
    text = partial_text(m)
    assert text.startswith("m: no row of 8 could be judged (no_verdict (8))"), text
    assert "**PARTIAL NIGHT**" in night_markdown(doc)
    (out / "nightly.json").write_text(json.dumps(doc))
    # a partial night is never a baseline
    later = make_night(base, "2026-11-03", {"m": make_rows([0.5] * 4), "ok": make_rows([0.5] * 10)})
    assert [d.name for d in candidate_nights(later.parent, "2026-11-03", "specdef:test", [])] == [
        "2026-11-01"]


@pytest.mark.slow
def test_assay_nightly_exits_partial_and_alerts(prefect_server: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """End to end: a judge that never gives a verdict makes `assay nightly` exit 4, send the
    partial-night alert and write nightly.json ``partial`` (it used to fail in the gate)."""
    from helpers.webhook_receiver import webhook_receiver

    from assay.cli import main

    mod = f"nj_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{mod}.py").write_text("def grade(completion, reference):\n    return None\n")
    (tmp_path / "a.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"{i}?", "a": str(i), "gold": str(i)}) + "\n"
        for i in range(6)))
    with webhook_receiver() as hook:
        spec = tmp_path / "nj.yaml"
        spec.write_text(f"""name: nj
sources:
  - name: bad
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: a, reference: gold, task_id: id}}
    verifier: {{kind: function, function: "{mod}:grade"}}
nightly: {{notify: "{hook['url']}"}}
""")
        sys.path.insert(0, str(tmp_path))
        try:
            code = main(["nightly", str(spec), "--root", str(tmp_path / "n"), "--store",
                         str(tmp_path / "store"), "--night", "2026-12-02"])
        finally:
            sys.path.remove(str(tmp_path))
    err = capsys.readouterr().err
    assert code == EXIT_PARTIAL, err
    assert "bad: no row of 6 could be judged" in err, err
    doc = json.loads((tmp_path / "n" / "nj" / "2026-12-02" / "nightly.json").read_text())
    assert doc["partial"] == ["bad"] and doc["sources"][0]["partial"]["compared"] is False
    assert [m["subject"] for m in hook["messages"]] == [
        "assay nightly 2026-12-02: partial night (nj)"]
