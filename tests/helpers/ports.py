"""Ports for servers a test starts as a child process (which must be told a port to bind).

A port got by binding port 0 comes from the kernel's ephemeral range, the range every outgoing
connection also takes its local port from: released and bound by the child a moment later, it
can already be some connection's ("address already in use"). These are chosen below that range,
where no connection is handed a port, in a slice of their own for each pytest-xdist worker.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_FLOOR = 10_000
_WORKERS = 32  # slices; more xdist workers than this share slices (still checked free)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _WORKERS if worker.isdigit() else 0
    width = max(64, (_ephemeral_low() - _FLOOR) // _WORKERS)
    start = _FLOOR + index * width
    return range(start, start + width)


_rng = random.Random(os.getpid())


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports on 127.0.0.1, free just now and outside the ephemeral range."""
    candidates = list(_slice())
    _rng.shuffle(candidates)
    chosen: list[int] = []
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == n:
            return chosen
    raise RuntimeError(f"no {n} free ports in {_slice()}")


def free_port() -> int:
    """One port as :func:`free_ports` chooses them."""
    return free_ports(1)[0]
