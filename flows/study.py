"""The study flow: a spec's stages as Prefect tasks, then the run directory and artifacts.

``run_spec`` is the entry point ``assay run`` uses: embedded server, quiet settings, runner.

The chain itself lives in ``assay.stages.run_study``; this flow only decides where each stage
runs (a Prefect task here, locally or on Dask) so the same chain also runs without Prefect.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import flow

from assay import stages
from assay.layout import bind_own_packages
from assay.report import write_run_dir
from assay.spec import load_spec
from assay.store import Store
from flows.embedded import OrchestrationError, require_real_server

bind_own_packages()  # `tasks` is ours even where the working directory holds a user's tasks.py
from tasks.stages import TASKS  # noqa: E402


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "study"


def _publish_artifacts(name: str, files: dict[str, bytes]) -> None:
    """The report as a Markdown artifact and every estimate as a table artifact."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    slug = _slug(name)
    create_markdown_artifact(markdown=files["report.md"].decode(), key=f"{slug}-report",
                             description=f"assay study {name}: report.md")
    doc = json.loads(files["report.json"])
    table = []
    for section in ("measurements", "contamination", "reward_audits"):
        for m in doc[section]:
            for e in m.get("estimates", []):
                table.append({"measurement": m["label"], "estimate": e["name"], "value": e["value"],
                              "low": e["low"], "high": e["high"], "n": e["n"], "unit": e["unit"]})
    if table:
        create_table_artifact(table=table, key=f"{slug}-estimates",
                              description=f"assay study {name}: every estimate with interval and n")


def finish_run(store: Store, spec: Any, run: stages.StudyRun, out: Path,
               started: float | None = None) -> dict[str, Any]:
    """Write the run directory (report files, rows Parquet, run.json) and return run.json.
    run.json lists the stage keys the run used: ``assay store gc`` keeps what kept runs list."""
    files = stages.report_files(store, run.report)
    rows = {name: stages.concat_rows(store, parts) for name, parts in run.graded.items()}
    measured = next((r for r in run.results if r.stage == "measure"), None)
    if measured is not None and "selected" in measured.outputs and spec.measure.select:
        # the rows select(mode="rl") kept: the training export carries only what a trainer may
        # see; the same rows with their references and verdict details stay under .graded
        selected = stages.load_rows(store, measured, "selected")
        rows[f"selected-{spec.measure.select.source}"] = selected.training_table()
        rows[f"selected-{spec.measure.select.source}.graded"] = selected
    info = {"study": spec.name, "spec_checksum": run.spec_checksum,
            "spec_definition": spec.definition_checksum(),
            "cached": run.cached_stages, "computed": run.computed_stages,
            "store": str(store.root.resolve()), "files": sorted(files),
            "stage_keys": sorted({r.key for r in run.results}),
            "started": started if started is not None else time.time()}
    made = [r for r in run.results if r.stage == "generate"]
    if made:  # requests sent this run and their latency: wall-clock facts, so here, not in the report
        info["generation"] = {r.label: {**r.summary, "cached": r.cached} for r in made}
    write_run_dir(out, files, rows, info)
    return info


