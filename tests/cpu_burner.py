"""Run a command while busy processes keep every core loaded (``make test-stress``).

    python tests/cpu_burner.py [--burners N] [--runs R] -- COMMAND...

Runs COMMAND R times in a row (stopping at the first failure) with N spinning processes
(default: one per usable core) at the same priority; exits with the command's status. The
burners are stopped however this ends (they watch their parent and exit with it too).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time


def _burn(parent: int) -> None:  # in a burner: spin, checking now and then that we are wanted
    n = 0
    while True:
        n += 1
        if n % 2_000_000 == 0 and os.getppid() != parent:
            os._exit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burners", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command after --")
    me = os.getpid()
    burners = []
    for _ in range(args.burners):
        pid = os.fork()
        if pid == 0:
            _burn(me)
        burners.append(pid)
    rc = 0
    try:
        for i in range(args.runs):
            t0 = time.monotonic()
            rc = subprocess.call(cmd)
            print(f"[stress] run {i + 1}/{args.runs} under {args.burners} burner(s): rc {rc} "
                  f"in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
            if rc != 0:
                break
    finally:
        for pid in burners:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    return rc


if __name__ == "__main__":
    sys.exit(main())
