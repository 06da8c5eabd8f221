"""Slots that hold across every process of a Dask cluster: a model server's ``max_connections``
as a ``distributed.Semaphore`` on the scheduler, taken around each request on a worker.

Outside a Dask worker there is no cluster and no slot (the process's own budget is the limit).

Example:
    >>> cluster_semaphore("http://127.0.0.1:1/v1", 4) is None  # not on a Dask worker
    True
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from typing import Any

_SEMAPHORES: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()
#: the semaphore's calls block (a round trip to the scheduler, or a wait for a lease): they run
#: here, off the event loops of the requests
_CALLS = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="assay-cluster-slot")


def cluster_semaphore(server: str, max_connections: int) -> Any | None:
    """The cluster-wide connection semaphore of ``server`` when this runs on a Dask worker,
    else None. One per server and worker process; the first to register it on the scheduler
    sets its ``max_connections`` (every shard of one study asks with the same)."""
    if "distributed" not in sys.modules:  # not a Dask worker (which has it imported): a local
        return None  # run never pays for importing it before its first request
    from distributed import Semaphore, get_worker

    try:
        worker = get_worker()
    except ValueError:
        return None
    key = (str(worker.id), server)
    with _LOCK:
        sem = _SEMAPHORES.get(key)
        if sem is None:
            sem = Semaphore(max_leases=max_connections, name=f"assay-connections:{server}",
                            scheduler_rpc=worker.scheduler, loop=worker.loop)
            _SEMAPHORES[key] = sem
        return sem


async def take(sem: Any) -> None:
    """Acquire a lease without blocking the event loop. Cancelled while waiting, the lease
    granted afterwards is given back, so a stopped request never keeps one."""
    cf = _CALLS.submit(sem.acquire)
    try:
        await asyncio.wrap_future(cf)
    except BaseException:
        cf.add_done_callback(
            lambda f: None if f.cancelled() or f.exception() is not None else sem.release())
        raise


async def give(sem: Any) -> None:
    """Release a lease without blocking the event loop."""
    await asyncio.shield(asyncio.wrap_future(_CALLS.submit(sem.release)))
