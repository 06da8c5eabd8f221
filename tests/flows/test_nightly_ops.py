"""Nightly as an operation, on a real `prefect server`: three nights through `assay nightly`
(exit 3 and a Failed flow run on the planted regression, one webhook message, the history of
all three nights), an alert through a Prefect notification block, `assay store gc` on
flow-written run directories, and two processes running one spec on one store at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.webhook_receiver import webhook_receiver

from assay.cli import main

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

SPEC = """
name: gated
sources:
  - name: model
    kind: file
    path: answers.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
measure:
  pass_at: {k: 1}
nightly:
  must_not_regress: [pass@1]
  notify: NOTIFY
"""


def _answers(path: Path, tag: str, passes) -> None:  # noqa: ANN001
    with open(path, "w") as f:
        for i in range(30):
            for j in range(3):
                f.write(json.dumps({"id": f"t{i}", "q": f"question {i}", "c": f"{tag} {j}",
                                    "r": int(passes(i, j))}) + "\n")


def good(i: int, j: int) -> bool:
    return (i + j) % 5 != 0


def _env(server: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": server}


def _nightly_runs(night: str, root: Path) -> list:  # noqa: ANN001
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["assay-nightly"])))
    return [r for r in runs if r.parameters.get("night") == night
            and r.parameters.get("root") == str(root)]


@pytest.mark.server
@pytest.mark.slow
def test_three_nights_gate_alert_and_history(prefect_server: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    root, store = tmp_path / "nights", tmp_path / "store"
    codes, errs = [], []
    with webhook_receiver() as hook:
        (tmp_path / "spec.yaml").write_text(SPEC.replace("NOTIFY", hook["url"]))
        plan = [("2026-11-01", "v1", good),
                ("2026-11-02", "v2", lambda i, j: good(i, j) or i % 7 == 0),
                ("2026-11-03", "v3", lambda i, j: good(i, j) and i % 3 == 0)]  # the third: worse
        for night, tag, passes in plan:
            _answers(tmp_path / "answers.jsonl", tag, passes)
            p = subprocess.run([str(BIN / "assay"), "nightly", "spec.yaml", "--night", night,
                                "--root", str(root), "--store", str(store)],
                               cwd=tmp_path, env=_env(prefect_server), capture_output=True,
                               text=True, timeout=300)
            codes.append(p.returncode)
            errs.append(p.stderr)
    assert codes == [0, 0, 3], errs[-1][-3000:]
    assert "gated: REGRESSION on night 2026-11-03" in errs[2] and "error:" not in errs[2]
    assert "  gated/model/pass@1: delta -" in errs[2]
    assert "alert sent to" in errs[2] and (root / "gated" / "2026-11-03" / "run.log").is_file()
    # the flow run is Failed on the server, its message naming study/source/metric
    (run,) = _nightly_runs("2026-11-03", root)
    assert run.state.is_failed() and "gated/model/pass@1" in run.state.message
    for n in ("2026-11-01", "2026-11-02"):
        (ok,) = _nightly_runs(n, root)
        assert ok.state.is_completed()
    # one alert, with the study, metric, delta and interval
    assert hook["requests"] == 1
    (msg,) = hook["messages"]
    (reg,) = msg["regressions"]
    assert (reg["study"], reg["source"], reg["metric"], reg["baseline"]) == \
        ("gated", "model", "pass@1", "2026-11-02")
    assert reg["low"] <= reg["delta"] <= reg["high"] < 0
    assert (f"gated/model/pass@1: delta {reg['delta']:+.3f} [{reg['low']:.3f}, {reg['high']:.3f}]"
            in msg["text"])
    # the history: all three nights, the third marked; the night's report embeds the plot
    capsys.readouterr()
    assert main(["history", str(root / "gated")]) == 0
    table = capsys.readouterr().out.splitlines()[2:]
    assert [ln.split()[0] for ln in table] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert table[2].endswith("WORSE") and "no baseline" in table[0]
    night3 = root / "gated" / "2026-11-03"
    assert "![history](history.png)" in (night3 / "nightly.md").read_text()
    assert (night3 / "history.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((root / "gated" / "history.json").read_text())["nights"] == \
        ["2026-11-01", "2026-11-02", "2026-11-03"]
    # gc on these flow-written run directories: keep the last night, which reruns fully cached
    assert main(["store", "gc", "--store", str(store), "--runs", str(root), "--keep-nights", "1",
                 "--grace", "0"]) == 0
    assert main(["store", "verify", "--store", str(store)]) == 0
    from assay.flows.study import run_spec

    again = run_spec(str(tmp_path / "spec.yaml"), str(tmp_path / "rerun"), str(store),
                     embedded=False, publish=False)
    assert again["computed"] == [] and len(again["cached"]) == 4
    assert ((tmp_path / "rerun" / "report.json").read_bytes()
            == (night3 / "report.json").read_bytes())


@pytest.mark.server
def test_alert_through_a_prefect_notification_block(prefect_server: str, tmp_path: Path) -> None:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    from assay.flows.nightly import NightlyRegression, nightly

    with webhook_receiver() as hook:
        CustomWebhookNotificationBlock(
            name="assay", url=hook["url"], allow_private_urls=True,
            json_data={"text": "{{subject}}\n{{body}}"}).save("assay-alerts", overwrite=True)
        (tmp_path / "spec.yaml").write_text(SPEC.replace("NOTIFY", "custom-webhook/assay-alerts"))
        kw = dict(specs=[str(tmp_path / "spec.yaml")], root=str(tmp_path / "n"),
                  store_root=str(tmp_path / "store"))
        _answers(tmp_path / "answers.jsonl", "a", good)
        assert nightly(night="2026-12-01", **kw)["regressions"] == []
        _answers(tmp_path / "answers.jsonl", "b", lambda i, j: good(i, j) and i % 3 == 0)
        with pytest.raises(NightlyRegression, match="gated/model/pass@1") as e:
            nightly(night="2026-12-02", **kw)
    assert e.value.summary["alerts"] == ["custom-webhook/assay-alerts"]
    (msg,) = hook["messages"]
    assert msg["text"].startswith("assay nightly 2026-12-02: 1 regression (gated)")
    assert "gated/model/pass@1: delta -" in msg["text"]
    # the weekly upkeep flow (deployments/prefect.yaml) on these nights: keeps the last one
    from assay.flows.upkeep import store_upkeep

    res = store_upkeep(runs=[str(tmp_path / "n")], keep_nights=1,
                       store_root=str(tmp_path / "store"), grace=0.0)
    assert (res["verify"]["corrupt"] == []
            and res["gc"]["kept_runs"] == [str(tmp_path / "n" / "gated" / "2026-12-02")])
    assert res["gc"]["removed_blobs"] > 0


SHARED = """
name: shared
sources:
  - name: model
    kind: file
    path: answers.jsonl
    fields: {prompt: q, completion: c, reference: ref, task_id: id}
    verifier: {kind: exact_match}
