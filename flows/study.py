"""The study flow: a spec's stages as Prefect tasks, then the run directory and artifacts.

``run_spec`` is the entry point ``assay run`` uses: embedded server, quiet settings, runner.

The graph is derived from the stage declarations (``assay.stages.wiring``, plain Python, runnable
without Prefect) and so are the tasks (``tasks/stages.py``); this flow only decides where each
node runs: its stage's task as a Prefect task future, on threads or on Dask workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.futures import PrefectFuture
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from assay import stages, stop
from assay.flows.embedded import OrchestrationError, require_real_server
from assay.flows.progress_ui import progress_artifacts
from assay.outstreams import guard_output
from assay.spec import load_spec
from assay.stages import headstart
from assay.stages.cache import StageResult, shards_label
from assay.stages.finish import finish_run
from assay.stages.plan import LOCAL_CAPACITY
from assay.store import Store
from assay.store_url import secret_bearing, store_from
from assay.tasks.stages import store_canary, task_for
from assay.watchdog import guard


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


def write_page(out: Path, name: str | None = None) -> Path | None:
    """Write ``out/view/`` (the sample viewer) and print its path; a failure to write it is
    reported on stderr and never fails the run whose results are already written. With the
    study's ``name``, a link to it is published as the Prefect artifact ``<name>-view``."""
    from assay.view import write_view

    try:
        page = write_view(out)
    except Exception as e:  # noqa: BLE001 (the results stand; the page is a convenience)
        print(f"warning: the page {out / 'view'} was not written: {type(e).__name__}: {e} "
              f"(retry with `assay view {out}`)", file=sys.stderr, flush=True)
        return None
    print(f"view: {page}", file=sys.stderr, flush=True)
    if name is not None:
        from prefect.artifacts import create_link_artifact

        create_link_artifact(link=page.resolve().as_uri(), link_text="samples, verdicts, changes",
                             key=f"{_slug(name)}-view",
                             description="assay view: the run's tasks, samples and verdicts")
    return page


