"""History: every night in the table, history.json byte-identical, the plot marks regressions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.nightly_runs import make_night, make_rows
from helpers.webhook_receiver import webhook_receiver

from assay.nightly.gates import evaluate_night
from assay.nightly.history import HistoryError, history_png, write_history
from assay.nightly.notify import NotifyError, alert_payload, post_webhook
from assay.nightly.spec import NightlySpec

GOOD = [0.75 if i % 3 else 1.0 for i in range(30)]
BAD = [0.0 if i % 2 else r for i, r in enumerate(GOOD)]


def _nights(base: Path, plan: dict[str, list[float]]) -> list[dict]:
    docs = []
    for night, rates in plan.items():
        out = make_night(base, night, {"m": make_rows(rates)})
        doc = evaluate_night(out, study="s", night=night, sources=["m"], gates=NightlySpec(),
                             spec_definition="specdef:test")
        (out / "nightly.json").write_text(json.dumps(doc))
        docs.append(doc)
    return docs


def test_history_table_json_and_plot(tmp_path: Path) -> None:
    plan = {"2026-11-01": GOOD, "2026-11-02": GOOD, "2026-11-03": BAD}
    docs = _nights(tmp_path / "s", plan)
    text, rows = write_history(tmp_path / "s")
    lines = text.splitlines()[2:]
    assert [ln.split()[0] for ln in lines] == list(plan)
    assert "WORSE" in lines[2] and "no baseline" in lines[0] and "2026-11-02" in lines[2]
    # every number in the table is the night's own estimate and delta
    reg = docs[2]["regressions"][0]
    assert (f"{reg['delta']:+.3f}" in lines[2]
            and f"[{reg['low']:.3f}, {reg['high']:.3f}]" in lines[2])
    first = (tmp_path / "s" / "history.json").read_bytes()
    png = (tmp_path / "s" / "history.png").read_bytes()
    assert json.loads(first)["nights"] == list(plan) and png[:4] == b"\x89PNG"
    write_history(tmp_path / "s")
    assert (tmp_path / "s" / "history.json").read_bytes() == first
    assert (tmp_path / "s" / "history.png").read_bytes() == png
    # the plot differs when the regression mark is removed (it is drawn, not decorative)
    unmarked = [{**r, "regression": False} for r in rows]
    assert history_png(unmarked, "s") != history_png(rows, "s")
    _, last2 = write_history(tmp_path / "s", last=2, out_dir=tmp_path)
    assert sorted({r["night"] for r in last2}) == ["2026-11-02", "2026-11-03"]


def test_history_of_a_root_with_several_studies_names_them(tmp_path: Path) -> None:
    _nights(tmp_path / "root" / "s", {"2026-11-01": GOOD})
    with pytest.raises(HistoryError, match=r"holds the studies \['s'\]"):
        write_history(tmp_path / "root")
    with pytest.raises(HistoryError, match="no such directory"):
        write_history(tmp_path / "nope")


REG = {"study": "s", "source": "m", "metric": "pass@1", "night": "2026-11-03",
       "baseline": "2026-11-02", "delta": -0.25, "low": -0.34, "high": -0.16, "p_adjusted": 0.0001}


def test_webhook_alert_is_one_message_with_the_numbers() -> None:
    with webhook_receiver(fail_first=1) as hook:
        post_webhook(hook["url"], [REG])
    assert hook["requests"] == 2  # one 503, retried once
    (msg,) = hook["messages"]
    assert msg == alert_payload([REG])
    assert "s/m/pass@1" in msg["text"] and "-0.250 [-0.340, -0.160]" in msg["text"]
    assert msg["regressions"][0]["delta"] == -0.25


def test_webhook_rejection_is_an_error_not_retried() -> None:
    with webhook_receiver(status=404) as hook:
        with pytest.raises(NotifyError, match="HTTP 404"):
            post_webhook(hook["url"], [REG])
    assert hook["requests"] == 1


def test_a_year_of_nights_plots_at_a_bounded_size() -> None:
    import io

    from matplotlib import image

    rows = [{"night": f"2026-{1 + d // 28:02d}-{1 + d % 28:02d}", "source": "m", "metric": "pass@1",
             "gated": True, "value": 0.5, "low": 0.4, "high": 0.6, "regression": d == 100}
            for d in range(336)]
    png = history_png(rows, "s")
    h, w = image.imread(io.BytesIO(png)).shape[:2]
    assert w <= 1800 and h <= 400
