"""The Ray slot actor's state on its own (no Ray): at most ``limit`` leases, a release wakes a
waiter, and a lease older than its ``lease_s`` (left by a dead worker) frees its slot."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from assay.cluster_slots import RaySlots


def test_limit_release_and_a_lapsed_lease() -> None:
    async def main() -> None:
        s = RaySlots(2)
        await s.acquire("a", None)
        await s.acquire("b", 0.5)  # its holder "dies": never released
        third = asyncio.ensure_future(s.acquire("c", None))
        await asyncio.sleep(0.1)
        assert not third.done() and s.stats()["held"] == 2
        s.release("a")
        await asyncio.wait_for(third, 5)  # a release lets the waiter in
        fourth = asyncio.ensure_future(s.acquire("d", None))
        await asyncio.wait_for(fourth, 10)  # b lapses (bounded wait): its slot comes back
        assert set(s.leases) == {"c", "d"} and s.stats()["most"] == 2

    asyncio.run(main())


def test_a_local_run_imports_neither_library() -> None:
    code = ("import sys, assay.models.openai; from assay.cluster_slots import cluster_semaphore;"
            "assert cluster_semaphore('http://127.0.0.1:1/v1', 4) is None;"
            "print('ray' in sys.modules, 'distributed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["False", "False"]
