"""Grading: apply a verifier or judge to rows and return new graded rows.

Cheap judges run in-process; ``parallel`` verifiers (MathEqual) run in worker processes with a
hard per-row deadline; verifiers with ``grade_batch`` (CodeExec) run their own sandbox pool.

The worker processes are kept between grade calls (started on first use, one call at a time,
stopped at exit or by :func:`shutdown_workers`): math-verify's LaTeX parser gets about 40%
faster per row once warm, and a fresh pool per call threw that away.
"""

from __future__ import annotations

import atexit
import gc
import itertools
import math
import multiprocessing
import os
import pickle
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from assay import progress, stop
from assay.errors import RowsError, RowsTypeError
from assay.judging import Judge, Verdict, as_judge, check_references_used, normalize_verdict
from assay.rows import MARKERS_TYPE, Rows, RowsLike, as_table, table_to_records, to_json

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkContext
    from multiprocessing.process import BaseProcess

#: Rows per message to a worker process: big enough to amortize pickling, small enough to
#: balance the load and to re-queue little work when a worker is killed.
CHUNK_ROWS = 32
#: Seconds one row may take in a worker before the worker is killed (verifiers may set
#: ``hard_timeout``; MathEqual uses 3 x its timeout + 5).
DEFAULT_HARD_TIMEOUT = 60.0
#: Below this many rows, a parallel verifier on the main thread runs in-process (its
#: signal-based timeout works there) because starting workers would cost more than it saves.
IN_PROCESS_BELOW = 16


def grade(rows: RowsLike, verifier: object, *, workers: int | None = None,
          argument: str = "verifier", known: Sequence[Verdict | None] | None = None) -> Rows:
    """Grade ``rows`` with ``verifier`` (or any judge callable); returns new :class:`Rows`.

    The input is never mutated. Each graded row records ``judge_name``, ``judge_status``,
    ``reason`` and ``judge_meta``; markers a judge returns are merged into the row's markers.

    Args:
        rows: rows in any form :func:`assay.rows.as_table` reads.
        verifier: a verifier (``check(candidate, reference, row)``) or a judge callable.
        workers: parallelism. ``None``: one per core for verifiers marked ``parallel``
            (MathEqual, CodeExec), in-process for the rest. An integer >= 1 sets the number of
            worker processes / sandboxes for parallel verifiers (a ``parallel`` verifier still
            runs in a worker process with ``workers=1`` unless the batch is small and this is the
            main thread, so its timeout works). A verifier that pickles runs on worker
            processes kept warm between calls; others (and a call made while another holds
            those) get workers forked for the call and stopped after it.
        known: one entry per row: a verdict this verifier already gave that row (graded
            early, e.g. while the rest of its shard was still generating), or None to grade it.

    Example:
        >>> import assay
        >>> r = assay.rows(["2+3?"], [["5", "6"]], references=["5"])
        >>> g = grade(r, lambda p, c, ref: c == ref)
        >>> [x["reward"] for x in g]
        [1.0, 0.0]
    """
    judge: Judge = as_judge(verifier, argument=argument)
    table = as_table(rows, require=("prompt", "final_text"))
    records = table_to_records(table)
    check_references_used(judge, records, argument)
    # a unit of work of its own: a stop left by an earlier, finished run (a notebook's Ctrl-C,
    # a stopped study) does not cancel it; called inside a run, it shares that run's stop
    with stop.run():
        verdicts = judge_records(judge, records, workers=workers, known=known)
    return Rows(_with_verdicts(table, judge.name, verdicts))


def can_grade_ahead(verifier: object) -> bool:
    """Whether rows can be graded ahead of need (``judge_records(..., background=True)``): yes,
    unless the verifier runs on worker processes and does not pickle (a background call never
    forks workers of its own).

    Example:
        >>> can_grade_ahead(lambda row: 1.0)
        True
    """
    judge = as_judge(verifier)
    if judge.parallel and not callable(getattr(judge.source, "grade_batch", None)):
        return _shippable(judge) is not None
    return True


def _check_workers(workers: object) -> None:
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise RowsTypeError(f"workers={workers!r}: must be an integer >= 1 or None (one per core)")
    if workers < 1:
        raise RowsError(f"workers={workers}: must be >= 1, or None for one per core")


