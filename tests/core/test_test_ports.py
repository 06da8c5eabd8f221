"""The ports test servers are started on lie outside the kernel's ephemeral range (where an
outgoing connection could be holding one) and are free when handed out."""

from __future__ import annotations

import socket

from tests.helpers.ports import _ephemeral_low, free_ports


def test_ports_are_below_the_ephemeral_range_distinct_and_free() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(10_000 <= p < _ephemeral_low() for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_never_handed_out(monkeypatch) -> None:
    from tests.helpers import ports as mod

    taken = []
    try:
        for p in mod._slice():  # hold every port of this worker's slice but one
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                s.close()
                continue
            taken.append(s)
        last = taken.pop()
        port = last.getsockname()[1]
        last.close()
        assert free_ports(1) == [port]
    finally:
        for s in taken:
            s.close()
