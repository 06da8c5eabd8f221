"""A pool of sandbox fork servers that run untrusted code jobs in parallel.

Parent side of :mod:`assay.verify.forkserver`: starts one server per worker, feeds it jobs from a
shared queue on one thread per server, restarts a server that dies, and closes them all on exit.

Example:
    >>> with SandboxPool(1) as pool:
    ...     [r["status"] for r in pool.run([job("assert 1 + 1 == 2"), job("assert 1 + 1 == 3")])]
    ['passed', 'failed']
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import secrets
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NotRequired, TypedDict, cast

from assay import progress
from assay.errors import VerifierError

SERVER_SCRIPT = str(Path(__file__).with_name("forkserver.py"))
_ISSUED_UIDS: set[int] = set()  # throwaway uids given to this process's servers


def issued_uids() -> frozenset[int]:
    """The throwaway uids this process's sandbox servers ran candidates as: a leak check looks
    for live processes of these uids (and only these: another process's sandboxes are not ours).

    Example:
        >>> 0 in issued_uids()  # root is never a throwaway uid
        False
    """
    return frozenset(_ISSUED_UIDS)

#: Modules the servers import once so each forked candidate finds them loaded (fast, and
#: cheap to fork: a bigger server forks slower, so heavy modules load lazily per job).
PRELOAD = (
    "math", "re", "string", "collections", "itertools", "functools", "heapq", "bisect", "random",
    "statistics", "fractions", "decimal", "typing", "copy", "operator",
)


class Job(TypedDict):
    """One job as :func:`job` builds it (the server reads it by these names)."""

    program: str
    entry_point: str | None
    test_functions: list[str]
    timeout: float
    memory_mb: int
    cpu_seconds: float
    file_mb: int
    max_files: int
    mode: NotRequired[str]
    prompt: NotRequired[str | None]
    secret: NotRequired[str]


class Report(TypedDict, total=False):
    """What the tests' process writes back in boundary mode (see :mod:`assay.verify.boundary`)."""

    guard: str
    reason: str
    notes: list[str]
    error: str


class Reply(TypedDict):
    """A job's outcome as the server (or :meth:`SandboxPool.run`, for a job no server ran)
    writes it."""

    status: str
    exit_code: int | None
    seconds: float
    output_tail: str
    left_over: int
    id: NotRequired[object]
    report: NotRequired[Report]


def default_workers() -> int:
    """Worker count sized to the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def job(program: str, *, entry_point: str | None = None, test_functions: Sequence[str] = (),
        timeout: float = 10.0, memory_mb: int = 1024, cpu_seconds: float | None = None,
        file_mb: int = 16, max_files: int = 64, tests: str | None = None,
        prompt: str | None = None) -> Job:
    """One sandbox job: run ``program``; with ``entry_point``, then call ``check(entry_point)``;
    then each of ``test_functions``. Passes only if all of them return.

    With ``tests``, the function-call mode (see :mod:`assay.verify.boundary`): ``program`` is
    the candidate's code alone and runs in its own process; ``prompt`` (trusted, e.g.
    HumanEval's) then ``tests`` run in a pristine process that calls the candidate's functions
    through a plain-data boundary. The tests reach that process only after the candidate's
    process exists, so they are never in its memory.

    Example:
        >>> job("assert True", timeout=2)["cpu_seconds"]
        3.0
        >>> with SandboxPool(1) as pool:
        ...     r = pool.run([job("def f():\\n    return 1\\n", tests="assert f() == 1\\n"),
        ...                   job("def f():\\n    return 2\\n", tests="assert f() == 1\\n")])
        >>> [x["status"] for x in r]
        ['passed', 'failed']
    """
    if not timeout or timeout <= 0:
        raise VerifierError(f"timeout={timeout!r}: must be a positive number of seconds")
    boundary = {} if tests is None else {"mode": "boundary", "prompt": prompt, "secret": tests}
    # the keys are Job's: the boundary ones exactly when tests are given
    return cast(Job, {
        **boundary,
        "program": program, "entry_point": entry_point, "test_functions": list(test_functions),
        "timeout": float(timeout), "memory_mb": int(memory_mb),
        "cpu_seconds": float(cpu_seconds if cpu_seconds is not None else timeout + 1),
        "file_mb": int(file_mb), "max_files": int(max_files),
    })


class _Server:
    """One fork server process and its pipes."""

    def __init__(self, python: str, isolate: bool, max_procs: int, preload: Sequence[str],
                 drop_privileges: bool):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        self.proc = subprocess.Popen(
            [python, "-I", "-S", "-B", SERVER_SCRIPT], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd="/", close_fds=True,
            start_new_session=True,
        )
        # both are pipes (stdin=PIPE, stdout=PIPE), never None
        self.stdin: IO[bytes] = cast(IO[bytes], self.proc.stdin)
        self.stdout: IO[bytes] = cast(IO[bytes], self.proc.stdout)
        uid = 1_000_000 + secrets.randbelow(1_000_000_000) if drop_privileges else None
        if uid is not None:
            _ISSUED_UIDS.add(uid)
        self._send({"isolate": isolate, "uid": uid, "max_procs": max_procs,
                    "preload": list(preload)})
        self.isolation: dict[str, object] = {}

    def wait_ready(self) -> _Server:
        """Read the server's hello (servers start in parallel, then each is awaited)."""
        hello = self._recv(timeout=30.0)
        if not hello or not hello.get("hello"):
            self.kill()
            raise VerifierError("the sandbox server did not start; "
                                "is this a POSIX system with fork()?")
        self.isolation = hello["isolation"]
        return self

    def _send(self, obj: Mapping[str, object]) -> None:
        secret = b""
        if isinstance(obj, dict) and "secret" in obj:
            # the tests travel after the job's frame, as raw bytes the server never decodes
            secret = obj["secret"].encode()
            obj = {k: v for k, v in obj.items() if k != "secret"} | {"secret_len": len(secret)}
        data = json.dumps(obj).encode()
        self.stdin.write(struct.pack(">I", len(data)) + data + secret)
        self.stdin.flush()

    def _read_exact(self, n: int, deadline: float) -> bytes | None:
        fd = self.stdout.fileno()
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def _recv(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        head = self._read_exact(4, deadline)
        if head is None:
            return None
        body = self._read_exact(struct.unpack(">I", head)[0], deadline)
        return None if body is None else json.loads(body)

    def run(self, one: Job) -> Reply | None:
        """The reply, or None when the server died or stopped answering (it is then killed)."""
        try:
            self._send(one)
        except (BrokenPipeError, OSError):
            self.kill()
            return None
        reply = self._recv(timeout=one["timeout"] + 30.0)
        if reply is None:
            self.kill()
        return reply

    def close(self) -> None:
        try:
            # an explicit stop, not only EOF: a process forked from ours since this server
            # started (a grading worker) holds a copy of the pipe, so EOF may never come
            with contextlib.suppress(OSError, ValueError):
                self._send({"stop": True})
            self.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.abort()  # SIGTERM first: the server then kills its job's uid and group
        finally:
            if self.stdout:
                self.stdout.close()

    def abort(self) -> None:
        """Stop now, mid-job: SIGTERM makes the server kill its job (group and uid) and exit;
        SIGKILL after a second if it has not."""
        with contextlib.suppress(OSError):
            self.proc.terminate()
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(OSError, ValueError):
            self.stdin.close()
            self.stdout.close()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            pass
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except Exception:
            pass


class SandboxPool:
    """``workers`` fork servers; :meth:`run` spreads jobs over them and keeps input order.

    Args:
        workers: servers (parallel candidates); default: the usable cores.
        python: interpreter for the servers (default: this one, run with ``-I -S``).
        isolate: try network and mount namespaces (recorded in :attr:`isolation`).
        max_procs: RLIMIT_NPROC for a candidate (processes and threads of its uid).
        preload: modules imported once in each server.
        drop_privileges: when running as root, run each candidate as a fresh throwaway uid
            (RLIMIT_NPROC binds, ``kill(-1)`` cleans up atomically, root-owned files are out of
            reach). False keeps the caller's uid: cleanup then relies on the process group and
            a sweep of the server's descendants (the path a non-root caller always takes).
    """

    def __init__(self, workers: int | None = None, *, python: str | None = None,
                 isolate: bool = True, max_procs: int = 32, preload: Sequence[str] = PRELOAD,
                 drop_privileges: bool = True):
        n = default_workers() if workers is None else workers
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise VerifierError(f"workers={workers!r}: must be a positive integer or None "
                                "(one per core)")
        if os.name != "posix" or not hasattr(os, "fork"):
            raise VerifierError("CodeExec needs a POSIX system with fork(); this is "
                                + sys.platform)
        self._args = (python or sys.executable, isolate, max_procs, tuple(preload), drop_privileges)
        self._servers: list[_Server | None] = []
        self._lock = threading.Lock()
        #: set by abort(): the run() in progress takes no further job and starts no server
        self._stopping = threading.Event()
        started: list[_Server] = []  # the same servers, typed as present
        try:
            for _ in range(n):
                started.append(_Server(*self._args))
                self._servers.append(started[-1])
            for server in started:
                server.wait_ready()
        except BaseException:
            self.close()
            raise
        self.isolation: dict[str, object] = dict(started[0].isolation)
        self.isolation.pop("uid", None)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def workers(self) -> int:
        return len(self._servers)

    def run(self, jobs: Sequence[Job]) -> list[Reply]:
        """Run every job; replies in input order. A server that dies mid-job (a candidate may
        kill its parent when not running as root) gives that job status ``server_died`` and is
        replaced."""
        for slot, server in enumerate(self._servers):
            if server is not None and server.proc.poll() is not None:  # died while idle
                server.kill()
                self._servers[slot] = None  # restarted below before it gets a job
        results: list[Reply | None] = [None] * len(jobs)
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(len(jobs)):
            todo.put(i)
        errors: list[BaseException] = []
        unit = progress.current()  # the grade stage's unit (this thread's): one per job done

        def drive(slot: int) -> None:
            try:
                while True:
                    if self._stopping.is_set():  # aborted: the caller raises, nothing more runs
                        return
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    server = self._servers[slot]
                    if server is None:
                        server = self._servers[slot] = _Server(*self._args).wait_ready()
                        if self._stopping.is_set():  # aborted while this one started
                            server.abort()
                            return
                    start = time.monotonic()
                    reply = server.run(jobs[i])
                    if reply is None:
                        self._servers[slot] = None
                        reply = {"status": "server_died", "exit_code": None, "left_over": 0,
                                 "seconds": round(time.monotonic() - start, 4),
                                 "output_tail": "the sandbox server died or hung "
                                                "while running this job"}
                    results[i] = reply
                    if unit is not None:
                        unit.advance(1)
            except BaseException as e:  # surfaced to the caller below
                errors.append(e)

        threads = [threading.Thread(target=drive, args=(s,), daemon=True)
                   for s in range(len(self._servers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return [r if r is not None else {"status": "error", "exit_code": None, "seconds": 0.0,
                                         "output_tail": "not run", "left_over": 0} for r in results]

    def close(self) -> None:
        """Stop every server (each kills whatever its last job left behind)."""
        for s in self._servers:
            if s is not None:
                s.close()
        self._servers = [None] * len(self._servers)

    def abort(self) -> None:
        """Stop every server at once, killing the jobs they run (an interrupt: no waiting for
        a candidate's timeout)."""
        self._stopping.set()  # before the servers die: a driver seeing EOF must not respawn
        servers, self._servers = self._servers, [None] * len(self._servers)
        for s in servers:  # signal all first: they clean up in parallel
            if s is not None:
                with contextlib.suppress(OSError):
                    s.proc.terminate()
        for s in servers:
            if s is not None:
                s.abort()


# Warm pools ----------------------------------------------------------------------------------
# Starting a pool costs ~50 ms of CPU per server (interpreter, preloads, namespaces): 0.2 s for
# four, 15% of grading all of HumanEval's 328 canonical + broken programs. Pools are kept idle
# between calls instead (one per configuration and concurrent user) and closed at exit or by
# close_idle_pools(). Reuse is safe: every candidate is a fresh fork of its server and cannot
# reach the server itself; a server that died is replaced by ``run``.
_idle: dict[tuple[object, ...], list[SandboxPool]] = {}
_idle_lock = threading.Lock()
_owner_pid = os.getpid()


@contextlib.contextmanager
def warm_pool(workers: int, **kwargs: Any) -> Iterator[SandboxPool]:
    """A :class:`SandboxPool` for one caller at a time, kept warm for the next call with the
    same settings; two concurrent callers get two pools.

    Example:
        >>> with warm_pool(1) as pool:
        ...     pool.run([job("assert 2 > 1")])[0]["status"]
        'passed'
    """
    global _owner_pid
    key = (workers, *sorted(kwargs.items()))
    pool = None
    with _idle_lock:
        if _owner_pid != os.getpid():  # a forked child must not share its parent's servers
            _idle.clear()
            _owner_pid = os.getpid()
        if _idle.get(key):
            pool = _idle[key].pop()
    if pool is None:
        pool = SandboxPool(workers, **kwargs)
    ok = False
    with _idle_lock:
        _busy.add(pool)
    try:
        yield pool
        if pool in _aborted:  # abort_running() killed its jobs: their verdicts mean nothing
            raise KeyboardInterrupt("grading cancelled")
        ok = True
    except BaseException:  # Ctrl-C, SIGTERM (Prefect's TerminationSignal), a stop, an error
        pool.abort()  # close() would wait for each running job (up to its timeout)
        raise
    finally:
        with _idle_lock:
            _busy.discard(pool)
            _aborted.discard(pool)
        if ok:
            with _idle_lock:
                _idle.setdefault(key, []).append(pool)
        elif any(s is not None for s in pool._servers):
            pool.close()


_busy: set[SandboxPool] = set()  # pools a caller holds now (any thread)
_aborted: set[SandboxPool] = set()


def abort_running() -> None:
    """Kill the jobs of every pool in use (on any thread): their callers raise
    KeyboardInterrupt instead of returning verdicts. An interrupted study graph calls this
    (through :func:`assay.grading.cancel_running`) so Ctrl-C does not wait for timeouts.

    Example:
        >>> abort_running()
    """
    with _idle_lock:
        pools = list(_busy)
        _aborted.update(pools)
    for p in pools:
        p.abort()


def close_idle_pools() -> None:
    """Stop every warm pool (:func:`assay.grading.shutdown_workers` calls this; so does exit).

    Example:
        >>> close_idle_pools()
    """
    with _idle_lock:
        pools = [p for ps in _idle.values() for p in ps] if _owner_pid == os.getpid() else []
        _idle.clear()
    for p in pools:
        p.close()


atexit.register(close_idle_pools)
