"""Slots that hold across every process of a cluster: a model server's ``max_connections`` as a
``distributed.Semaphore`` on a Dask scheduler, or a named detached actor on a Ray cluster,
taken around each request on a worker.

Outside a Dask worker or a Ray process there is no cluster and no slot (the process's own budget
is the limit), and neither library is imported: a local run never pays for it.

Example:
    >>> cluster_semaphore("http://127.0.0.1:1/v1", 4) is None  # not on a Dask worker or Ray
    True
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import time
import uuid
from typing import Any, Protocol


class Slots(Protocol):
    """A cluster-wide semaphore as the requests use it (a Dask ``Semaphore`` or a
    :class:`RaySemaphore`): ``acquire`` blocks until a lease is granted."""

    def acquire(self) -> object: ...

    def release(self) -> object: ...


_SEMAPHORES: dict[tuple[str, str], Slots] = {}
_LOCK = threading.Lock()
#: the semaphore's calls block (a round trip to the scheduler, or a wait for a lease): they run
#: here, off the event loops of the requests
_CALLS = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="assay-cluster-slot")
#: the Ray namespace of assay's slot actors (one per model server, shared by every job)
RAY_NAMESPACE = "assay"


def cluster_semaphore(server: str, max_connections: int,
                      lease_s: float | None = None) -> Slots | None:
    """The cluster-wide connection semaphore of ``server`` when this runs on a Dask worker or
    in a process of a Ray cluster, else None. One per server and process; the first to create
    it sets its ``max_connections`` (every shard of one study asks with the same).
    ``lease_s``: how long one request can hold a slot at most (its timeout): on Ray, a slot
    held longer was left by a dead worker and is taken back."""
    if "distributed" in sys.modules:  # a Dask worker has it imported: a local run never
        sem = _dask_semaphore(server, max_connections)  # pays for importing it
        if sem is not None:
            return sem
    if "ray" in sys.modules:  # likewise: a Ray worker (or a Ray driver) has imported it
        return _ray_semaphore(server, max_connections, lease_s)
    return None


def _dask_semaphore(server: str, max_connections: int) -> Slots | None:
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


class RaySlots:
    """The state of one Ray slot actor: at most ``limit`` leases, each dropped when released or
    once older than the ``lease_s`` it was taken with (by this actor's clock alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.leases: dict[str, float] = {}  # lease id -> when it lapses (monotonic)
        self.freed: asyncio.Event | None = None
        self.most = 0  # the most leases held at once (for tests and diagnostics)

    def _expire(self) -> None:
        now = time.monotonic()
        for lid in [k for k, until in self.leases.items() if until <= now]:
            del self.leases[lid]

    async def acquire(self, lease_id: str, lease_s: float | None) -> None:
        while True:
            self._expire()
            if len(self.leases) < self.limit:
                self.leases[lease_id] = time.monotonic() + (lease_s or float("inf"))
                self.most = max(self.most, len(self.leases))
                return
            if self.freed is None or self.freed.is_set():
                self.freed = asyncio.Event()
            # a release sets it; the timeout lets a lapsed lease free a slot too
            try:
                await asyncio.wait_for(self.freed.wait(), timeout=1.0)
            except TimeoutError:
                pass

    def release(self, lease_id: str) -> None:
        self.leases.pop(lease_id, None)
        if self.freed is not None:
            self.freed.set()

    def stats(self) -> dict[str, int]:
        return {"limit": self.limit, "held": len(self.leases), "most": self.most}


class RaySemaphore:
    """A process's handle on a Ray slot actor, with a semaphore's blocking ``acquire`` and
    ``release`` (leases are interchangeable within the process)."""

    def __init__(self, actor: Any, lease_s: float | None) -> None:
        self.actor = actor
        self.lease_s = lease_s
        self._held: list[str] = []
        self._lock = threading.Lock()

    def acquire(self) -> None:
        import ray

        lid = uuid.uuid4().hex
        ray.get(self.actor.acquire.remote(lid, self.lease_s))
        with self._lock:
            self._held.append(lid)

    def release(self) -> None:
        import ray

        with self._lock:
            if not self._held:
                return
            lid = self._held.pop()
        ray.get(self.actor.release.remote(lid))


def ray_slot_actor(name: str, limit: int) -> Any:
    """The named detached slot actor ``name`` of this Ray cluster (created with ``limit`` slots
    by the first process to ask): outlives the job, so every worker of every study shares it."""
    import ray

    cls = ray.remote(num_cpus=0)(RaySlots)
    return cls.options(name=name, namespace=RAY_NAMESPACE, lifetime="detached",
                       get_if_exists=True).remote(limit)


def _ray_semaphore(server: str, max_connections: int, lease_s: float | None) -> Slots | None:
    # Read from sys.modules, never imported here: a Ray worker has Ray imported before any
    # task runs, while a process that merely has some thread importing Ray right now would
    # get a half-initialised module from an import on this thread (the import system hands
    # one out to break a lock cycle between threads); neither is a Ray cluster's process.
    is_initialized = getattr(sys.modules.get("ray"), "is_initialized", None)
    if is_initialized is None or not is_initialized():
        return None
    key = ("ray", server)
    with _LOCK:
        sem = _SEMAPHORES.get(key)
        if sem is None:
            sem = RaySemaphore(ray_slot_actor(f"assay-connections:{server}", max_connections),
                               lease_s)
            _SEMAPHORES[key] = sem
        return sem


async def take(sem: Slots) -> None:
    """Acquire a lease without blocking the event loop. Cancelled while waiting, the lease
    granted afterwards is given back, so a stopped request never keeps one."""
    cf = _CALLS.submit(sem.acquire)
    try:
        await asyncio.wrap_future(cf)
    except BaseException:
        cf.add_done_callback(
            lambda f: None if f.cancelled() or f.exception() is not None else sem.release())
        raise


async def give(sem: Slots) -> None:
    """Release a lease without blocking the event loop."""
    await asyncio.shield(asyncio.wrap_future(_CALLS.submit(sem.release)))
