"""The nightly flow: run each spec into runs/<name>/<date> and compare with the previous night.

Deployed by deployments/prefect.yaml (cron, timezone, concurrency limit 1, process work pool).

A regression is a source whose ``assay.compare`` verdict against the previous night's rows (same
spec checksum) is ``worse``; it is flagged in ``nightly.md``/``nightly.json`` and the flow's
return value, and published as a Prefect artifact.
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

from assay.report import compare_runs, nightly_markdown, previous_run, write_run_dir
from assay.spec import load_spec
from flows.study import _slug, study


@task(name="compare-nights", cache_policy=NO_CACHE, persist_result=False)
def compare_nights(previous: str, current: str) -> list[dict[str, Any]]:
    return compare_runs(previous, current)


def _tonight() -> str:
    from prefect.runtime import flow_run

    when = flow_run.scheduled_start_time or dt.datetime.now(dt.UTC)
    return when.date().isoformat()


@flow(name="assay-nightly", persist_result=False, log_prints=True)
def nightly(specs: list[str], root: str = "runs/nightly", night: str | None = None,
            store_root: str | None = None) -> dict[str, Any]:
    """Run every spec in ``specs`` for ``night`` (default: the scheduled date) and flag
    regressions against the previous night of the same spec."""
    night = night or _tonight()
    summary: dict[str, Any] = {"night": night, "studies": {}, "regressions": []}
    for path in specs:
        spec = load_spec(path)
        base = Path(root) / spec.name
        out = base / night
        info = study(spec=path, output=str(out), store_root=store_root)
        prev = previous_run(base, night, info["spec_definition"])
        comparisons = compare_nights(str(prev), str(out)) if prev else []
        md = nightly_markdown(spec.name, night, prev, comparisons)
        doc = {"night": night, "previous": prev.name if prev else None,
               "spec_checksum": info["spec_checksum"], "comparisons": comparisons,
               "regressions": [c["source"] for c in comparisons if c["regression"]]}
        write_run_dir(out, {"nightly.md": md.encode(),
                            "nightly.json": (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()},
                      {}, {**info, "nightly": doc["regressions"]})
        create_markdown_artifact(markdown=md, key=f"{_slug(spec.name)}-nightly",
                                 description=f"nightly {spec.name} {night}")
        summary["studies"][spec.name] = {"output": str(out), "previous": doc["previous"],
                                         "regressions": doc["regressions"]}
        summary["regressions"] += [f"{spec.name}/{s}" for s in doc["regressions"]]
        if doc["regressions"]:
            print(f"REGRESSION in {spec.name}: {doc['regressions']}", file=sys.stderr)
    return summary
