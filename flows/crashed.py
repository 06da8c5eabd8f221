"""Flow runs of a killed run do not stay Running: every assay flow run carries its machine's and
process's tags, and the next start marks Crashed those whose process is gone (subflows too).

Why here: a SIGKILLed process (OOM, a killed worker, ``kill -9``) sends Prefect no final state,
and nothing else ever will. A night found this way is also alerted (the spec's
``nightly.notify``), saying what happened; its rerun resumes from the cached stages.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from assay.reaper import HOST_TAG, PROC_TAG, host_tag, process_gone, process_tag

__all__ = ["ASSAY_FLOWS", "reap_crashed", "tag_this_run"]

#: The flows whose runs are tagged and reaped.
ASSAY_FLOWS = ("assay-study", "assay-nightly")

_log = logging.getLogger("assay.flows.crashed")


def tag_this_run() -> None:
    """Tag the current flow run with this machine and process (one API call; a no-op outside a
    flow run or when already tagged): what :func:`reap_crashed` later reads. Never raises."""
    try:
        _tag()
    except Exception as e:  # noqa: BLE001 - a tag is bookkeeping, not the study
        _log.warning("flow run not tagged with its process: %s: %s", type(e).__name__, e)


def _tag() -> None:
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None:
        return
    mine = [host_tag(), process_tag()]
    kept = [t for t in run.tags if not t.startswith((HOST_TAG, PROC_TAG))]
    if sorted(run.tags) == sorted([*kept, *mine]):
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run(run.id, tags=[*kept, *mine])


def reap_crashed(now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Mark Crashed every Running or Pending assay flow run of this machine whose process is
    gone, a night's subflows included, and alert each such night's ``nightly.notify``.
    Returns what was marked (id, flow, name, message); never raises (a failure is logged)."""
    try:
        return _reap(now or dt.datetime.now(dt.UTC))
    except Exception as e:  # noqa: BLE001 - tidying old runs must not stop tonight's
        _log.warning("could not check for flow runs left Running by killed runs: %s: %s",
                     type(e).__name__, e)
        return []


def _reap(now: dt.datetime) -> list[dict[str, Any]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    host = host_tag()
    marked: list[dict[str, Any]] = []
    with get_client(sync_client=True) as client:
        flows = {f.id: f.name for f in client.read_flows(
            flow_filter=FlowFilter(name=FlowFilterName(any_=list(ASSAY_FLOWS))))}
        if not flows:
            return []
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=list(ASSAY_FLOWS))),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(
                    any_=[StateType.RUNNING, StateType.PENDING])),
                tags=FlowRunFilterTags(all_=[host])))
        for run in runs:
            proc = next((t for t in run.tags if t.startswith(PROC_TAG)), None)
            if proc is None or not process_gone(proc):
                continue
            pid = proc.removeprefix(PROC_TAG).split("@")[0]
            message = (f"crashed: the process that ran it (pid {pid} on "
                       f"{host.removeprefix(HOST_TAG).split('/')[0]}) is gone without a final "
                       "state (killed: SIGKILL, out of memory, or its worker stopped); found "
                       f"at {now:%Y-%m-%d %H:%M:%S} UTC by the next start; a rerun resumes "
                       "from the cached stages")
            client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            flow = flows.get(run.flow_id, "")
            marked.append({"id": str(run.id), "flow": flow, "name": run.name,
                           "message": message})
            _log.warning("flow run %s (%s) left %s by a killed process: marked Crashed",
                         run.name, flow, run.state_type.value if run.state_type else "?")
            if flow == "assay-nightly":
                try:
                    _alert(run, message)
                except Exception as e:  # noqa: BLE001 - the Crashed state stands without it
                    _log.warning("the crashed-night alert was not sent: %s: %s",
                                 type(e).__name__, e)
    return marked


def _alert(run: Any, message: str) -> None:
    """Tell each study's ``nightly.notify`` of the dead night (a spec that no longer loads is
    skipped: the Crashed state says it all the same)."""
    from assay.flows.nightly import notify_stopped
    from assay.spec import load_spec

    params = run.parameters or {}
    night = params.get("night") or (run.expected_start_time.date().isoformat()
                                    if run.expected_start_time else "?")
    for path in params.get("specs") or []:
        try:
            spec = load_spec(path, params.get("overrides") or ())
        except Exception:  # noqa: BLE001
            continue
        if spec.nightly is not None and spec.nightly.notify:
            notify_stopped(spec.nightly.notify, spec.name, night, message, "run crashed")