measure:
  pass_at: {k: 2}
execution: {shard_rows: 16, workers: 1}
"""


@pytest.mark.server
@pytest.mark.slow
def test_two_processes_one_spec_one_store(prefect_server: str, tmp_path: Path) -> None:
    with open(tmp_path / "answers.jsonl", "w") as f:
        for i in range(24):
            for j in range(4):
                f.write(json.dumps({"id": f"t{i}", "q": f"q{i}", "ref": str(i),
                                    "c": str(i if (i + j) % 3 else i + 1)}) + "\n")
    (tmp_path / "spec.yaml").write_text(SHARED)
    store = tmp_path / "store"
    procs = [subprocess.Popen([str(BIN / "assay"), "run", "spec.yaml", "--output", f"out{k}",
                               "--store", str(store)], cwd=tmp_path, env=_env(prefect_server),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in (1, 2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    a, b = tmp_path / "out1", tmp_path / "out2"
    files = sorted(str(p.relative_to(a)) for p in a.rglob("*")
                   if p.is_file() and p.name != "run.json")
    assert "report.json" in files and "rows/model.parquet" in files
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert main(["store", "verify", "--store", str(store)]) == 0
    # and they equal a run alone on a fresh store
    from assay.flows.study import run_spec

    run_spec(str(tmp_path / "spec.yaml"), str(tmp_path / "alone"), str(tmp_path / "store2"),
             embedded=False, publish=False)
    assert (tmp_path / "alone" / "report.json").read_bytes() == (a / "report.json").read_bytes()
