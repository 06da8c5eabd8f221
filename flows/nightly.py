"""The nightly flow: run each spec into <root>/<study>/<night>, gate it against a baseline night.

Deployed by deployments/prefect.yaml (cron, timezone, concurrency limit 1, process work pool).

Per spec, ``assay.nightly.gates`` compares tonight with the baseline night its ``nightly:``
section names (default: the previous night, gate pass@1) and writes ``nightly.md`` /
``nightly.json``; ``history.json``/``history.png`` are refreshed for the study and the night's
report embeds the last nights' plot. When a gated metric regressed, one alert goes to each
``nightly.notify`` target (a webhook URL or a Prefect notification block) and the flow run
ends ``Failed`` with a message naming study/source/metric, so Prefect automations fire on it.
An alert goes out once per night and verdict: a rerun of the night that reaches the same
verdict does not send it again (``<root>/.alerts/<night>.json``); one that failed is retried.

The checkpoint under test comes from the spec or from the parameters ``model``, ``revision``
and ``overrides`` (``PATH=VALUE``, as ``assay nightly --set``), so a scheduler passes tonight's
checkpoint without editing the spec. History and baseline follow the study definition, not the
model; completions of a model whose identity is not proven are asked afresh each night.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed

from assay import stop
from assay.errors import AssayError, SpecError
from assay.flows.study import (
    _slug,
    generation_line,
    study,
    task_runner_for,
    write_page,
)
from assay.nightly.gates import (
    evaluate_night,
    new_history_text,
    night_markdown,
    regression_line,
)
from assay.nightly.history import write_history
from assay.nightly.notify import (
    NotifyError,
    alert_key,
    alert_text,
    already_sent,
    post_json,
    post_webhook,
    record_sent,
    stopped_alert,
)
from assay.nightly.partial import partial_text
from assay.nightly.spec import NightlySpec, night_date, specs_timezone
from assay.report import write_run_dir
from assay.spec import load_spec
from assay.store import atomic_write
from assay.watchdog import RunStopped


class NightlyRegression(AssayError):
    """A gated metric regressed tonight, or the night is partial (failed samples, or a source
    nothing judged): the flow run's final state carries this, with the night's summary."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


class _VerdictNotCrash(logging.Filter):
    """A night that failed its gate (a regression, a partial night) is a verdict, not a crash,
    and one its deadline or stall detector stopped is the stop working. Run from a deployment,
    Prefect logs each as "Encountered exception during execution" (per flow) and "Engine
    execution exited with unexpected exception" with a traceback of its own frames; this keeps
    each such record to the one line the verdict or the stop is."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (NightlyRegression, RunStopped)):
            record.msg, record.args = "the flow run ends Failed: %s", (str(exc),)
            record.exc_info, record.exc_text = None, None
        return True


for _name in ("prefect.flow_runs", "prefect.engine"):
    if not any(isinstance(f, _VerdictNotCrash) for f in logging.getLogger(_name).filters):
        logging.getLogger(_name).addFilter(_VerdictNotCrash())


@task(name="gate-night", cache_policy=NO_CACHE, persist_result=False)
def gate_night(out: str, study_name: str, night: str, sources: list[str], gates: dict[str, Any],
               spec_definition: str, under_test: dict[str, Any] | None = None,
               definition: Any = None) -> dict[str, Any]:
    return evaluate_night(out, study=study_name, night=night, sources=sources,
                          gates=NightlySpec.model_validate(gates), spec_definition=spec_definition,
                          under_test=under_test, definition=definition)


@task(name="notify-regressions", cache_policy=NO_CACHE, persist_result=False, retries=0)
def notify(target: str, regressions: list[dict[str, Any]]) -> None:
    """One alert with every regression of the night that names ``target``."""
    if target.startswith(("http://", "https://")):
        post_webhook(target, regressions)
        return
    from prefect.blocks.core import Block

    subject, body = alert_text(regressions)
    try:
        block = Block.load(target)
    except ValueError as e:
        raise NotifyError(f"nightly.notify: no Prefect block {target!r} on this server ({e}); "
                          "create it (UI: Blocks, or `Block.save`) or give a webhook URL") from None
    if not hasattr(block, "notify"):
        raise NotifyError(f"nightly.notify: block {target!r} is a {type(block).__name__}, not a "
                          "notification block")
    block.notify(body=body, subject=subject)


def _outcome(e: BaseException) -> tuple[str, str]:
    """(message, what happened) of a night's study run that ended with ``e``."""
    if isinstance(e, RunStopped):
        return str(e), "run stopped"
    if isinstance(e, KeyboardInterrupt) or type(e).__name__ == "TerminationSignal":
        name = "terminated (SIGTERM)" if "Termin" in type(e).__name__ else "interrupted"
        why = stop.stopped()
        return (name if why in (None, name) else f"{name}: {why}"), "run stopped"
    return f"{type(e).__name__}: {e}", "run failed"