def max_edges() -> int:
    """The most upstream task runs one task run records (its ``wait_for`` and its linked
    inputs): each is ~75 bytes of each state event, twice, and Prefect refuses an event over
    its maximum size (``PREFECT_SERVER_EVENTS_MAXIMUM_SIZE_BYTES``, 1.5 MB by default); a
    quarter of it is left to the edges."""
    from prefect.settings import get_current_settings

    return max(1, get_current_settings().server.events.maximum_size_bytes // 4 // 150)


#: Shard nodes of a stage that asks no model, computed by ``assay run``'s head start, are
#: recorded this many to a Prefect task run (see :meth:`PrefectExecutor._recorded`).
RECORD_SHARDS = 16


class PrefectExecutor:
    """Runs the study graph's nodes as Prefect task runs on the flow's task runner (threads
    locally, workers on Dask): each node is submitted once its inputs exist, with
    ``wait_for`` its inputs' futures, so the flow run records the graph's edges. With a
    ``head`` start, each task waits for (records) the head start's run of its node.

    A shard node the head start served from the store (a cache hit: nothing computed,
    nothing asked) gets no task run: run.json's ``cached`` lists it, and the flow's log (at
    ``log_level: info``) counts such nodes by stage (:meth:`close`). Why: a task run costs
    ~25-30 ms of client and server time, more than a cached shard's lookup, so a rerun with
    small shards was mostly Prefect bookkeeping (benchmarks/shard_overhead.py). The task runs
    left are the nodes that worked (a node the head start has not finished yet gets its task
    run, which waits for it), except the shards of a stage that asks no model (grading):
    :data:`RECORD_SHARDS` of them share one (:meth:`_recorded`). Without a head start every
    node has its task run: a stage
    function is never called just to probe the cache (a probe has side effects: grading
    ahead's verdicts are handed over once)."""

    def __init__(self, distributed: bool, head: headstart.HeadStart | None = None) -> None:
        self.distributed = distributed
        self.head = head
        #: stage -> shard nodes served from the store without a task run
        self.hits: dict[str, int] = {}
        self._lock = threading.Lock()
        #: (stage, source, shards, batch) -> the task run recording that batch of shard nodes
        self._records: dict[tuple[str, str, int, int], Any] = {}
        #: a recorded node's future -> its batch's key (a study node's edge goes to the batch)
        self._batch_of: dict[Future[Any], tuple[str, str, int, int]] = {}

    def submit(self, node: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Any) -> Any:
        if node.scope == "shard" and not self.distributed and self.head is not None:
            res = self._cached(node)
            if res is not None:
                with self._lock:
                    self.hits[node.stage] = self.hits.get(node.stage, 0) + 1
                served: Future[Any] = Future()
                served.set_result(res)
                done()
                return served
            if not node.asks_model and not self.head.stopped.is_set():
                o = self.head.outcome(node.id)
                if not (o.done() and o.exception() is None and o.result() is headstart.NOT_RUN):
                    return self._recorded(node, o, args, kwargs, done)
        return self._task(node, args, kwargs, waits, done)

    def _recorded(self, node: Any, outcome: Future[headstart.Outcome], args: tuple[Any, ...],
                  kwargs: dict[str, Any], done: Any) -> Future[Any]:
        """A shard node of a stage that asks no model, which the head start computes: its
        result is the head start's, and it is recorded with the next shards of its stage and
        source, :data:`RECORD_SHARDS` to a task run (``record-shards``), not one each: a task
        run cost ~25 ms of CPU, more than a grading shard's work (benchmarks/README.md). A node
        the head start ended without running (it stopped or failed meanwhile) is computed
        here, on a thread of its own (the graph runner counts it in flight until it ends)."""
        from assay.stages.declare import Shard
        from assay.tasks.stages import record_shards

        assert self.head is not None
        ctx, shard = args[0], args[-1]
        assert isinstance(shard, Shard)  # a shard stage's call: fn(ctx, rows, shard)
        b = shard.index // RECORD_SHARDS
        lo, hi = b * RECORD_SHARDS, min(shard.count, (b + 1) * RECORD_SHARDS)
        batch = (node.stage, ctx.source, shard.count, b)
        with self._lock:
            first = batch not in self._records
            if first:
                self._records[batch] = None
        if first:
            ids = [Shard(i, shard.count, (0, 0)).node_id(node.stage, ctx.source)
                   for i in range(lo, hi)]
            label = shards_label(node.stage, ctx.source, f"{lo + 1}-{hi}", shard.count)
            fut_record = record_shards.submit(label, ids)
            with self._lock:
                self._records[batch] = fut_record
        out: Future[Any] = Future()

        def settle(o: Future[headstart.Outcome]) -> None:
            exc = o.exception()
            if exc is not None:
                out.set_exception(exc)
            elif o.result() is headstart.NOT_RUN:
                threading.Thread(target=compute, name=f"assay-{node.id}", daemon=True).start()
                return
            else:
                out.set_result(o.result())
            done()

        def compute() -> None:
            try:
                out.set_result(node.fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 (the graph runner raises it)
                out.set_exception(e)
            done()

        with self._lock:
            self._batch_of[out] = batch
        outcome.add_done_callback(settle)
        return out

    def _edges(self, node: Any, waits: list[Any]) -> list[Any]:
        """The task runs a node's task run waits for: its inputs' (a recorded shard's is its
        batch's, for a study node: it reads every shard anyway; a shard node keeps no edge to
        a batch, which would hold it until the batch's last shard), each once."""
        out: list[Any] = []
        seen: set[int] = set()
        for w in waits:
            batch = (self._batch_of.get(w) if node.scope != "shard" and isinstance(w, Future)
                     else None)
            w = self._records.get(batch) if batch is not None else w
            if isinstance(w, PrefectFuture) and id(w) not in seen:
                seen.add(id(w))
                out.append(w)
        return out

    def _task(self, node: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
              waits: list[Any], done: Any) -> Any:
        task = task_for(node.stage)
        ctx, *inputs = args  # a stage function's call: fn(ctx, *inputs)
        if self.distributed and ctx.workers != 1:  # a cluster worker grades on one core
            ctx = replace(ctx, workers=1)
        join = (headstart.joining(self.head, node.id) if self.head is not None
                else contextlib.nullcontext())
        # an input served without a task run has no future to wait for (it is done already)
        waits = self._edges(node, waits)
        given: Any = tuple(inputs)
        if len(waits) > max_edges():
            # a node reading every shard (measure over 15,625 grading shards): each edge is a
            # task input in each of its task run's state events, which Prefect refuses past
            # its event size (EventTooLarge failed the stage). Its inputs are done already;
            # quoted, Prefect neither waits on nor links them: the edges are not drawn
            waits, given = [], quote(given)
        with join:  # the task runner copies this context into the task's thread
            fut = task.submit(ctx, given, wait_for=waits, **kwargs)
        fut.add_done_callback(lambda _: done())
        return fut

    def _cached(self, node: Any) -> Any:
        """The head start's result of the node when it has it and served it from the store
        (one it computed, or is still computing, is recorded by a task run), else None."""
        assert self.head is not None
        out = self.head.outcome(node.id)
        if not out.done() or out.exception() is not None:
            return None
        res = out.result()
        return res if isinstance(res, StageResult) and res.cached else None

    def result(self, handle: Any) -> Any:
        return handle.result()

    def close(self, cancel: bool) -> None:
        # the flow's task runner owns the workers; the batches' task runs end with their
        # members (done by now, or resolved by the head start's end)
        if not cancel:
            for rec in list(self._records.values()):
                if rec is not None:
                    rec.wait()
        if self.hits:
            from prefect import get_run_logger

            with contextlib.suppress(Exception):  # outside a flow run: nobody to tell
                get_run_logger().info(
                    "served from the store without a task run (cache hits): %s",
                    ", ".join(f"{k}: {v} shard(s)" for k, v in sorted(self.hits.items())))


def capacity_for(spec: Any) -> dict[str, int]:
    """Slots for the graph: on a cluster, one grading shard per worker core."""
    if spec.execution.runner == "local":
        return dict(LOCAL_CAPACITY)
    return {**LOCAL_CAPACITY, "cores": spec.execution.workers or os.cpu_count() or 1}


def check_workers_reach(store: Store) -> None:
    """Before any stage runs on a cluster: a worker writes a canary to the store and this
    process reads it back, so a store the workers cannot reach (or a local folder each worker
    has its own copy of) is named here with the fix, not as a missing output mid-run."""
    import uuid

    from assay.errors import StoreError

    where = store.describe()
    fix = ("use an object-store URL (ASSAY_STORE=s3://bucket/prefix, --store s3://...) or a "
           "filesystem every worker mounts at the same path")
    try:
        key = store_canary.submit(store, uuid.uuid4().hex).result()
    except Exception as e:  # noqa: BLE001 (any failure on the worker means the same thing)
        raise StoreError(f"a cluster worker cannot write to the store {where}: "
                         f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
                         f"give the workers access (credentials, endpoint) or {fix}") from None
    if store.get_json(key) is None:
        raise StoreError(f"workers do not see {where}: what a worker wrote there is not in this "
                         f"process's store; {fix}")
    store.delete_file(store._blob_rel(key))  # unique to this check: nothing else names it



class StoppableThreadPoolTaskRunner(ThreadPoolTaskRunner):  # type: ignore[type-arg]
    """Prefect's thread pool task runner, except that after a stop (:mod:`assay.stop`) the
    flow run ends without joining the threads of its nodes.

    Why: Prefect's runner joins every worker thread as the flow run ends; a node blocked where
    no stop reaches (a plugin's call, a server that accepted and never answers) would hold the
    stopped run, its Failed state and the night's alert until it returned by itself. Such a
    thread is abandoned: what it computes after the stop is never committed (``stop.check``).
    """

    def cancel_all(self) -> None:
        if stop.stopped() is None or self._executor is None:
            super().cancel_all()
            return
        for event in self._cancel_events.values():
            event.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = None


# the default runner for a study run as a subflow or from a deployment (run_spec and the
# nightly pick the spec's runner with task_runner_for)
@flow(name="assay-study", persist_result=False, log_prints=False, validate_parameters=True,
      task_runner=StoppableThreadPoolTaskRunner())
def study(spec: str, output: str | None = None, store_root: str | None = None,
          publish: bool = True, view: bool = True, overrides: list[str] | None = None,
          night: str | None = None, max_parallel: int | None = None) -> dict[str, Any]:
    """Run the study in spec file ``spec``; write ``output`` (default from the spec) and, unless
    ``view`` or the spec's ``execution.view`` is false, its page ``output/view/index.html``.
    ``overrides``: ``PATH=VALUE`` items applied to the spec (``--set``); ``night``: run as
    that nightly night (completions of an unproven model identity are keyed to it). The stages
    are a graph (``assay.stages.plan``): every node whose inputs exist runs, at most
    ``max_parallel`` at once (default: the spec's ``execution.max_parallel``)."""
    guard_output()  # deployed, its stdout is a pipe to a worker that may die before it ends
    _mark_process()
    s = load_spec(spec, overrides or ()).for_night(night)
    # the flag's parser, for a deployment's parameter and ASSAY_STORE too: never a folder `s3:`
    store = Store(store_from(store_root, field="store_root"))
    head = headstart.current()
    if head is not None and (night is not None
                             or head.key != headstart.key_for(spec, overrides, store)):
        head = None  # not this flow's study: run it here
    started = head.started if head is not None else time.time()
    out = s.output_dir(output)
    # a store gc waits until this run has written its run.json; a study whose nodes all run in
    # this process publishes its writes to an object store behind them (cluster workers read
    # the server, so there every write is published before its node ends)
    with store.in_use(write_behind=s.execution.runner == "local"):
        if s.execution.runner != "local":
            check_workers_reach(store)
        # past execution.deadline, or stalled for execution.stall_after: RunStopped is raised
        # here, so the flow run ends Failed naming the stage (what was committed stays)
        with guard(s.execution.deadline, s.execution.stall_after), progress_artifacts():
            run = stages.run_study(s, store,
                                   executor=PrefectExecutor(s.execution.runner != "local", head),
                                   max_parallel=max_parallel, capacity=capacity_for(s),
                                   # the head start preloads and grades ahead, if anyone
                                   preload=head is None and s.execution.runner == "local",
                                   # one graph per run: the head start's, its shards cut once
                                   graph=head.follower(s, store) if head is not None else None)
        if head is not None:  # every node recorded: its run has ended or is ending
            head.wait()
            if head.run is not None:
                run = replace(run, facts=head.run.facts)
        store.flush()  # every output is published before run.json names it
        info = finish_run(store, s, run, out, started, overrides=overrides)
    if publish:
        _publish_artifacts(s.name, stages.report_files(store, run.report))
    if view and s.execution.view:
        write_page(out, s.name if publish else None)
    print(stages.summarize(run.results), file=sys.stderr, flush=True)
    if "sent" in info and night is None:  # a nightly prints it under the study's name
        print(generation_line(info), file=sys.stderr, flush=True)
    print(f"report: {out / 'report.md'}", file=sys.stderr, flush=True)
    return {**info, "output": str(out)}


def generation_line(info: dict[str, Any]) -> str:
    """``generation: 0 requests sent, all 256 completions from the cache``, or what this run
    asked, each count its own number: samples asked, completions received, failures by cause,
    HTTP requests that reached the server (with those of an earlier run that was stopped or
    killed before it could report them), retries by cause.

    Example:
        >>> line = generation_line({"sent": 160, "completions": 160, "generation": {"total": {
        ...     "requests": 220, "completions": 40, "failures": {"HTTP 503": 120},
        ...     "retries": {"503": 60}}}})
        >>> for part in line.split("; "):
        ...     print(part)
        generation: 160 samples asked: 40 completions, 120 failed (HTTP 503: 120)
        220 HTTP requests (60 retries: 503: 60)
        160 rows in all
    """
    n, sent = info.get("completions", 0), info["sent"]
    if sent == 0:
        return (f"generation: 0 requests sent: all {n} completions served from the cache "
                "(this run asked the model nothing)")
    t = (info.get("generation") or {}).get("total") or {}
    fails, retries = t.get("failures") or {}, t.get("retries") or {}

    def by(d: dict[str, int]) -> str:
        return ", ".join(f"{k}: {v}" for k, v in d.items())

    failed = sum(fails.values())
    out = (f"generation: {sent} samples asked: {t.get('completions', sent - failed)} "
           f"completions, {failed} failed" + (f" ({by(fails)})" if fails else ""))
    if "requests" in t:
        notes = [f"{sum(retries.values())} retries: {by(retries)}"] if retries else []
        if t.get("recovered"):  # counted from the journal of a run that never reported them
            notes.append(f"{t['recovered']} sent by an earlier run that was stopped or killed")
        out += f"; {t['requests']} HTTP requests" + (f" ({', '.join(notes)})" if notes else "")
    return out + f"; {n} rows in all"


#: Loggers of Prefect's background services: the EventsWorker (its failures are logged by
#: ``prefect._internal.concurrency``, a 1.7 KB line holding the whole event) and the events
#: client. They go on logging after the run's block ends, while the embedded server stops or
#: the process exits, so :func:`capture_logs` keeps them on the run's log file, not the terminal.
BACKGROUND_LOGGERS = ("prefect._internal", "prefect.events")


class _AfterRun(logging.FileHandler):
    """The last run's log, appended to by :data:`BACKGROUND_LOGGERS` after its block ended;
    ``propagate``: the logger's own setting, given back when the next run's block starts."""

    def __init__(self, path: str | os.PathLike[str], propagate: bool) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.setFormatter(_log_format())
        self.propagate = propagate

    def handleError(self, record: logging.LogRecord) -> None:
        """A record the last run's folder no longer takes (deleted since) is dropped: printing
        logging's own error report would be the terminal noise this handler keeps away."""


def _log_format() -> logging.Formatter:
    return logging.Formatter("%(asctime)s | %(levelname)-7s | %(name)s - %(message)s")


def _release_background(logger: logging.Logger) -> None:
    for h in [h for h in logger.handlers if isinstance(h, _AfterRun)]:
        logger.removeHandler(h)
        logger.propagate = h.propagate
        h.close()


def _terminal(h: logging.Handler) -> bool:
    """Whether ``h`` writes to the terminal (a stream handler on stderr or stdout)."""
    return (isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            and getattr(h, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__,
                                               sys.__stdout__))


@contextlib.contextmanager
def capture_logs(path: str | os.PathLike[str], *, echo: bool = False) -> Iterator[logging.Handler]:
    """While the block runs, send Prefect's (and every other library's) terminal log records to
    ``path`` instead; with ``echo`` the terminal keeps them too. Yields the file handler; the
    handlers are restored on exit, but for :data:`BACKGROUND_LOGGERS`, whose records go on to
    ``path`` (appended) until the next block: without ``echo`` nothing reaches the terminal
    before or after the run's one ``error:`` line.

    A failing run otherwise prints Prefect's task and flow failure records, each with a
    traceback, above the one line that says what to fix."""
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()
    for name in BACKGROUND_LOGGERS:  # an earlier run's log no longer takes them
        _release_background(logging.getLogger(name))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(_log_format())
    changed: list[tuple[logging.Logger, list[logging.Handler]]] = []
    for logger in [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                          if isinstance(lg, logging.Logger))]:
        terminal = [h for h in logger.handlers if _terminal(h)]
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
            if echo or logger.name not in BACKGROUND_LOGGERS:
                for h in removed:
                    logger.addHandler(h)
        handler.close()
        if not echo:
            # the EventsWorker fails to send the run's last events when the embedded server
            # stops (or a real one is away) after this block: run.log gets them, not the user
            for name in BACKGROUND_LOGGERS:
                bg = logging.getLogger(name)
                for h in [h for h in bg.handlers if _terminal(h)]:
                    bg.removeHandler(h)
                bg.addHandler(_AfterRun(path, bg.propagate))
                bg.propagate = False  # the root's terminal handler is back: not through it


def task_runner_for(spec: Any, max_parallel: int | None = None) -> Any:
    """The task runner a spec's execution settings ask for; Dask and Ray need a real server.
    Locally one thread per node in flight (``max_parallel``)."""
    runner = spec.execution.runner
    if runner == "local":
        return StoppableThreadPoolTaskRunner(
            max_workers=stages.max_parallel_for(spec, max_parallel))
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
    return (RayTaskRunner(address=spec.execution.address) if spec.execution.address
            else RayTaskRunner())


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


def _mark_process() -> None:
    """Tag this flow run with its process; a top-level study also marks Crashed the runs that
    killed runs left Running (a night's subflows are its nightly flow's to reap)."""
    from prefect.context import FlowRunContext

    from assay.flows.crashed import reap_crashed, tag_this_run

    tag_this_run()
    ctx = FlowRunContext.get()
    if ctx is not None and ctx.flow_run is not None and ctx.flow_run.parent_task_run_id is None:
        reap_crashed()


def run_spec(spec_path: str, output: str | None = None, store_root: str | None = None, *,
             embedded: bool = True, publish: bool = True, view: bool = True,
             overrides: list[str] | None = None,
             max_parallel: int | None = None) -> dict[str, Any]:
    """Run a study flow with the runner its spec names (call it under the embedded server's
    set-up: ``assay.flows.embedded``)."""
    spec = load_spec(spec_path, overrides or ())
    if store_root and secret_bearing(store_root):
        # a URL carrying a key would be recorded as a flow parameter by the Prefect server:
        # the flow opens it from the environment instead
        os.environ["ASSAY_STORE"] = store_root
        store_root = None
    runner = task_runner_for(spec, max_parallel)
    t0 = time.perf_counter()
    flow_ = study.with_options(task_runner=runner)
    ctx = _quiet_local() if embedded else contextlib.nullcontext()
    with ctx:
        result = flow_(spec=str(spec_path), output=output, store_root=store_root, publish=publish,
                       view=view, overrides=list(overrides or []), max_parallel=max_parallel)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result
