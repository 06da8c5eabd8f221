"""Gates: the baseline each rule picks, what counts as a regression, and the spec section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.nightly_runs import make_night, make_rows
from scipy import stats

from assay.errors import SpecError
from assay.nightly.gates import choose_baseline, evaluate_night, metric_estimate, night_markdown
from assay.nightly.spec import NightlySpec
from assay.spec import parse_spec

rng = np.random.default_rng(7)
GOOD = [float(x) for x in rng.choice([0.25, 0.5, 0.75, 1.0], size=40)]


def _worse(rates: list[float]) -> list[float]:
    return [r if i % 4 == 0 else 0.0 for i, r in enumerate(rates)]


def test_marker_estimate_matches_scipy_t_interval() -> None:
    vals = rng.normal(10, 3, size=25)
    r = make_rows([0.5] * 25, marker={"len": list(vals)})
    e = metric_estimate(r, "marker:len")
    lo, hi = stats.t.interval(0.95, 24, loc=vals.mean(), scale=stats.sem(vals))
    assert e.n == 25 and e.value == pytest.approx(vals.mean())
    assert (e.interval.low, e.interval.high) == (pytest.approx(lo), pytest.approx(hi))


def test_regression_is_the_compare_verdict_with_its_interval(tmp_path: Path) -> None:
    base = tmp_path / "s"
    make_night(base, "2026-11-01", {"m": make_rows(GOOD)})
    make_night(base, "2026-11-02", {"m": make_rows(GOOD)})
    out = make_night(base, "2026-11-03", {"m": make_rows(_worse(GOOD))})
    doc = evaluate_night(out, study="s", night="2026-11-03", sources=["m"], gates=NightlySpec(),
                         spec_definition="specdef:test")
    (reg,) = doc["regressions"]
    assert (reg["source"], reg["metric"], reg["baseline"]) == ("m", "pass@1", "2026-11-02")
    true_delta = np.mean(_worse(GOOD)) - np.mean(GOOD)
    assert reg["delta"] == pytest.approx(true_delta) and reg["low"] < true_delta < reg["high"] < 0
    assert "s/m/pass@1" in night_markdown(doc) and "REGRESSION" in night_markdown(doc)
    # an identical night is no regression; a night of another spec definition is no baseline
    same = make_night(base, "2026-11-04", {"m": make_rows(_worse(GOOD))})
    doc = evaluate_night(same, study="s", night="2026-11-04", sources=["m"], gates=NightlySpec(),
                         spec_definition="specdef:test")
    assert doc["regressions"] == [] and doc["sources"][0]["baseline"] == "2026-11-03"
    doc = evaluate_night(same, study="s", night="2026-11-04", sources=["m"], gates=NightlySpec(),
                         spec_definition="specdef:other")
    assert (doc["sources"][0]["baseline"] is None
            and doc["sources"][0]["metrics"][0]["verdict"] == "no baseline")


def test_a_small_noisy_drop_is_not_a_regression(tmp_path: Path) -> None:
    base = tmp_path / "s"
    make_night(base, "2026-11-01", {"m": make_rows(GOOD)})
    dip = list(GOOD)
    dip[3] = max(0.0, dip[3] - 0.25)  # one task lost one sample: a raw drop, not a verdict
    out = make_night(base, "2026-11-02", {"m": make_rows(dip)})
    doc = evaluate_night(out, study="s", night="2026-11-02", sources=["m"], gates=NightlySpec(),
                         spec_definition="specdef:test")
    m = doc["sources"][0]["metrics"][0]
    assert m["delta"] < 0 and m["verdict"] == "no difference detected" and doc["regressions"] == []


def test_baseline_rules_best_and_date(tmp_path: Path) -> None:
    base = tmp_path / "s"
    nights = {"2026-11-01": 0.5, "2026-11-02": 0.9, "2026-11-03": 0.7}
    for n, p in nights.items():
        make_night(base, n,
                   {"m": make_rows([p if i % 2 else min(1.0, p + 0.1) for i in range(40)])})
    cands = sorted(d for d in base.iterdir())
    best = max(nights, key=nights.get)  # brute force: the highest pass@1 night
    assert choose_baseline("best", cands, "m", "pass@1").name == best
    assert choose_baseline("previous", cands, "m", "pass@1").name == "2026-11-03"
    assert choose_baseline("2026-11-01", cands, "m", "pass@1").name == "2026-11-01"
    assert choose_baseline("best", cands, "m", "pass@1",
                           higher_is_better=False).name == "2026-11-01"
    with pytest.raises(SpecError, match="night 2026-10-01 .* nights available"):
        choose_baseline("2026-10-01", cands, "m", "pass@1")
    # tonight at 0.7 again: against the best night (0.9) it is worse, against previous it is not
    out = make_night(base, "2026-11-04",
                     {"m": make_rows([0.7 if i % 2 else 0.8 for i in range(40)])})
    kw = dict(study="s", night="2026-11-04", sources=["m"], spec_definition="specdef:test")
    assert evaluate_night(out, gates=NightlySpec(baseline="previous"), **kw)["regressions"] == []
    (r,) = evaluate_night(out, gates=NightlySpec(baseline="best"), **kw)["regressions"]
    assert r["baseline"] == best


def test_lower_is_better_markers_and_ungated_metrics(tmp_path: Path) -> None:
    base = tmp_path / "s"
    lo = [0.0] * 40
    hi = [1.0 if i % 2 else 0.0 for i in range(40)]
    make_night(base, "2026-11-01",
               {"m": make_rows(GOOD, marker={"truncated": lo, "len": [5.0] * 40})})
    out = make_night(base, "2026-11-02", {"m": make_rows(GOOD, marker={"truncated": hi,
                                                                       "len": [50.0] * 40})})
    kw = dict(study="s", night="2026-11-02", sources=["m"], spec_definition="specdef:test")
    # truncation share rose: worse when declared lower-is-better and gated
    g = NightlySpec(must_not_regress=["pass@1", "truncated"], lower_is_better=["truncated"])
    doc = evaluate_night(out, gates=g, **kw)
    assert [r["metric"] for r in doc["regressions"]] == ["marker:truncated"]
    by = {m["metric"]: m for m in doc["sources"][0]["metrics"]}
    assert by["marker:len"]["gated"] is False and by["marker:len"]["verdict"] == "changed"
    assert by["marker:truncated"]["higher_is_better"] is False
    # not gated, not declared: assay knows a rise in truncation is worse; reported, never a
    # regression. A length has no direction: it changed
    doc = evaluate_night(out, gates=NightlySpec(), **kw)
    assert doc["regressions"] == []
    by = {m["metric"]: m for m in doc["sources"][0]["metrics"]}
    assert (by["marker:truncated"]["verdict"] == "worse"
            and not by["marker:truncated"]["regression"])
    assert by["marker:len"]["verdict"] == "changed" and by["marker:len"]["direction"] is None
    with pytest.raises(SpecError, match=r"source 'm' has no metric \['trunc'\].*markers \['len', "
                                        r"'truncated'\]"):
        evaluate_night(out, gates=NightlySpec(must_not_regress=["trunc"]), **kw)


def test_spec_section_is_outside_the_checksum() -> None:
    text = ("name: x\nsources:\n  - {name: a, kind: humaneval}\n"
            "nightly: {must_not_regress: [pass@1], baseline: best, alpha: 0.01}\n")
    spec = parse_spec(text)
    plain = parse_spec("name: x\nsources:\n  - {name: a, kind: humaneval}\n")
    assert spec.nightly.baseline == "best" and spec.nightly.alpha == 0.01
    assert spec.checksum() == plain.checksum()
    assert spec.definition_checksum() == plain.definition_checksum()
    with pytest.raises(SpecError, match=r"spec:4: nightly.baseline: baseline must be"):
        parse_spec(text.replace("best", "last-week"))
    with pytest.raises(SpecError, match=r"nightly.notify: notify must be a webhook URL"):
        parse_spec(text.replace("alpha: 0.01", "notify: 'slack me'"))
    with pytest.raises(SpecError, match=r"pass@1 is higher-is-better"):
        parse_spec(text.replace("alpha: 0.01", "lower_is_better: [pass@1]"))


def test_nightly_json_is_byte_identical_for_identical_nights(tmp_path: Path) -> None:
    docs = []
    for d in ("a", "b"):
        base = tmp_path / d / "s"
        make_night(base, "2026-11-01", {"m": make_rows(GOOD)})
        out = make_night(base, "2026-11-02", {"m": make_rows(_worse(GOOD))})
        docs.append(json.dumps(evaluate_night(out, study="s", night="2026-11-02", sources=["m"],
                                              gates=NightlySpec(), spec_definition="specdef:test"),
                               sort_keys=True))
    assert docs[0] == docs[1]


def test_regression_line_names_the_test_and_explains_an_interval_over_zero() -> None:
    from assay.nightly.gates import regression_line

    r = {"study": "s", "source": "m", "metric": "pass@1", "night": "2026-11-03",
         "baseline": "2026-11-02", "delta": -0.1, "low": -0.21, "high": 0.01,
         "p_adjusted": 0.00002, "n_paired": 40, "alpha": 0.05}
    line = regression_line(r)
    assert ("worse by the two-sided exact sign-flip test over 40 paired tasks "
            "(Holm-adjusted p < 0.0001 < alpha 0.05)") in line
    assert "descriptive paired t interval that the test does not read, so it may contain 0" in line
    assert "may contain 0" not in regression_line({**r, "high": -0.01})


#: Every metric the nightly report labels, with what a rise in it is: each one's verdict is
#: checked on a night where it rose clearly.
RISES = {"pass@1": "better", "marker:truncated": "worse", "marker:stop_trimmed": "worse",
         "marker:contaminated": "worse", "marker:refusal": "worse", "marker:http_error": "worse",
         "marker:acc_norm": "better", "marker:completion_tokens": "changed",
         "marker:prompt_tokens": "changed", "marker:len": "changed"}


def test_a_rise_in_each_reported_metric_is_labelled_by_its_direction(tmp_path: Path) -> None:
    base = tmp_path / "s"
    names = [m.removeprefix("marker:") for m in RISES if m != "pass@1"]
    lo = {n: [0.0] * 40 for n in names}
    hi = {n: [float(i % 4 != 0) * (50.0 if "tokens" in n or n == "len" else 1.0)
              for i in range(40)] for n in names}
    make_night(base, "2026-11-01", {"m": make_rows(_worse(GOOD), marker=lo)})
    out = make_night(base, "2026-11-02", {"m": make_rows(GOOD, marker=hi)})
    doc = evaluate_night(out, gates=NightlySpec(), study="s", night="2026-11-02", sources=["m"],
                         spec_definition="specdef:test")
    by = {m["metric"]: m for m in doc["sources"][0]["metrics"]}
    assert {m: by[m]["verdict"] for m in RISES} == RISES
    md = night_markdown(doc)
    assert "| marker:truncated (lower is better) |" in md
    assert "| marker:completion_tokens (no direction) |" in md
    # declared directions win; a metric without one cannot gate
    g = NightlySpec(lower_is_better=["completion_tokens"], higher_is_better=["refusal"])
    by = {m["metric"]: m for m in evaluate_night(
        out, gates=g, study="s", night="2026-11-02", sources=["m"],
        spec_definition="specdef:test")["sources"][0]["metrics"]}
    assert by["marker:completion_tokens"]["verdict"] == "worse"
    assert by["marker:refusal"]["verdict"] == "better"
    with pytest.raises(ValueError, match=r"\['len'\] have no direction"):
        NightlySpec(must_not_regress=["pass@1", "len"])
