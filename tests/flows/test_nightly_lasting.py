"""A lasting regression (issue 38): with ``baseline: previous`` the second bad night compares
with the first bad one and says nothing; with ``baseline: last_good`` every bad night is
compared with the last night that passed, so it fails and alerts each night until fixed. The
night's date is read in ``nightly.timezone``."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.webhook_receiver import webhook_receiver

SPEC = """name: lasting
sources:
  - name: m
    kind: file
    path: d.jsonl
    fields: {{prompt: q, completion: c, reference: gold, task_id: id}}
    verifier: {{kind: exact_match}}
nightly: {{baseline: {baseline}, notify: "{hook}"}}
"""


def _answers(tmp: Path, right: bool) -> None:
    (tmp / "d.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": str(i), "c": str(i) if right else "x", "gold": str(i)})
        + "\n" for i in range(20)))


@pytest.mark.slow
@pytest.mark.parametrize("baseline", ["previous", "last_good"])
def test_lasting_regression(prefect_server: str, tmp_path: Path, baseline: str) -> None:
    from assay.flows.nightly import nightly

    verdicts: list[tuple[bool, Any]] = []
    with webhook_receiver() as hook:
        spec = tmp_path / "s.yaml"
        spec.write_text(SPEC.format(baseline=baseline, hook=hook["url"]))
        for night, right in (("2026-12-01", True), ("2026-12-02", False),
                             ("2026-12-03", False)):
            _answers(tmp_path, right)
            state = nightly(specs=[str(spec)], root=str(tmp_path / "n"), night=night,
                            store_root=str(tmp_path / "st"), return_state=True)
            doc = json.loads((tmp_path / "n" / "lasting" / night / "nightly.json").read_text())
            verdicts.append((state.is_failed(), doc["sources"][0]["baseline"]))
        alerts = [m["subject"] for m in hook["messages"]]
    if baseline == "previous":  # the bad night is tomorrow's baseline: silence
        assert verdicts == [(False, None), (True, "2026-12-01"), (False, "2026-12-02")]
        assert alerts == ["assay nightly 2026-12-02: 1 regression (lasting)"]
    else:
        assert verdicts == [(False, None), (True, "2026-12-01"), (True, "2026-12-01")]
        assert alerts == ["assay nightly 2026-12-02: 1 regression (lasting)",
                          "assay nightly 2026-12-03: 1 regression (lasting)"]


def test_night_date_in_the_operators_timezone(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A run at 05:50 in Tokyo is that morning's night there, the day after UTC's date; two
    specs with different timezones in one night are refused before anything runs."""
    from assay.cli import main
    from assay.nightly.spec import night_date

    t = dt.datetime(2026, 12, 4, 20, 50, tzinfo=dt.UTC)
    assert night_date(t, "Asia/Tokyo") == "2026-12-05" and night_date(t, "UTC") == "2026-12-04"
    _answers(tmp_path, True)
    for name, tz in (("a", "Asia/Tokyo"), ("b", "Europe/Berlin")):
        (tmp_path / f"{name}.yaml").write_text(
            SPEC.format(baseline="previous", hook="http://127.0.0.1:9/h").replace(
                "name: lasting", f"name: {name}").replace(
                "nightly: {", f"nightly: {{timezone: {tz}, "))
    assert main(["nightly", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"),
                 "--root", str(tmp_path / "n")]) == 2
    err = capsys.readouterr().err
    assert "nightly.timezone differs between the specs of one night" in err
    assert "['Asia/Tokyo', 'Europe/Berlin']" in err
    (tmp_path / "c.yaml").write_text(SPEC.format(baseline="previous", hook="x").replace(
        "nightly: {", "nightly: {timezone: Mars/Olympus, "))
    assert main(["validate", str(tmp_path / "c.yaml")]) == 2
    assert "timezone must be an IANA name" in capsys.readouterr().err
