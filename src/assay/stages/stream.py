"""Streaming generation into grading: a generate shard's finished prompts are graded while the
rest of the shard is still being asked for, so its grade node finds most verdicts ready.

:class:`Pregrader` (one per graph run, in this process, held by the run's
:class:`~assay.stages.declare.RunState`: the stages find it as ``ctx.pregrader``) takes each
prompt as its last sample arrives (:func:`assay.models.generate`'s ``on_prompt``), builds that
prompt's rows exactly as the generate stage will, and grades them on the warm grading workers
whenever no node holds the ``cores``: it yields to every node that needs them (a batch is a few
rows; it never forks workers of its own). The grade node then grades only what is missing.
Verdicts are memoized on the whole record the grade node would judge, so a row built differently
is simply graded again: results, rows and cache keys are the chain's byte for byte.

Example:
    >>> p = Pregrader(None, None, busy=lambda: False)
    >>> p.feed("left", 0) is None  # no source streamed: generation streams nowhere
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from assay.judging import Judge, Verdict, Verifier

#: A prompt's chat messages (``{"role", "content"}``), as the generate stage sent them.
Messages = list[dict[str, str]]
#: A row's ``privileged`` or ``meta`` document (None: the source gives none).
Doc = Mapping[str, Any] | None


def record_key(record: Mapping[str, Any]) -> bytes:
    """What a verdict is memoized on: the whole record the judge sees."""
    text = json.dumps(record, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=20).digest()


class _Shard:
    """One generate shard's finished prompts: what its rows need, queued records, verdicts."""

    def __init__(self, source: str, k: int, messages: list[Messages], task_ids: list[str],
                 privileged: list[Doc], meta: list[Doc]) -> None:
        self.source, self.k = source, k
        self.messages, self.task_ids = messages, task_ids
        self.privileged, self.meta = privileged, meta
        self.prompts: deque[tuple[int, list[dict[str, Any]]]] = deque()  # rows not built yet
        self.queue: deque[tuple[bytes, dict[str, Any]]] = deque()
        self.memo: dict[bytes, Future[Verdict]] = {}
        self.claimed = False


class RunHolder(Protocol):
    """What a background grader is attached to: the run's state
    (:class:`assay.stages.declare.RunState`, which the stages read as ``ctx.pregrader``)."""

    def attach(self, pregrader: Pregrader) -> None: ...

    def detach(self, pregrader: Pregrader) -> None: ...