def cores() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class GradingBusy(Exception):
    """A ``background`` grade call found the warm worker processes in use (it never forks its
    own: the cores are someone else's now); try again later."""


def judge_records(judge: Judge, records: Sequence[Mapping[str, Any]], *,
                  workers: int | None = None, known: Sequence[Verdict | None] | None = None,
                  background: bool = False) -> list[Verdict]:
    """One :class:`Verdict` per record (dict rows), in order; never raises for a bad verdict.
    ``known``: verdicts already given (see :func:`grade`). ``background``: work done ahead of
    need, which yields: it raises :class:`GradingBusy` instead of forking workers while another
    call holds the warm ones, and a foreground call waits for it rather than forking its own.

    Example:
        >>> judge = as_judge(lambda row: len(row["final_text"]) / 10)
        >>> judge_records(judge, [{"final_text": "abc"}])[0].reward
        0.3
    """
    _check_workers(workers)
    judge = as_judge(judge)
    unit = progress.current()  # the grade stage's unit: advanced per row graded
    if known is not None and len(known) != len(records):
        raise ValueError(f"known: {len(known)} entries for {len(records)} records")
    verdicts: list[Verdict | None] = [None] * len(records)
    todo = []
    for i, r in enumerate(records):
        if r.get("judge_status") == "gen_error":  # no completion to grade: never scored as ""
            verdicts[i] = Verdict(None, "gen_error", r.get("reason"))
        elif judge.needs_reference and _reference(r) is None:
            verdicts[i] = Verdict(None, "no_reference",
                                  f"{judge.name} needs privileged.reference; pass references=")
        elif known is not None and known[i] is not None:
            verdicts[i] = known[i]
        else:
            todo.append(i)
    if unit is not None and len(records) > len(todo):
        unit.advance(len(records) - len(todo))  # nothing to grade in those rows
    if not todo:
        return verdicts  # type: ignore[return-value]  # no None left: every row has one
    batch = getattr(judge.source, "grade_batch", None)
    if callable(batch):
        before = unit.state().done if unit is not None else 0
        try:
            raw = batch([records[i] for i in todo], workers=workers)
            if len(raw) != len(todo):
                raise RuntimeError(f"grade_batch returned {len(raw)} verdicts for {len(todo)} rows")
            for i, v in zip(todo, raw):
                verdicts[i] = normalize_verdict(v)
        except Exception as e:  # the whole batch failed: every row says so, none passes
            for i in todo:
                verdicts[i] = Verdict(None, "error", f"{type(e).__name__}: {e}")
        if unit is not None:  # the rows a batch grader did not advance itself (per row)
            unit.advance(max(0, len(todo) - (unit.state().done - before)))
        return verdicts  # type: ignore[return-value]  # no None left: every row has one
    n = len(todo)
    main = threading.current_thread() is threading.main_thread()
    use_pool = judge.parallel and hasattr(os, "fork") and (
        not main or n >= IN_PROCESS_BELOW or (workers is not None and workers > 1))
    if use_pool:
        k = workers if workers is not None else cores()
        k = max(1, min(k, math.ceil(n / 4)))
        hard = float(getattr(judge.source, "hard_timeout", None) or DEFAULT_HARD_TIMEOUT)
        results = _run_pool(judge, [records[i] for i in todo], k, hard, background)
        for i, v in zip(todo, results):
            verdicts[i] = v
    else:
        for i in todo:
            verdicts[i] = judge.judge(records[i])
            if unit is not None:
                unit.advance(1)
    return verdicts  # type: ignore[return-value]  # no None left: every row has one


def _reference(row: Mapping[str, object]) -> object:
    priv = row.get("privileged") or {}
    return priv.get("reference") if isinstance(priv, Mapping) else None


# ---------------------------------------------------------------------------------------------
# worker processes


