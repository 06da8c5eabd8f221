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


def _reference_grants(parked: list[tuple[int, int, int]], in_flight: int, limit: int,
                      frees: int) -> list[int]:
    """Brute force: after each freed slot, every parked waiter visited in (rank, arrival)
    order and granted when its own cap has room (the rule as first written: a sort and a walk
    over all of them per answer). ``parked``: (arrival, rank, cap). Returns arrivals granted."""
    waiting, got = list(parked), []
    for _ in range(frees):
        in_flight -= 1
        for arrival, rank, cap in sorted(waiting, key=lambda p: (p[1], p[0])):
            if in_flight < max(1, min(cap, limit)):
                waiting.remove((arrival, rank, cap))
                in_flight += 1
                got.append(arrival)
    return got


def test_grants_follow_the_rule_for_mixed_caps_and_ranks() -> None:
    import random

    rng = random.Random(7)
    for trial in range(30):
        caps = [rng.choice([1, 2, 3, 5, 8]) for _ in range(rng.randint(2, 5))]

        async def scenario(caps: list[int] = caps) -> tuple[list[int], list[tuple[int, int, int]],
                                                           int, int]:
            b = ServerBudget("http://127.0.0.1:1/v1")
            ranks = [b.start(c) for c in caps]
            limit = int(b.limit)
            while b.in_flight < limit:  # every slot taken
                await b.acquire(max(caps), ranks[0])
            start = b.in_flight
            got: list[int] = []
            parked: list[tuple[int, int, int]] = []

            async def wait(arrival: int, rank: int, cap: int) -> None:
                await b.acquire(cap, rank)
                got.append(arrival)

            tasks = []
            for arrival in range(rng.randint(5, 25)):
                who = rng.randrange(len(caps))
                parked.append((arrival, ranks[who], caps[who]))
                tasks.append(asyncio.create_task(wait(arrival, ranks[who], caps[who])))
                await asyncio.sleep(0)
            for _ in range(len(parked)):
                b.done(sent_at=None, status=None)  # a slot frees, nothing learnt
                for _ in range(3):
                    await asyncio.sleep(0)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return got, parked, start, limit

        got, parked, start, limit = asyncio.run(scenario())
        want = _reference_grants(parked, start, limit, len(parked))
        assert got == want, (trial, caps)
