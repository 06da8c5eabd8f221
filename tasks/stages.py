"""Prefect tasks, one per declared stage (``assay.stages.STAGES``), made by one factory: a thin
shell around the stage function.

Each task returns a small StageResult pointer; the data and the cache live in the content store.

Prefect's own result cache is off (``NO_CACHE``, no persisted results): the stage function looks
its key up in our store (verified, atomic) and returns at once on a hit. Prefect's cache would add
a second, non-atomic copy keyed on run state, which is what breaks resume after a SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from prefect import Task, task
from prefect.cache_policies import NO_CACHE

from assay import libguard
from assay.stages import STAGES, RunContext, Stage, StageResult
from assay.stages.headstart import NOT_RUN, joined
from assay.stages.headstart import current as current_head
from assay.store import Store

#: A stage's task: ``(ctx, inputs)`` -> the stage function's result for ``fn(ctx, *inputs)``.
StageTask = Task[[RunContext, tuple[Any, ...]], StageResult]


@task(name="store-canary", cache_policy=NO_CACHE, persist_result=False, retries=0)
def store_canary(store: Store, token: str) -> str:
    """Write a small document to the study's store from wherever this task runs (a cluster
    worker) and return its key: the flow reads it back before any stage runs."""
    import os
    import socket

    return str(store.put_json({"assay-canary": token, "host": socket.gethostname(),
                               "pid": os.getpid()}))


def gpu_slot(device: str) -> AbstractContextManager[object]:
    """A strict ``gpu`` global concurrency slot when scoring on CUDA; a no-op on CPU. The limit
    is created with 1 slot if the server lacks it: raise it with ``prefect gcl update gpu
    --limit N`` on a machine with N GPUs. Strict: an undefined limit would otherwise be skipped
    with a warning and run unlimited."""
    if not str(device).startswith("cuda"):
        return contextlib.nullcontext()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.sync import concurrency
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name("gpu")
        except ObjectNotFound:
            with contextlib.suppress(Exception):  # another process may create it first
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name="gpu", limit=1))
    return concurrency("gpu", occupy=1, strict=True)


def log_generation(res: StageResult, logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """What a generate shard asked and what failed, on its task run: a table artifact (seen in
    the UI whatever the log settings) and a log line (an error line when the server's circuit
    breaker opened)."""
    from prefect.artifacts import create_table_artifact

    s = res.summary
    if res.cached:
        logger.info("%s: cached (%s rows, nothing asked)", res.label, s.get("rows"))
        return
    create_table_artifact(
        table=[{"shard": res.label, "rows": s.get("rows"), "failed": s.get("errors"),
                "requests": s.get("requests"),
                "retries": ", ".join(f"{k}: {v}" for k, v in (s.get("retries") or {}).items()),
                "gave_up": s.get("gave_up"), "not_sent": s.get("not_sent"),
                "breaker": s.get("breaker") or ""}],
        description=f"generate {res.label}: requests, retries by cause, failures")
    retries = ", ".join(f"{k}: {v}" for k, v in (s.get("retries") or {}).items()) or "none"
    logger.info("%s: %s rows, %s failed; %s HTTP requests, retries by cause %s, %s gave up, "
                "%s not sent", res.label, s.get("rows"), s.get("errors"), s.get("requests"),
                retries, s.get("gave_up"), s.get("not_sent"))
    if s.get("breaker"):
        logger.error("%s: circuit breaker open: %s", res.label, s["breaker"])


def _log_generation(res: StageResult) -> None:
    from prefect import get_run_logger

    log_generation(res, get_run_logger())


#: What a stage's task does with its result on the task run, beyond returning it, by the role
#: its declaration gives its results (``Stage.results_role``; optional).
AFTER: Mapping[str, Callable[[StageResult], None]] = {"completions": _log_generation}


@task(name="record-shards", cache_policy=NO_CACHE, persist_result=False, retries=0,
      task_run_name="{label}")
def record_shards(label: str, node_ids: list[str]) -> dict[str, int]:
    """A run of shard nodes of one stage and source that ``assay run``'s head start computes,
    recorded as one task run (``label``: ``grade[a shards 1-16 of 40]``): waits for each node's
    result there and fails with the first node's error. A task run per shard cost ~25 ms of
    CPU, more than a cheap shard's work (flows/study.py ``PrefectExecutor``)."""
    head = current_head()
    if head is None:
        raise RuntimeError(f"{label}: no head start in this process to record")
    counts = {"shards": len(node_ids), "computed": 0, "cached": 0, "not_run": 0, "rows": 0}
    first: BaseException | None = None
    for nid in node_ids:
        try:
            res = head.result(nid)  # bounded: the head start's end resolves every node
        except BaseException as e:  # noqa: BLE001 (the node's own future raises it too)
            first = first or e
            continue
        if res is NOT_RUN:
            counts["not_run"] += 1
            continue
        counts["cached" if res.cached else "computed"] += 1
        counts["rows"] += int(res.summary.get("rows") or 0)
    if first is not None:
        raise first
    return counts


def stage_body(stage: Stage) -> Callable[[RunContext, tuple[Any, ...]], StageResult]:
    """The task body of ``stage``: the spec's heavy imports first (a no-op where the flow did
    them; a cluster worker's first node does), the stage's device slot (the strict ``gpu``
    slot) when it puts a model on a device, and the head start's result of the node when
    ``assay run`` began it before Prefect was up (``assay.stages.headstart``)."""
    def body(ctx: RunContext, inputs: tuple[Any, ...]) -> StageResult:
        libguard.prepare_node(ctx.spec)
        if stage.device:
            ctx = replace(ctx, device_slot=gpu_slot)
        res = joined(stage.fn, ctx, *inputs)
        after = AFTER.get(stage.results_role or "")
        if after is not None:
            after(res)
        return res

    body.__name__ = body.__qualname__ = stage.name.replace("-", "_")
    body.__doc__ = stage.fn.__doc__
    return body


def _run_name(stage: Stage) -> Callable[..., str]:
    """``grade-<source>-<shard>``, ``score-reward-model-<model>``, ``measure``."""
    def name(parameters: dict[str, Any]) -> str:
        ctx, inputs = parameters["ctx"], parameters["inputs"]
        parts = [stage.name] + ([ctx.source] if ctx.source else [])
        if stage.scope == "shard":
            parts.append(str(inputs[-1].index))
        elif stage.each is not None:
            parts.append(str(inputs[0]))
        return "-".join(parts)
    return name


def stage_task(stage: Stage) -> StageTask:
    """The Prefect task of ``stage`` (no Prefect cache, no retries: the store is the cache)."""
    return task(stage_body(stage), name=stage.name, task_run_name=_run_name(stage),
                cache_policy=NO_CACHE, persist_result=False, retries=0)


#: stage name -> its task (what flows/study.py submits a node's call to); a stage declared
#: after this import gets its task from :func:`task_for`.
TASKS: dict[str, StageTask] = {name: stage_task(s) for name, s in STAGES.items()}


def task_for(name: str) -> StageTask:
    """The task of the stage declared as ``name``."""
    if name not in TASKS:
        TASKS[name] = stage_task(STAGES[name])
    return TASKS[name]