def _worker(judge: Judge | None, conn: Connection) -> None:
    """Worker loop. Messages: ``("judge", token, pickled verifier)`` installs a judge (shared
    workers, which outlive one grade call, get each call's verifier this way);
    ``("rows", token, [(index, row)])`` grades a chunk with the judge ``token`` names (None: the
    judge the worker was forked with), sending one (index, Verdict) per row; None stops."""
    from assay.reaper import watch_parent

    quiet_signals()
    watch_parent()  # a SIGKILLed parent leaves no worker (other workers hold our pipe's end)
    judges: dict[int | None, Judge | None] = {None: judge}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        tag, token, body = msg  # a message tag, not a verifier kind
        if tag == "judge":
            while len(judges) > 4:  # keep the verifiers of the last few calls (their caches)
                del judges[next(k for k in judges if k is not None)]
            try:
                judges[token] = as_judge(pickle.loads(body))
            except Exception:  # e.g. its class was defined after this worker was forked
                judges[token] = None
            continue
        j = judges.get(token)
        if j is None:
            conn.send(("no_judge", token))  # the caller grades this chunk elsewhere
            continue
        for i, row in body:
            v = j.judge(row)
            try:
                conn.send((i, v))
            except Exception as e:  # an unpicklable meta/markers value
                conn.send((i, Verdict(None, "invalid_result",
                                      f"verdict could not be sent back: {e}")))


def quiet_signals() -> None:
    """In a worker process: SIGTERM ends it at once and silently (the default action), and
    Ctrl-C's SIGINT, which the terminal sends the whole process group, is ignored: the parent
    stops its workers itself. A forked worker otherwise inherits ``assay run``'s handlers,
    whose exception prints a multiprocessing traceback per worker beside the run's one
    ``error:`` line.

    Example:
        >>> import multiprocessing, os, signal
        >>> def child() -> None:
        ...     quiet_signals()
        ...     os.kill(os.getpid(), signal.SIGTERM)
        >>> p = multiprocessing.get_context("fork").Process(target=child)
        >>> p.start(); p.join(); p.exitcode == -signal.SIGTERM
        True
    """
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_child(proc: BaseProcess) -> None:
    """Start a grading worker, also from a daemonic process (a Dask nanny's worker).

    multiprocessing refuses children to a daemonic process because it would exit without
    joining them, leaving orphans. A grading worker watches its parent and exits with it
    (:func:`assay.reaper.watch_parent`), so the rule's reason does not apply: the flag is
    lifted while this one child starts (the process stays daemonic for its own parent)."""
    me = multiprocessing.current_process()
    config = getattr(me, "_config", {})
    if not config.get("daemon"):
        proc.start()
        return
    with _DAEMON_LOCK:
        config["daemon"] = False
        try:
            proc.start()
        finally:
            config["daemon"] = True


_DAEMON_LOCK = threading.Lock()


class _Slot:
    def __init__(self, ctx: ForkContext, judge: Judge | None) -> None:
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(judge, child), daemon=True)
        _start_child(self.proc)
        child.close()
        self.conn = parent
        self.pending: deque[int] = deque()
        self.since = time.monotonic()
        self.known: set[int] = set()  # judge tokens this worker has been sent
        self.own = judge is not None  # forked holding this call's judge (not a shared worker)

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(5)
        except Exception:
            pass
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except Exception:
            pass
        self.proc.join(2)
        if self.proc.is_alive():
            self.kill()
        else:
            self.conn.close()


def _fork_slots(ctx: ForkContext, judge: Judge | None, n: int) -> list[_Slot]:
    from assay import libguard

    # Freeze the parent's objects into the permanent generation while forking, so the
    # workers' garbage collector never touches (and copy-on-write copies) inherited pages.
    # Forked holding libguard's lock: no other node's thread is half way through a heavy
    # import or a datasets load, whose locks a worker would otherwise inherit held for ever.
    with libguard.LIBRARIES:
        gc.collect()
        gc.freeze()
        try:
            return [_Slot(ctx, judge) for _ in range(n)]
        finally:
            gc.unfreeze()