def notify_stopped(target: str, study_name: str, night: str, message: str,
                   what: str = "run stopped") -> None:
    """Alert ``target`` that tonight's run of a study was stopped or failed (a failed
    delivery is printed: the stop is what the flow run reports)."""
    subject, body, payload = stopped_alert(study_name, night, message, what)
    try:
        if target.startswith(("http://", "https://")):
            post_json(target, payload, what="the stopped-run alert")
            return
        from prefect.blocks.core import Block

        Block.load(target).notify(body=body, subject=subject)
    except Exception as e:  # noqa: BLE001 - the alert must not mask the stop
        print(f"nightly.notify: the stopped-run alert to {target} failed: {e}", file=sys.stderr)


def _schedule_timezone() -> str | None:
    """The timezone of this flow run's deployment schedule, if it runs from one."""
    from prefect.runtime import deployment

    if not deployment.id:
        return None
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            dep = client.read_deployment(deployment.id)
    except Exception:  # noqa: BLE001 - then the machine's local time names the night
        return None
    for s in dep.schedules or []:
        tz = getattr(s.schedule, "timezone", None)
        if tz:
            return str(tz)
    return None


def _tonight(specs: list[Any]) -> str:
    """The scheduled start's date in the specs' ``nightly.timezone``, else the schedule's
    timezone, else local time (a 05:50 Tokyo run is that morning's night, not UTC's
    yesterday)."""
    from prefect.runtime import flow_run

    when = flow_run.scheduled_start_time or dt.datetime.now(dt.UTC)
    tz = specs_timezone([s.nightly for s in specs]) or _schedule_timezone()
    return night_date(when, tz)