@flow(name="assay-study", persist_result=False, log_prints=False, validate_parameters=True)
def study(spec: str, output: str | None = None, store_root: str | None = None,
          publish: bool = True) -> dict[str, Any]:
    """Run the study in spec file ``spec``; write ``output`` (default from the spec)."""
    s = load_spec(spec)
    store = Store(store_root)
    local = s.execution.runner == "local"

    def call(fn: Any, *args: Any, **kwargs: Any) -> stages.StageResult:
        with stage_named(fn, args):
            return TASKS[fn](*args, **kwargs)

    def call_many(fn: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        if local:  # one shard at a time; each grade call already uses every core
            out = []
            for a, k in calls:
                with stage_named(fn, a):
                    out.append(TASKS[fn](*a, **k))
            return out
        futures = [TASKS[fn].submit(*a, **{**k, "workers": 1}) for a, k in calls]
        results = []
        for (a, _), f in zip(calls, futures):
            with stage_named(fn, a):
                results.append(f.result())
        return results

    started = time.time()
    out = s.output_dir(output)
    with store.in_use():  # a store gc waits until this run has written its run.json
        run = stages.run_study(s, store, call=call, call_many=call_many)
        info = finish_run(store, s, run, out, started)
    if publish:
        _publish_artifacts(s.name, stages.report_files(store, run.report))
    print(stages.summarize(run.results), file=sys.stderr, flush=True)
    print(f"report: {out / 'report.md'}", file=sys.stderr, flush=True)
    return {**info, "output": str(out)}


@contextlib.contextmanager
def stage_named(fn: Any, args: tuple[Any, ...]) -> Iterator[None]:
    """Label an exception escaping a stage with the stage (and its source or model), as
    ``exc.assay_stage``: ``assay run`` names it in its one ``error:`` line."""
    try:
        yield
    except BaseException as e:
        if getattr(e, "assay_stage", None) is None:
            what = args[2] if len(args) > 2 and isinstance(args[2], str) else None
            with contextlib.suppress(AttributeError, TypeError):
                e.assay_stage = TASKS[fn].name + (f" ({what})" if what else "")
        raise


@contextlib.contextmanager
def capture_logs(path: str | os.PathLike[str], *, echo: bool = False) -> Iterator[logging.Handler]:
    """While the block runs, send Prefect's (and every other library's) terminal log records to
    ``path`` instead; with ``echo`` the terminal keeps them too. Yields the file handler; the
    handlers are restored on exit.

    A failing run otherwise prints Prefect's task and flow failure records, each with a
    traceback, above the one line that says what to fix."""
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"))
    changed: list[tuple[logging.Logger, list[logging.Handler]]] = []
    for logger in [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                          if isinstance(lg, logging.Logger))]:
        terminal = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)
                    and not isinstance(h, logging.FileHandler)
                    and getattr(h, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)]
        if not terminal:
            continue
        removed = [] if echo else terminal
        for h in removed:
            logger.removeHandler(h)
        logger.addHandler(handler)
        changed.append((logger, removed))
    try:
        yield handler
    finally:
        for logger, removed in changed:
            logger.removeHandler(handler)
            for h in removed:
                logger.addHandler(h)
        handler.close()


def task_runner_for(spec: Any) -> Any:
    """The task runner a spec's execution settings ask for; Dask and Ray need a real server."""
    runner = spec.execution.runner
    if runner == "local":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=1)
    require_real_server(runner)
    if runner == "dask":
        from prefect_dask import DaskTaskRunner

        if spec.execution.address:
            return DaskTaskRunner(address=spec.execution.address)
        n = spec.execution.workers or os.cpu_count() or 1
        return DaskTaskRunner(cluster_kwargs={"n_workers": n, "threads_per_worker": 1,
                                              "processes": True, "dashboard_address": None})
    try:
        from prefect_ray import RayTaskRunner
    except ImportError:
        raise OrchestrationError("execution.runner: ray needs the prefect-ray package "
                                 "(pip install prefect-ray), which is not installed") from None
    return RayTaskRunner(address=spec.execution.address) if spec.execution.address else RayTaskRunner()


@contextlib.contextmanager
def _quiet_local() -> Iterator[None]:
    """Heartbeats off for embedded runs (each costs ~1 s to join at flow end)."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def prewarm() -> None:
    """Import what a flow run loads lazily (the task and flow engines, the API client, fastapi's
    encoder for parameters, artifacts): about a second of a cold process, done here while the
    embedded server is still starting instead of after it is up."""
    import fastapi.encoders  # noqa: F401  (prefect serializes flow parameters with it)
    import prefect.artifacts  # noqa: F401
    import prefect.client.orchestration  # noqa: F401
    import prefect.flow_engine  # noqa: F401
    import prefect.task_engine  # noqa: F401


def run_spec(spec_path: str, output: str | None = None, store_root: str | None = None, *,
             embedded: bool = True, publish: bool = True) -> dict[str, Any]:
    """Run a study flow with the runner its spec names (call under ``flows.embedded`` set-up)."""
    spec = load_spec(spec_path)
    runner = task_runner_for(spec)
    t0 = time.perf_counter()
    flow_ = study.with_options(task_runner=runner)
    ctx = _quiet_local() if embedded else contextlib.nullcontext()
    with ctx:
        result = flow_(spec=str(spec_path), output=output, store_root=store_root, publish=publish)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result
