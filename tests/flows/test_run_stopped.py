"""A stopped run on a real Prefect server (issue 24): the study flow run ends Failed with the
stop's message, `nightly` alerts the spec's webhook as for a regression, and progress reaches
the UI as progress artifacts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.webhook_receiver import webhook_receiver  # noqa: E402

PLUGIN = '''
import threading

def stuck(prompt, completion):
    threading.Event().wait()  # a grader that never answers
    return 1.0
'''

SPEC = """name: stuck
sources:
  - name: m
    kind: file
    path: d.jsonl
    verifier: {{kind: function, function: "stuckplug:stuck"}}
execution: {{stall_after: 1s}}
{nightly}"""


def _folder(tmp_path: Path, nightly: str = "") -> Path:
    (tmp_path / "stuckplug.py").write_text(PLUGIN)
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": "x"}) + "\n" for i in range(3)))
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(nightly=nightly))
    sys.path.insert(0, str(tmp_path))
    return spec


def test_stalled_study_flow_run_is_failed(prefect_server: str, tmp_path: Path) -> None:
    from assay.flows.study import study
    from assay.watchdog import RunStopped

    spec = _folder(tmp_path)
    state = study(spec=str(spec), output=str(tmp_path / "out"), store_root=str(tmp_path / "st"),
                  publish=False, return_state=True)
    assert state.is_failed(), state
    err = state.result(raise_on_failure=False)
    assert isinstance(err, RunStopped) and err.reason == "stall"
    assert "in flight: [grade] m shard 1/1: 0/3 done" in str(err)
    assert "stopped by execution.stall_after (1s)" in (state.message or "")


def test_nightly_alerts_a_stopped_run(prefect_server: str, tmp_path: Path) -> None:
    from assay.flows.nightly import nightly
    from assay.watchdog import RunStopped

    with webhook_receiver() as hook:
        spec = _folder(tmp_path, nightly=f"nightly: {{notify: '{hook['url']}'}}\n")
        state = nightly(specs=[str(spec)], root=str(tmp_path / "n"), night="2026-12-01",
                        store_root=str(tmp_path / "st"), return_state=True)
    assert state.is_failed()
    assert isinstance(state.result(raise_on_failure=False), RunStopped)
    assert len(hook["messages"]) == 1, hook
    msg = hook["messages"][0]
    assert msg["subject"] == "assay nightly 2026-12-01: run stopped (stuck)"
    assert msg["stopped"]["study"] == "stuck"
    assert "[grade] m shard 1/1: 0/3 done" in msg["stopped"]["message"]


def test_progress_artifacts_follow_a_unit(prefect_server: str) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.runtime import flow_run

    from assay import progress
    from assay.flows.progress_ui import progress_artifacts

    @flow
    def work() -> str:
        with progress_artifacts(every_s=3600) as pub:  # ticked here, not by its clock
            pub.every_s = 0.0
            with progress.track("grade", "m shard 1/1", total=4) as unit:
                unit.advance(1)
                pub.tick()
                unit.advance(3, errors=1)
                pub.tick()
        return str(flow_run.id)

    run_id = work()
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    prog = [a for a in arts if a.type == "progress"]
    assert len(prog) == 1, arts
    assert prog[0].key == "progress-grade-m-shard-1-1"
    assert prog[0].data == pytest.approx(100.0)
    assert prog[0].description.startswith("[grade] m shard 1/1: 4/4 (100%), ")
    assert ", errors 1, " in prog[0].description