def _dump(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


def all_overrides(model: str | None, revision: str | None,
                  overrides: list[str] | None) -> list[str]:
    """``model``/``revision`` as overrides, then ``overrides`` (later items win)."""
    from assay.overrides import checkpoint_overrides

    return [*checkpoint_overrides(model, revision), *(overrides or [])]


@flow(name="assay-nightly", persist_result=False, log_prints=True)
def nightly(specs: list[str], root: str = "runs/nightly", night: str | None = None,
            store_root: str | None = None, model: str | None = None, revision: str | None = None,
            overrides: list[str] | None = None) -> Any:
    """Run every spec in ``specs`` for ``night`` (default: the scheduled date), gate each
    against its baseline night; ends Failed (a NightlyRegression) when a gated metric regressed.
    ``model``/``revision``: tonight's checkpoint for every generating source (served name or
    model directory); ``overrides``: ``PATH=VALUE`` spec overrides
    (``generate.model.base_url=...``)."""
    from prefect import get_run_logger

    from assay.outstreams import guard_output

    # run by a worker, stdout is a pipe to it: a killed or restarted worker must not end the
    # night through a log line (rich turns the broken pipe into SystemExit)
    guard_output()
    from assay.flows.crashed import reap_crashed, tag_this_run

    # tagged with this process, so a later start can tell if it was killed; and the runs an
    # earlier killed night left Running (its subflows too) are marked Crashed and alerted
    tag_this_run()
    reap_crashed()
    log = get_run_logger()
    sets = all_overrides(model, revision, overrides)
    if night is not None:
        try:
            dt.date.fromisoformat(night)
        except ValueError:
            raise SpecError(f"night {night!r}: give a date YYYY-MM-DD") from None
    night = night or _tonight([load_spec(p, sets) for p in specs])
    summary: dict[str, Any] = {"night": night, "studies": {}, "regressions": [], "alerts": [],
                               "alerts_already_sent": [], "alerts_failed": [], "overrides": sets,
                               "partial": []}
    targets: dict[str, list[dict[str, Any]]] = {}
    for path in specs:
        spec = load_spec(path, sets)
        gates = spec.nightly or NightlySpec()
        base = Path(root) / spec.name
        out = base / night
        try:
            # the page is written once nightly.json is there, so it shows the gate's verdict;
            # the study runs on the runner its spec names, as `assay run` does
            info = study.with_options(task_runner=task_runner_for(spec))(
                spec=path, output=str(out), store_root=store_root, view=False,
                overrides=sets, night=night)
        except BaseException as e:  # stopped, terminated or failed: alerted now, then Failed
            if gates.notify:
                notify_stopped(gates.notify, spec.name, night, *_outcome(e))
            raise
        doc = gate_night(str(out), spec.name, night, [s.name for s in spec.sources],
                         gates.model_dump(mode="json"), info["spec_definition"],
                         info.get("under_test"), info.get("study_definition"))
        doc["spec_checksum"] = info["spec_checksum"]
        gen = generation_line(info) if "sent" in info else None
        doc["generation"] = gen.removeprefix("generation: ") if gen else None
        atomic_write(out / "nightly.json", _dump(doc))
        write_history(base, until=night, last=gates.history_nights, out_dir=out)
        write_history(base)
        md = night_markdown(doc, "history.png")
        lines = [regression_line(r) for r in doc["regressions"]]
        write_run_dir(out, {"nightly.md": md.encode(), "nightly.json": _dump(doc)}, {},
                      {**info, "nightly": lines})
        if spec.execution.view:
            write_page(out, spec.name)
        create_markdown_artifact(markdown=md, key=f"{_slug(spec.name)}-nightly",
                                 description=f"nightly {spec.name} {night}")
        summary["studies"][spec.name] = {
            "output": str(out), "baseline": {s["source"]: s["baseline"] for s in doc["sources"]},
            "regressions": [f"{r['source']}/{r['metric']}" for r in doc["regressions"]],
            "lines": lines, "generation": gen, "spec_definition": info["spec_definition"],
            "new_history": new_history_text(doc) if doc.get("new_history") else None,
            "model_changes": {s["source"]: s["model_changes"] for s in doc["sources"]
                              if s.get("model_changes")},
            "partial": [partial_text(s) for s in doc["sources"] if s.get("partial")]}
        summary["partial"] += [f"{spec.name}/{src}" for src in doc["partial"]]
        for line in summary["studies"][spec.name]["partial"]:
            log.warning("PARTIAL %s/%s", spec.name, line)
        if doc["partial"] and gates.notify:
            _alert_partial(gates.notify, root, spec.name, night,
                           summary["studies"][spec.name]["partial"], summary)
        summary["regressions"] += [
            f"{spec.name}/{r['source']}/{r['metric']}" for r in doc["regressions"]
        ]
        for line in lines:
            log.warning("REGRESSION %s", line)
        if doc.get("new_history"):
            log.warning("%s: %s", spec.name, new_history_text(doc))
        if doc["regressions"] and gates.notify:
            targets.setdefault(gates.notify, []).extend(doc["regressions"])
    for target, regs in targets.items():
        key = alert_key(target, regs)
        if already_sent(root, night, key):  # a rerun of the night with the same verdict
            summary["alerts_already_sent"].append(target)
            log.info("alert to %s already sent for this night's verdict; not sent again", target)
            continue
        try:
            notify(target, regs)
        except NotifyError as e:  # the regression verdict stands; the message says both
            summary["alerts_failed"].append(str(e))
            log.error("%s", e)
            continue
        record_sent(root, night, key, target)
        summary["alerts"].append(target)
    if summary["regressions"] or summary["partial"]:
        parts = []
        if summary["regressions"]:
            parts.append(f"gated metric regressed: {', '.join(summary['regressions'])}")
        if summary["partial"]:
            parts.append("partial night (failed samples or nothing judged): "
                         + ", ".join(summary["partial"]))
        msg = f"night {night}: " + "; ".join(parts)
        if summary["alerts_failed"]:
            msg += "; alert not delivered: " + "; ".join(summary["alerts_failed"])
        return Failed(message=msg, data=NightlyRegression(msg, summary))
    return summary


def _alert_partial(target: str, root: str, study_name: str, night: str, lines: list[str],
                   summary: dict[str, Any]) -> None:
    """One alert per night that a study's night is partial (not sent again by a rerun that
    finds the same sources partial)."""
    from assay.hashing import content_hash

    key = content_hash([target, "partial", study_name, night,
                        sorted(line.split(":")[0] for line in lines)], "alert")
    if already_sent(root, night, key):
        summary["alerts_already_sent"].append(target)
        return
    subject, body, payload = stopped_alert(study_name, night, "; ".join(lines), "partial night")
    try:
        if target.startswith(("http://", "https://")):
            post_json(target, payload, what="the partial-night alert")
        else:
            from prefect.blocks.core import Block

            Block.load(target).notify(body=body, subject=subject)
    except Exception as e:  # noqa: BLE001 - the partial verdict stands; the message says both
        summary["alerts_failed"].append(f"{target}: {e}")
        return
    record_sent(root, night, key, target)
    summary["alerts"].append(target)
