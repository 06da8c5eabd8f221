"""Prefect tasks, one per study stage: thin shells around the core functions in assay.stages.

Each task returns a small StageResult pointer; the data and the cache live in the content store.

Prefect's own result cache is off (``NO_CACHE``, no persisted results): the stage function looks
its key up in our store (verified, atomic) and returns at once on a hit. Prefect's cache would add
a second, non-atomic copy keyed on run state, which is what breaks resume after a SIGKILL.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from assay import libguard, stages
from assay.stages.headstart import joined


def _task(fn: Callable[..., Any], name: str, run_name: str) -> Any:
    @functools.wraps(fn)
    def node(store: Any, spec: Any, *args: Any, **kwargs: Any) -> Any:
        # the spec's heavy imports, complete before this node's body runs: a no-op where the
        # flow did it (threads of this process), the first node's job on a cluster worker
        # whose other threads run nodes too (assay.libguard)
        libguard.prepare_node(spec)
        return fn(store, spec, *args, **kwargs)

    return task(node, name=name, task_run_name=run_name, cache_policy=NO_CACHE,
                persist_result=False, retries=0)


def _stage(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A stage function as a task body: the head start's result of the node being recorded
    when ``assay run`` began it before Prefect was up (``assay.stages.headstart``), else
    computed here."""
    @functools.wraps(fn)  # the task's parameters (and run names) are the stage function's
    def body(*args: Any, **kwargs: Any) -> Any:
        return joined(fn, *args, **kwargs)
    return body


@task(name="store-canary", cache_policy=NO_CACHE, persist_result=False, retries=0)
def store_canary(store: Any, token: str) -> str:
    """Write a small document to the study's store from wherever this task runs (a cluster
    worker) and return its key: the flow reads it back before any stage runs."""
    import os
    import socket

    return str(store.put_json({"assay-canary": token, "host": socket.gethostname(),
                               "pid": os.getpid()}))


build_rows = _task(_stage(stages.run_build_rows), "build-rows", "build-rows-{source_name}")
filter_rows = _task(_stage(stages.run_filter_rows), "filter-rows", "filter-rows-{source_name}")
grade_shard = _task(_stage(stages.run_grade_shard), "grade", "grade-{source_name}-{shard}")
decontaminate = _task(_stage(stages.run_decontaminate), "decontaminate", "decontaminate")


def gpu_slot(device: str) -> Any:
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


def _score_reward_model(store: Any, spec: Any, model_name: str, *, progress: Any = None) -> Any:
    """run_reward_audit holding a ``gpu`` slot while it scores on CUDA."""
    return joined(stages.run_reward_audit, store, spec, model_name, progress=progress,
                  device_slot=gpu_slot)


def _score_rows(store: Any, spec: Any, source_name: str, graded: Any, shard: int, n_shards: int, *,
                progress: Any = None) -> Any:
    """run_score_rows holding a ``gpu`` slot while a model scores on CUDA."""
    return joined(stages.run_score_rows, store, spec, source_name, graded, shard, n_shards,
                  progress=progress, device_slot=gpu_slot)


score_rows = _task(_score_rows, "score-rows", "score-rows-{source_name}-{shard}")


def _generate_shard(store: Any, spec: Any, source_name: str, filtered: Any, bounds: Any, shard: int,
                    n_shards: int, *, workers: Any = None, progress: Any = None) -> Any:
    """run_generate_shard holding a ``gpu`` slot while a local model generates on CUDA; the
    shard's requests, retries and failures go to the task run's log."""
    from prefect import get_run_logger

    res = joined(stages.run_generate_shard, store, spec, source_name, filtered, bounds, shard,
                 n_shards, workers=workers, progress=progress, device_slot=gpu_slot)
    log_generation(res, get_run_logger())
    return res


def log_generation(res: Any, logger: Any) -> None:
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


generate_shard = _task(_generate_shard, "generate", "generate-{source_name}-{shard}")


def _score_choices(store: Any, spec: Any, source_name: str, filtered: Any, bounds: Any, shard: int,
                   n_shards: int, *, workers: Any = None, progress: Any = None) -> Any:
    """run_score_choices holding a ``gpu`` slot while a local model scores on CUDA."""
    return joined(stages.run_score_choices, store, spec, source_name, filtered, bounds, shard,
                  n_shards, workers=workers, progress=progress, device_slot=gpu_slot)


score_choices = _task(_score_choices, "score-choices", "score-choices-{source_name}-{shard}")


def _score_documents(store: Any, spec: Any, source_name: str, filtered: Any, bounds: Any,
                     shard: int, n_shards: int, *, workers: Any = None,
                     progress: Any = None) -> Any:
    """run_score_documents holding a ``gpu`` slot while a local model scores on CUDA."""
    return joined(stages.run_score_documents, store, spec, source_name, filtered, bounds, shard,
                  n_shards, workers=workers, progress=progress, device_slot=gpu_slot)


score_documents = _task(_score_documents, "score-documents",
                        "score-documents-{source_name}-{shard}")
score_reward_model = _task(_score_reward_model, "score-reward-model",
                           "score-reward-model-{model_name}")
measure = _task(_stage(stages.run_measure), "measure", "measure")
report = _task(_stage(stages.run_report), "report", "report")

#: core stage function -> its task (what flows/study.py dispatches on).
TASKS: dict[Callable[..., Any], Any] = {
    stages.run_build_rows: build_rows,
    stages.run_filter_rows: filter_rows,
    stages.run_generate_shard: generate_shard,
    stages.run_score_choices: score_choices,
    stages.run_score_documents: score_documents,
    stages.run_grade_shard: grade_shard,
    stages.run_decontaminate: decontaminate,
    stages.run_score_rows: score_rows,
    stages.run_reward_audit: score_reward_model,
    stages.run_measure: measure,
    stages.run_report: report,
}
