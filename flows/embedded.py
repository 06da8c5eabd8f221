"""The embedded Prefect setup for local runs: project-local home, quiet settings, own API server.

No server to start by hand: ``embedded_server()`` launches Prefect's API in a child process.

Why our own child instead of Prefect's implicit temporary server: we start it *before* importing
Prefect (the two start-ups overlap), the child dies with its parent (``PR_SET_PDEATHSIG``), so a
SIGKILLed run leaves no orphaned server holding pipes, and its log goes to a file we can show
when it fails. This module imports nothing from Prefect, so it can run first.

Example:
    >>> env = local_settings("/tmp/proj/.prefect", "warning")
    >>> env["PREFECT_SERVER_ANALYTICS_ENABLED"], env["PREFECT_LOGGING_LEVEL"]
    ('false', 'WARNING')
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from assay.errors import AssayError


class OrchestrationError(AssayError, RuntimeError):
    """Prefect could not be set up (the API server did not start, a runner needs a server)."""


class PrefectUnreachable(OrchestrationError):
    """``PREFECT_API_URL`` names a server that does not answer: not the user's spec, but not a
    crash either; ``assay`` prints the one line and exits 1 before anything runs."""

    exit_status = 1


#: Seconds the check of a given ``PREFECT_API_URL`` keeps trying (a server just restarting
#: refuses connections for a moment); ``ASSAY_PREFECT_CHECK_S`` sets another bound.
API_CHECK_S = 10.0


def local_settings(prefect_home: str | os.PathLike[str],
                   log_level: str = "warning") -> dict[str, str]:
    """Environment for quiet, offline, project-local Prefect runs.

    The task-run recorder and event persister are off: with SQLite they cause multi-second lock
    stalls, and resume rests on our content store, not on Prefect's run history.
    """
    return {
        "PREFECT_HOME": str(prefect_home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": log_level.upper(),
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
    }


def apply_local_settings(prefect_home: str | os.PathLike[str], log_level: str = "warning") -> None:
    """Set :func:`local_settings` in ``os.environ`` where the user has not set them."""
    for k, v in local_settings(prefect_home, log_level).items():
        os.environ.setdefault(k, v)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


#: Server services an embedded (one run, one client) server does not need: schedules, late and
#: paused runs, worker health, automations and cancellation cleanup all concern deployments and
#: workers, which need a real server anyway. Starting them costs about a second of start-up.
#: The repossessor stays on: it frees the concurrency slots (``gpu``) of a killed run.
EMBEDDED_SERVICES_OFF = ("SCHEDULER", "LATE_RUNS", "PAUSE_EXPIRATIONS", "FOREMAN", "TRIGGERS",
                         "CANCELLATION_CLEANUP", "CLEANUP_RECONCILER", "EVENT_LOGGER")


def template_path() -> Path:
    """Where this user's migrated, empty Prefect database for this Prefect version is kept:
    ``$ASSAY_CACHE_DIR`` (default ``$XDG_CACHE_HOME/assay``, i.e. ``~/.cache/assay``)."""
    from importlib.metadata import version

    root = os.environ.get("ASSAY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "assay")
    return Path(root) / f"prefect-{version('prefect')}-empty.db"


def copy_template(db: Path) -> bool:
    """Put a copy of the user's template database at ``db`` (a new PREFECT_HOME): a fresh
    database otherwise costs the first server in a folder its whole migration history. False
    when there is no template yet. The copy lands whole or not at all (temp file, rename)."""
    import shutil

    src = template_path()
    if not src.is_file():
        return False
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, db)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def save_template(db: Path) -> None:
    """Snapshot ``db`` (just created and migrated by a healthy server, no run in it yet) as the
    user's template. SQLite's backup API gives a consistent copy of a live database; the
    rename makes concurrent savers safe (each writes its own temp file, the last one wins,
    every one is complete). A failure only costs the next new folder its migrations."""
    import sqlite3

    dest = template_path()
    if dest.is_file():
        return
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(db, timeout=10)) as live, \
                contextlib.closing(sqlite3.connect(tmp)) as out:
            live.backup(out)
        os.replace(tmp, dest)
    except (OSError, sqlite3.Error):
        with contextlib.suppress(OSError):
            tmp.unlink()


class EmbeddedServer:
    """A Prefect API server in a child process on 127.0.0.1, tied to this process's life."""

    def __init__(self, port: int | None = None,
                 log_path: str | os.PathLike[str] | None = None) -> None:
        # The listening socket is bound here and handed to the child (uvicorn --fd): choosing a
        # free port and letting the child bind it later loses the port to any connection that
        # is handed it as its ephemeral local port in between ("address already in use").
        self._sock: socket.socket | None = socket.socket()
        try:
            self._sock.bind(("127.0.0.1", port or 0))
            self._sock.listen(2048)
        except OSError:
            self._sock.close()
            raise
        self.port = self._sock.getsockname()[1]
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        home = Path(os.environ.get("PREFECT_HOME", ".prefect"))
        self.log_path = Path(log_path) if log_path else home / "embedded-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.home = home
        self._lock_fd: int | None = None
        self._new_db: Path | None = None

    def _lock_new_database(self) -> None:
        """Two runs started at once on a fresh PREFECT_HOME would both create the database
        (one dies: "table ... already exists"). While there is no database yet, the first
        server is started under an exclusive file lock, held until it is healthy (its
        migrations done); the others wait for the lock, find the database and start freely.
        Bounded: the holder releases it when its server is healthy, fails or is stopped, and
        the kernel releases it if the holder dies."""
        db = self.home / "prefect.db"
        if os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL") or db.exists():
            return
        import fcntl

        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.home / ".assay-db.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits while another run's server creates it
        if db.exists() and db.stat().st_size > 0:
            os.close(fd)  # made by the run that held the lock: start freely
            return
        if copy_template(db):  # a migrated empty database, made once per user: no migrations
            os.close(fd)
            return
        self._lock_fd = fd
        self._new_db = db  # healthy, it becomes the template for the next new folder

    def _unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing releases the flock

    def start(self) -> EmbeddedServer:
        """Launch the server; returns at once (call :meth:`wait` before using the API)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_new_database()
        env = dict(os.environ, PREFECT__SERVER_EPHEMERAL="1", PREFECT__SERVER_FINAL="1",
                   PREFECT_UI_ENABLED="0")
        for name in EMBEDDED_SERVICES_OFF:
            env.setdefault(f"PREFECT_SERVER_SERVICES_{name}_ENABLED", "false")
        env.pop("PREFECT_API_URL", None)
        if self._sock is None:
            raise OrchestrationError("an embedded Prefect server starts once; make a new one")
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child
        fd = self._sock.fileno()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--factory",
                 "prefect.server.api.server:create_app",
                 "--fd", str(fd), "--log-level", "error", "--lifespan", "on"],
                pass_fds=(fd,),
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                # Ctrl-C in a terminal signals the whole foreground group: the server stays out
                # of it, so the interrupted run can still tell it so (then stops it in a moment)
                start_new_session=True,
            )
        finally:
            log.close()
            # the child holds the socket now; connections made before it accepts wait in the
            # backlog rather than being refused
            self._sock.close()
            self._sock = None
        return self

    def wait(self, timeout: float = 90.0) -> None:
        """Block until ``/health`` answers; OrchestrationError with the server log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                    if r.status == 200:
                        if self._new_db is not None:
                            save_template(self._new_db)
                            self._new_db = None
                        self._unlock()  # the database exists and is migrated
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.05)
        tail = ""
        with contextlib.suppress(OSError):
            tail = self.log_path.read_text(errors="replace")[-2000:]
        code = None if self.process is None else self.process.poll()
        self.stop()
        raise OrchestrationError(
            f"the embedded Prefect API server did not become healthy within {timeout:.0f} s "
            f"(exit code {code}); its log ({self.log_path}) ends with:\n{tail}\n"
            "Set PREFECT_API_URL to use a running server (`prefect server start`) instead."
        )

    def stop(self) -> None:
        self._unlock()
        if self._sock is not None:  # made but never started
            self._sock.close()
            self._sock = None
        p, self.process = self.process, None
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def embedded_server() -> Iterator[EmbeddedServer | None]:
    """Start an embedded server unless ``PREFECT_API_URL`` names one (a real server); yields the
    server (call ``.wait()`` before the first API call) or None, and stops it on exit.

    ``PREFECT_API_URL`` is exported while the block runs, so Prefect (import it inside the
    block, after the server has started: the two start-ups overlap) and any worker processes it
    spawns talk to the same server.
    """
    if os.environ.get("PREFECT_API_URL"):
        # before the study's graph starts (a head start asks the model at once): a server that
        # is not there is found by one request, not after the model has answered hundreds
        check_api(os.environ["PREFECT_API_URL"])
        yield None
        return
    server = EmbeddedServer().start()
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        yield server
    finally:
        server.stop()
        os.environ.pop("PREFECT_API_URL", None)


