"""A server's connection budget serves the call that started first: shards sharing a server
finish one after another (so grading can start on the first), with no slot left idle."""
from __future__ import annotations

import asyncio

from assay.models.openai import ServerBudget


def test_a_freed_slot_goes_to_the_earliest_call_not_the_oldest_waiter() -> None:
    async def scenario() -> list[str]:
        b = ServerBudget("http://127.0.0.1:1/v1")
        first, second = b.start(1), b.start(1)
        assert first < second
        await b.acquire(1, first)  # the one slot is taken
        got: list[str] = []

        async def wait(name: str, rank: int) -> None:
            await b.acquire(1, rank)
            got.append(name)

        late = asyncio.create_task(wait("second call", second))  # queued first
        await asyncio.sleep(0)
        early = asyncio.create_task(wait("first call", first))  # queued after it
        await asyncio.sleep(0)
        assert got == [] and b.in_flight == 1
        b.done(sent_at=None, status=200)  # one slot frees: the earlier call takes it
        await asyncio.wait_for(early, 10)
        assert got == ["first call"] and not late.done()
        b.done(sent_at=None, status=200)  # the next one goes to the later call
        await asyncio.wait_for(late, 10)
        assert got == ["first call", "second call"] and b.in_flight == 1
        return got

    asyncio.run(scenario())


def test_a_later_call_takes_a_free_slot_at_once() -> None:
    # work-conserving: with room, nobody waits because an earlier call exists
    async def scenario() -> None:
        b = ServerBudget("http://127.0.0.1:1/v1")
        b.start(2)
        second = b.start(2)
        await asyncio.wait_for(b.acquire(2, second), 10)
        assert b.in_flight == 1

    asyncio.run(scenario())
