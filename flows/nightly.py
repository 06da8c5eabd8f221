"""The nightly flow: run each spec into <root>/<study>/<night>, gate it against a baseline night.

Deployed by deployments/prefect.yaml (cron, timezone, concurrency limit 1, process work pool).

Per spec, ``assay.nightly.gates`` compares tonight with the baseline night its ``nightly:``
section names (default: the previous night, gate pass@1) and writes ``nightly.md`` /
``nightly.json``; ``history.json``/``history.png`` are refreshed for the study and the night's
report embeds the last nights' plot. When a gated metric regressed, one alert goes to each
``nightly.notify`` target (a webhook URL or a Prefect notification block) and the flow run
ends ``Failed`` with a message naming study/source/metric, so Prefect automations fire on it.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed

from assay.errors import AssayError
from assay.layout import bind_own_packages
from assay.nightly.gates import evaluate_night, night_markdown, regression_line
from assay.nightly.history import write_history
from assay.nightly.notify import NotifyError, alert_text, post_webhook
from assay.nightly.spec import NightlySpec
from assay.report import write_run_dir
from assay.spec import load_spec
from assay.store import atomic_write

# A deployment loads this file by path: `flows` must be ours even where a user's flows/ is first
# on sys.path (the worker's working directory, a spec's folder).
bind_own_packages()
from flows.study import _slug, study  # noqa: E402


class NightlyRegression(AssayError):
    """A gated metric regressed tonight: the flow run's final state carries this."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


@task(name="gate-night", cache_policy=NO_CACHE, persist_result=False)
def gate_night(out: str, study_name: str, night: str, sources: list[str], gates: dict[str, Any],
               spec_definition: str) -> dict[str, Any]:
    return evaluate_night(out, study=study_name, night=night, sources=sources,
                          gates=NightlySpec.model_validate(gates), spec_definition=spec_definition)


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


def _tonight() -> str:
    from prefect.runtime import flow_run

    when = flow_run.scheduled_start_time or dt.datetime.now(dt.UTC)
    return when.date().isoformat()


def _dump(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


@flow(name="assay-nightly", persist_result=False, log_prints=True)
def nightly(specs: list[str], root: str = "runs/nightly", night: str | None = None,
            store_root: str | None = None) -> Any:
    """Run every spec in ``specs`` for ``night`` (default: the scheduled date), gate each
    against its baseline night; ends Failed (a NightlyRegression) when a gated metric regressed."""
    night = night or _tonight()
    summary: dict[str, Any] = {"night": night, "studies": {}, "regressions": [], "alerts": []}
    targets: dict[str, list[dict[str, Any]]] = {}
    for path in specs:
        spec = load_spec(path)
        gates = spec.nightly or NightlySpec()
        base = Path(root) / spec.name
        out = base / night
        info = study(spec=path, output=str(out), store_root=store_root)
        doc = gate_night(str(out), spec.name, night, [s.name for s in spec.sources],
                         gates.model_dump(mode="json"), info["spec_definition"])
        doc["spec_checksum"] = info["spec_checksum"]
        atomic_write(out / "nightly.json", _dump(doc))
        write_history(base, until=night, last=gates.history_nights, out_dir=out)
        write_history(base)
        md = night_markdown(doc, "history.png")
        lines = [regression_line(r) for r in doc["regressions"]]
        write_run_dir(out, {"nightly.md": md.encode(), "nightly.json": _dump(doc)}, {},
                      {**info, "nightly": lines})
        create_markdown_artifact(markdown=md, key=f"{_slug(spec.name)}-nightly",
                                 description=f"nightly {spec.name} {night}")
        summary["studies"][spec.name] = {
            "output": str(out), "baseline": {s["source"]: s["baseline"] for s in doc["sources"]},
            "regressions": [f"{r['source']}/{r['metric']}" for r in doc["regressions"]]}
        summary["regressions"] += [
            f"{spec.name}/{r['source']}/{r['metric']}" for r in doc["regressions"]
        ]
        for line in lines:
            print(f"REGRESSION {line}", file=sys.stderr)
        if doc["regressions"] and gates.notify:
            targets.setdefault(gates.notify, []).extend(doc["regressions"])
    failed_alerts = []
    for target, regs in targets.items():
        try:
            notify(target, regs)
            summary["alerts"].append(target)
        except NotifyError as e:  # the regression verdict stands; the message says both
            failed_alerts.append(str(e))
            print(str(e), file=sys.stderr)
    if summary["regressions"]:
        msg = f"regression on night {night}: {', '.join(summary['regressions'])}"
        if failed_alerts:
            msg += "; alert not delivered: " + "; ".join(failed_alerts)
        return Failed(message=msg, data=NightlyRegression(msg, summary))
    return summary