class _SharedPool:
    """Worker processes kept between grade calls, so what a verifier's library learns while
    running (math-verify's LaTeX parser builds its prediction tables as it parses; its caches)
    is not thrown away with every call. Started lazily, used by one grade call at a time
    (others fork their own workers), stopped at exit."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.slots: list[_Slot] = []
        self.tokens = itertools.count(1)
        self.background = False  # the holder is a background call (it ends soon: wait for it)

    def take(self, ctx: ForkContext, n: int) -> list[_Slot]:
        for s in self.slots:
            if not s.proc.is_alive():
                s.kill()  # reap it, close its pipe
        self.slots = [s for s in self.slots if s.proc.is_alive()]
        if len(self.slots) < n:
            self.slots += _fork_slots(ctx, None, n - len(self.slots))
        return self.slots[:n]

    def replace(self, old: _Slot, ctx: ForkContext) -> _Slot:
        new = _fork_slots(ctx, None, 1)[0]
        self.slots = [new if s is old else s for s in self.slots]
        return new

    def close(self) -> None:
        if os.getpid() != self.pid:  # a forked child exiting: these are its parent's workers
            return
        for s in self.slots:
            s.stop()
        self.slots = []


_shared: _SharedPool | None = None
_shared_guard = threading.Lock()


def _shared_pool() -> _SharedPool:
    global _shared
    with _shared_guard:
        if _shared is None or _shared.pid != os.getpid():  # a forked child starts its own
            _shared = _SharedPool()
            atexit.register(_shared.close)
        return _shared


_CANCELLED = [0]  # bumped by cancel_running(): every grade call started before it stops


def cancel_running() -> None:
    """Stop every grade call now running in this process (on other threads), within half a
    second: each raises KeyboardInterrupt and kills its workers. What an interrupted study graph
    calls, so Ctrl-C does not wait for shards grading on worker threads; later calls run.

    Example:
        >>> cancel_running()
    """
    _CANCELLED[0] += 1
    if "assay.verify.sandbox" in sys.modules:  # CodeExec's sandboxes: kill their jobs now
        sys.modules["assay.verify.sandbox"].abort_running()


stop.always(cancel_running)  # every stop of the run (assay.stop) stops grading with it


def shutdown_workers() -> None:
    """Stop the worker processes kept between grade calls: MathEqual's grading workers and
    CodeExec's sandbox servers (they also stop at exit).

    Example:
        >>> shutdown_workers()
    """
    pool = _shared
    if pool is not None and pool.pid == os.getpid():
        with pool.lock:
            pool.close()
    if "assay.verify.sandbox" in sys.modules:  # CodeExec's warm sandbox servers
        sys.modules["assay.verify.sandbox"].close_idle_pools()


def _shippable(judge: Judge) -> bytes | None:
    """The pickled verifier, when the judge is a verifier that survives pickling (then it can
    run on shared workers); else None (the call forks workers holding the judge itself)."""
    src = judge.source
    if src is None or not callable(getattr(src, "check", None)):
        return None
    try:
        return pickle.dumps(src)
    except Exception:
        return None


def _run_pool(judge: Judge, rows: list[Mapping[str, object]], workers: int,
              hard_timeout: float, background: bool = False) -> list[Verdict]:
    """Grade ``rows`` on ``workers`` forked processes: the shared, warm ones when the verifier
    pickles and no other grade call is using them (or only a ``background`` one, which ends
    soon: then this call waits for it), else ones forked for this call. A ``background`` call
    never forks: it raises :class:`GradingBusy`. A worker that passes ``hard_timeout`` on one
    row, or dies, is replaced: that row gets ``timeout``/``error`` and the rest of its chunk is
    re-queued."""
    ctx = multiprocessing.get_context("fork")
    payload = _shippable(judge)
    pool = _shared_pool() if payload is not None else None
    if pool is not None and not pool.lock.acquire(blocking=False):
        # a background holder grades a few rows (each bounded by its hard limit)
        if background or not (pool.background and pool.lock.acquire(timeout=hard_timeout * 2)):
            pool = None
    if pool is None:
        if background:
            raise GradingBusy("the grading workers are in use")
        payload = None
    else:
        pool.background = background
    try:
        return _drive(ctx, judge, rows, workers, hard_timeout, pool, payload)
    finally:
        if pool is not None:
            pool.background = False
            pool.lock.release()


def _drive(ctx: ForkContext, judge: Judge, rows: list[Mapping[str, object]], workers: int,
           hard_timeout: float, pool: _SharedPool | None,
           payload: bytes | None) -> list[Verdict]:
    out: list[Verdict | None] = [None] * len(rows)
    size = max(1, min(CHUNK_ROWS, math.ceil(len(rows) / (workers * 4))))
    queue: deque[list[int]] = deque(list(range(s, min(s + size, len(rows))))
                                    for s in range(0, len(rows), size))
    slots: list[_Slot] = []
    token = next(pool.tokens) if pool is not None else None

    def feed(slot: _Slot) -> None:
        if queue and not slot.pending:
            idx = queue.popleft()
            slot.pending.extend(idx)
            slot.since = time.monotonic()
            if slot.own:
                slot.conn.send(("rows", None, [(i, rows[i]) for i in idx]))
                return
            assert token is not None  # a shared worker (not own) comes from the pool: a token
            if token not in slot.known:
                slot.conn.send(("judge", token, payload))
                slot.known.add(token)
            slot.conn.send(("rows", token, [(i, rows[i]) for i in idx]))

    def fresh(old: _Slot) -> _Slot:
        old.kill()
        if pool is not None and not old.own:
            return pool.replace(old, ctx)
        new = _fork_slots(ctx, judge, 1)[0]
        own.append(new)
        return new

    own: list[_Slot] = []
    unit = progress.current()

    ok = False
    epoch = _CANCELLED[0]
    try:
        slots = pool.take(ctx, workers) if pool is not None else _fork_slots(ctx, judge, workers)
        for s in slots:
            feed(s)
        while any(s.pending for s in slots):
            # the run was interrupted (cancel_running), or stopped before this call began
            if _CANCELLED[0] != epoch or stop.stopped() is not None:
                raise KeyboardInterrupt("grading cancelled")
            ready = wait([s.conn for s in slots if s.pending], timeout=0.5)
            now = time.monotonic()
            for k, s in enumerate(slots):
                if not s.pending:
                    continue
                failed = None
                if s.conn in ready:
                    try:
                        while s.conn.poll():
                            i, v = s.conn.recv()
                            if i == "no_judge":  # a shared worker could not load the verifier:
                                queue.appendleft(list(s.pending))  # fork one that holds it
                                s.pending.clear()
                                slots[k] = s = _fork_slots(ctx, judge, 1)[0]
                                own.append(s)
                                break
                            out[i] = v
                            s.pending.remove(i)
                            s.since = time.monotonic()
                            if unit is not None:
                                unit.advance(1)
                    except (EOFError, OSError):
                        code = s.proc.exitcode
                        failed = Verdict(None, "error",
                                         f"grading worker died (exit code {code}) on this row")
                elif now - s.since > hard_timeout:
                    failed = Verdict(None, "timeout", f"{judge.name} ran past the hard limit of "
                                     f"{hard_timeout:g}s on this row; its worker was killed")
                if failed is not None:
                    first = s.pending.popleft()
                    out[first] = failed
                    if unit is not None:
                        unit.advance(1, errors=1)
                    if s.pending:
                        queue.appendleft(list(s.pending))
                    s.pending.clear()
                    slots[k] = s = fresh(s)
                feed(s)
            for s in slots:
                feed(s)
        ok = True
    finally:
        for s in {id(x): x for x in (own if pool is not None else slots + own)}.values():
            s.stop()
        if pool is not None and not ok:  # interrupted mid-call: shared workers may hold
            for s in pool.slots:  # half-sent chunks; start them over
                s.kill()
            pool.slots = []
    return out  # type: ignore[return-value]  # no None left: every row has its verdict


def _with_verdicts(table: pa.Table, name: str, verdicts: list[Verdict]) -> pa.Table:
    markers = table.column("markers").to_pylist()
    merged = [dict(m or []) | dict(v.markers) if v.markers else dict(m or [])
              for m, v in zip(markers, verdicts)]
    cols = {
        "reward": pa.array([v.reward for v in verdicts], type=pa.float64()),
        "judge_name": pa.array([name] * len(verdicts), type=pa.string()),
        "judge_status": pa.array([v.status for v in verdicts], type=pa.string()),
        "reason": pa.array([v.reason for v in verdicts], type=pa.string()),
        "judge_meta": pa.array([to_json(v.meta, f"row {i} judge_meta")
                                for i, v in enumerate(verdicts)], type=pa.string()),
        "markers": pa.array([list(m.items()) for m in merged], type=MARKERS_TYPE),
    }
    for name_, arr in cols.items():
        i = table.schema.get_field_index(name_)
        table = table.set_column(i, table.schema.field(name_), arr)
    return table