class Pregrader:
    """Grades streamed rows ahead of their grade nodes (see the module docstring).

    ``verifiers(source)`` builds a source's verifier (None: not streamed); ``busy()`` says
    whether a node holds the cores now; :meth:`poke` is called when that may have changed."""

    #: Rows per background batch: short, so a node that needs the cores waits little.
    BATCH = 8

    def __init__(self, verifiers: Callable[[str], Verifier | None] | None, workers: int | None, *,
                 busy: Callable[[], bool]) -> None:
        self.verifiers = verifiers
        self.workers = workers
        self.busy = busy
        self.shards: dict[tuple[str, int], _Shard] = {}
        self.judges: dict[str, Judge | None] = {}
        self.cond = threading.Condition()
        self.stopped = False
        # rows graded ahead of their node, and verdicts handed to a node (facts for tests and
        # benchmarks: a row graded ahead and not used was graded twice)
        self.graded = 0
        self.used = 0
        self.thread: threading.Thread | None = None
        self.state: RunHolder | None = None
        self._judges_lock = threading.Lock()
        self._backoff = False  # the workers were taken under a batch: wait before retrying

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, state: RunHolder) -> Pregrader:
        """Become the background grader of the run whose live state is ``state`` (its generate
        and grade nodes find it on their context) and start the grading thread."""
        self.state = state
        state.attach(self)
        self.thread = threading.Thread(target=self._loop, name="assay-pregrade", daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        """Stop: leave the run's state, wake the thread and wait for it (a batch in flight is
        a few rows, each bounded by the verifier's hard limit; an interrupted run's is
        cancelled)."""
        if self.state is not None:
            self.state.detach(self)
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()

    def poke(self) -> None:
        """The cores may be free now (a node holding them ended)."""
        with self.cond:
            self.cond.notify_all()

    # -- the generate stage's side ---------------------------------------------------------

    def feed(self, source: str, shard: int, *, k: int = 1, messages: Sequence[Messages] = (),
             task_ids: Sequence[str] = (), privileged: Sequence[Doc] = (),
             meta: Sequence[Doc] = ()) -> Callable[[int, list[dict[str, Any]]], None] | None:
        """The ``on_prompt`` hook for generate shard ``shard`` of ``source`` (None when the
        source is not streamed): it queues each finished prompt's rows for grading."""
        if self.verifiers is None or self.verifier(source) is None:
            return None
        sh = _Shard(source, k, list(messages), list(task_ids), list(privileged), list(meta))
        with self.cond:
            self.shards[(source, shard)] = sh

        def on_prompt(i: int, records: list[dict[str, Any]]) -> None:
            # on the backend's thread (an event loop's): queue it, build its rows later
            with self.cond:
                if not sh.claimed:
                    sh.prompts.append((i, records))
                    self.cond.notify_all()

        return on_prompt

    def verifier(self, source: str) -> Judge | None:
        """``source``'s judge for grading ahead, built once (None: its rows are not)."""
        with self._judges_lock:
            if source not in self.judges:
                from assay.grading import can_grade_ahead
                from assay.judging import as_judge

                v = self.verifiers(source) if self.verifiers is not None else None
                ok = v is not None and can_grade_ahead(v)
                self.judges[source] = as_judge(v) if ok else None
            return self.judges[source]

    def _rows(self, sh: _Shard, i: int, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Prompt ``i``'s rows as the grade node will read them back (rollouts numbered per
        task across the shard's earlier prompts, as :meth:`Generations.rows` numbers them)."""
        from assay.models.generation import Generations
        from assay.rows import table_to_records

        one = [{**r, "prompt_index": 0} for r in records]
        g = Generations([None], [sh.messages[i]], sh.k, one, 0)
        table = g.rows(task_ids=[sh.task_ids[i]], privileged=[sh.privileged[i]],
                       meta=[sh.meta[i]]).to_arrow()
        out = table_to_records(table)
        before = sum(sh.k for t in sh.task_ids[:i] if t == sh.task_ids[i])
        for r in out:
            r["rollout_index"] += before
        return out

    # -- the grade stage's side ------------------------------------------------------------

    def drop(self, source: str, shard: int) -> None:
        """Forget shard ``shard`` of ``source`` (its grade node was served from the store)."""
        self.known(source, shard, list)

    def known(self, source: str, shard: int,
              records: Callable[[], Sequence[Mapping[str, Any]]]) -> list[Verdict | None] | None:
        """Claim shard ``shard`` of ``source`` for its grade node: nothing more of it is graded
        ahead; returns the verdicts already given to the rows ``records()`` returns (waiting
        for a batch in flight), None where a row must be graded; None for a shard that was not
        streamed (then ``records`` is not called). Forgets the shard."""
        with self.cond:
            sh = self.shards.pop((source, shard), None)
            if sh is None:
                return None
            sh.claimed = True
            for key, _ in sh.queue:
                sh.memo.pop(key, None)
            sh.queue.clear()
            sh.prompts.clear()
            if not sh.memo:
                return None
        out: list[Verdict | None] = []
        for r in records():
            fut = sh.memo.get(record_key(r))
            v = None
            if fut is not None:
                with contextlib.suppress(Exception):  # a cancelled batch: graded here instead
                    v = fut.result()
            out.append(v)
        with self.cond:
            self.used += sum(v is not None for v in out)
        return out

    # -- the grading thread ----------------------------------------------------------------

    def _next(self) -> tuple[Judge, list[tuple[bytes, dict[str, Any]]], _Shard] | None:
        """The next batch (one shard's rows), once there is one and the cores are free."""
        with self.cond:
            if self._backoff:
                self._backoff = False
                self.cond.wait(timeout=0.1)
            while not self.stopped:
                sh = next((s for s in self.shards.values() if s.queue or s.prompts), None)
                if sh is not None and not self.busy():
                    while sh.prompts and len(sh.queue) < self.BATCH:
                        self._queue(sh, *sh.prompts.popleft())
                    if sh.queue:
                        judge = self.judges[sh.source]
                        assert judge is not None  # feed() makes shards of judged sources only
                        batch = [sh.queue.popleft()
                                 for _ in range(min(self.BATCH, len(sh.queue)))]
                        return judge, batch, sh
                    continue
                # woken by a new prompt, a node releasing the cores, or close(); the timeout
                # re-asks busy(), which may turn false without a node ending (more to start)
                self.cond.wait(timeout=None if sh is None else 0.5)
        return None

    def _queue(self, sh: _Shard, i: int, records: list[dict[str, Any]]) -> None:
        try:
            rows = self._rows(sh, i, records)
        except Exception:  # noqa: BLE001 (grading ahead is an optimization: the node grades)
            return
        for r in rows:
            key = record_key(r)
            if key not in sh.memo:
                sh.memo[key] = Future()
                sh.queue.append((key, r))

    def _loop(self) -> None:
        from assay.grading import GradingBusy, judge_records

        while True:
            nxt = self._next()
            if nxt is None:
                return
            judge, batch, sh = nxt
            try:
                verdicts = judge_records(judge, [r for _, r in batch], workers=self.workers,
                                         background=True)
            except GradingBusy:  # someone took the workers first: later
                with self.cond:
                    self._backoff = True
                    if not sh.claimed:
                        sh.queue.extendleft(reversed(batch))
                        continue
                _fail(sh, batch, RuntimeError("not graded ahead"))  # its node grades them
                continue
            except BaseException as e:  # noqa: BLE001 (cancelled: the nodes grade these rows)
                _fail(sh, batch, e if isinstance(e, Exception) else
                      RuntimeError("grading ahead was cancelled"))
                if not isinstance(e, Exception):
                    return
                continue
            for (key, _), v in zip(batch, verdicts):
                sh.memo[key].set_result(v)
            with self.cond:
                self.graded += len(batch)


def _fail(sh: _Shard, batch: list[tuple[bytes, dict[str, Any]]], e: Exception) -> None:
    for key, _ in batch:
        sh.memo[key].set_exception(e)
