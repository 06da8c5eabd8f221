"""Leave no process behind: stop what this process started (its descendants) before it exits;
and name a process by tags a later start can check (:func:`process_gone`), so the flow runs of a
SIGKILLed run are found and marked Crashed (``assay.flows.crashed``).

Used on the ways out that skip normal teardown: SIGTERM, a deadline's hard exit, ``os._exit``.

Each kind of child also dies by itself when we are SIGKILLed (nothing runs here then): the
embedded server by PR_SET_PDEATHSIG, grading workers and sandbox servers by watching their
parent pid (:func:`watch_parent`), a sandboxed candidate with its server.

Example:
    >>> import subprocess, sys
    >>> p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    >>> p.pid in [c.pid for c in descendants()]
    True
    >>> kill_descendants(grace_s=2.0, only=[p.pid]), p.pid in [c.pid for c in descendants()]
    (1, False)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def descendants() -> list[psutil.Process]:

    """Every live process below this one (psutil.Process objects), deepest last."""
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def kill_descendants(grace_s: float = 1.0, only: list[int] | None = None) -> int:
    """SIGTERM every descendant (a sandbox server then kills its running candidate, whose
    process group or PID namespace holds all it started), SIGKILL what is left after
    ``grace_s``, and the process groups of those that lead one. Returns how many were
    signalled (``only``: just these pids among them). Bounded: ``grace_s`` plus one second."""
    import psutil

    procs = [p for p in descendants() if only is None or p.pid in only]
    leaders = []
    for p in procs:
        with contextlib.suppress(psutil.Error, OSError):  # it may be gone already
            if os.getpgid(p.pid) == p.pid:
                leaders.append(p.pid)
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error, OSError):
            p.kill()
    for pgid in leaders:  # what a killed group leader left in its group
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=1.0)
    return len(procs)


def watch_parent(interval_s: float = 0.25) -> threading.Thread:
    """In a child process: a daemon thread that exits the process (``os._exit(1)``) as soon
    as its parent is gone (it was re-parented), so a SIGKILLed ``assay`` leaves no worker.

    Not PR_SET_PDEATHSIG: that fires when the parent *thread* that forked us exits, and
    workers outlive the task-runner thread that started them.

    The parent is the one that started us (multiprocessing records its pid before the fork), not
    ``os.getppid()`` now: a parent killed between the fork and this call would otherwise be
    taken for the process we were re-parented to, and never missed."""
    import multiprocessing

    started_by = multiprocessing.parent_process()
    parent = started_by.pid if started_by is not None else os.getppid()
    if parent is not None and os.getppid() != parent:
        os._exit(1)

    def loop() -> None:
        ev = threading.Event()
        while not ev.wait(interval_s):  # the bound: a check every interval_s
            if os.getppid() != parent:
                os._exit(1)

    t = threading.Thread(target=loop, name="assay-watch-parent", daemon=True)
    t.start()
    return t


#: Tag prefixes a flow run carries so a later start can tell whether its process still lives:
#: the machine (hostname and PID namespace: a container sharing the hostname is another
#: machine here) and the process (pid and start time: a reused pid is another process).
HOST_TAG, PROC_TAG = "assay-host:", "assay-proc:"


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


def host_tag() -> str:
    """This machine's tag (:data:`HOST_TAG`): only runs with it are judged here."""
    import socket

    return f"{HOST_TAG}{socket.gethostname()}/{_pid_namespace()}"


def process_tag(pid: int | None = None) -> str:
    """The tag naming process ``pid`` (default this one) by pid and start time.

    Example:
        >>> process_tag().startswith("assay-proc:"), process_gone(process_tag())
        (True, False)
    """
    import psutil

    p = psutil.Process(pid)
    return f"{PROC_TAG}{p.pid}@{p.create_time():.2f}"


def process_gone(tag: str) -> bool:
    """Whether the process a :func:`process_tag` names (on this machine) is no longer running:
    its pid is free, or taken by a process started at another time. A malformed tag is not
    judged (False): a run is only ever marked Crashed on evidence.

    Example:
        >>> process_gone("assay-proc:999999999@1.00"), process_gone("assay-proc:junk")
        (True, False)
    """
    import psutil

    try:
        pid_text, started = tag.removeprefix(PROC_TAG).split("@")
        pid, t0 = int(pid_text), float(started)
    except ValueError:
        return False
    try:
        p = psutil.Process(pid)
        return p.status() == psutil.STATUS_ZOMBIE or abs(p.create_time() - t0) > 0.011
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


__all__ = ["HOST_TAG", "PROC_TAG", "descendants", "host_tag", "kill_descendants",
           "process_gone", "process_tag", "watch_parent"]
