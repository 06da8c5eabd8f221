"""Leases on a real S3 server (SeaweedFS) are judged by the server's clock: a study whose
machine's clock is ten minutes slow still holds off gc, and one whose clock is ten minutes fast
stops blocking gc once its lease lapses after its holder died."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from assay import upkeep
from assay.errors import StoreError
from assay.store import Store
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]


def _holder(url: str, skew: float) -> subprocess.Popen[str]:
    """A process holding ``in_use`` on ``url`` whose own clock is ``skew`` seconds off (every
    ``time.time`` in it; the S3 client signs with the real one, as a server accepts only
    requests within minutes of its own time)."""
    code = textwrap.dedent(f"""
        import time
        real = time.time
        time.time = lambda: real() + {skew!r}
        from assay.store import Store
        with Store({url!r}).in_use():
            print("held", flush=True)
            time.sleep(120)
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ASSAY_STORE_LEASE_S": "4"}
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=env, start_new_session=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def _kill(p: subprocess.Popen[str]) -> None:
    os.killpg(p.pid, signal.SIGKILL)  # dies without releasing its lease
    p.wait()


def test_a_slow_clock_still_holds_its_lease(s3: S3Server,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import assay.store

    monkeypatch.setattr(assay.store, "LEASE_S", 4.0)
    url = s3.url("slow-clock")
    st = Store(url)
    key = st.put_json({"in": "use"})
    holder = _holder(url, -600.0)  # its clock says its lease ended ten minutes ago
    try:
        live = st.live_leases("study")
        assert len(live) == 1 and 0 < live[0]["left"] <= 4
        with pytest.raises(StoreError, match="locked by a running study"):
            upkeep.gc(st, [], older_than_days=1, grace=0, wait=6)  # renewed past a lease length
        assert st.has(key)
    finally:
        _kill(holder)


def test_a_fast_clock_does_not_block_gc_after_its_holder_died(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    import assay.store

    monkeypatch.setattr(assay.store, "LEASE_S", 4.0)
    url = s3.url("fast-clock")
    st = Store(url)
    key = st.put_json({"in": "use"})
    _kill(_holder(url, 600.0))  # its clock says its lease lasts ten more minutes
    # the server's clock says it lapses 4 s after its last write: gc runs (bounded wait)
    res = upkeep.gc(st, [], older_than_days=1, grace=0, wait=30)
    assert res.removed_blobs == 1 and not st.has(key)
    assert st.live_leases() == []