def wait_for(server_url: str, timeout: float = 90.0) -> None:
    """Wait for a server URL's ``/health`` (used by the embedded path after importing Prefect)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{server_url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            time.sleep(0.05)
    raise OrchestrationError(f"Prefect API at {server_url} is not healthy after {timeout:.0f} s")


def check_api(api_url: str, timeout: float | None = None) -> None:
    """One ``GET {api_url}/health`` (repeated on a refused connection for up to ``timeout`` s,
    default :data:`API_CHECK_S`): any HTTP answer means a server is there (an auth error is
    Prefect's to report); no answer raises :class:`PrefectUnreachable` naming the URL.

    Example:
        >>> try:
        ...     check_api("http://127.0.0.1:9/api", timeout=0.2)
        ... except PrefectUnreachable as e:
        ...     print(str(e)[:62])
        PREFECT_API_URL http://127.0.0.1:9/api: no Prefect API answers
    """
    if timeout is None:
        try:
            timeout = float(os.environ.get("ASSAY_PREFECT_CHECK_S") or API_CHECK_S)
        except ValueError:
            timeout = API_CHECK_S
    deadline = time.monotonic() + timeout
    why: BaseException | None = None
    while True:
        left = deadline - time.monotonic()
        try:
            with urllib.request.urlopen(f"{api_url.rstrip('/')}/health",
                                        timeout=max(0.1, min(5.0, left))):
                return
        except urllib.error.HTTPError:
            return  # a server answered (401 from a cloud workspace, 404 behind a proxy)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError) as e:
            why = getattr(e, "reason", None) or e
        if time.monotonic() + 0.25 >= deadline:
            break
        time.sleep(0.25)
    raise PrefectUnreachable(
        f"PREFECT_API_URL {api_url}: no Prefect API answers ({type(why).__name__}: {why}; "
        f"tried {timeout:g} s); start it (`prefect server start`) or unset PREFECT_API_URL "
        "to run on an embedded server; nothing was run")


def require_real_server(runner: str, *, embedded: bool | None = None) -> None:
    """Dask and Ray workers are separate processes: each needs a server it can reach, or each
    starts its own temporary one (20-30 s apiece). Raise unless ``PREFECT_API_URL`` names a
    server that is not our embedded one (``embedded``: whether we started one; default: read
    from the environment)."""
    if runner == "local":
        return
    if embedded is None:
        embedded = bool(os.environ.get("ASSAY_EMBEDDED_API"))
    if not os.environ.get("PREFECT_API_URL") or embedded:
        raise OrchestrationError(
            f"execution.runner: {runner} needs a real Prefect server reachable by every worker "
            "(without one each worker process starts its own temporary server, 20-30 s each). "
            "Start one with `prefect server start --host 127.0.0.1`, set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api, and run again; or use runner: local."
        )


def flush_prefect_logs() -> None:
    """Send Prefect's buffered log records to its server (bounded by Prefect's own timeouts):
    a process leaving with ``os._exit`` would otherwise drop the run's last records."""
    with contextlib.suppress(Exception):
        from prefect.logging.handlers import APILogHandler

        APILogHandler().flush()  # drains every queued record (5 s at most)
