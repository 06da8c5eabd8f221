"""The server budget's hand-over of a freed slot (issue 50): CPU per request with W parked
waiters (8 shards' calls sharing one server, their lanes queued), ServerBudget as it is vs the
naive rule it replaces (sort every parked waiter and walk them all after each answer).

Each request: acquire a slot, yield to the loop, give it back (an answer); the waiters' lanes
loop until N requests are done. CPU is ``time.process_time()``; medians of ``--repeats``, the
two alternated in one process. Both grant in the same order (tests/models/test_budget_order.py).

Run: ``.venv/bin/python benchmarks/budget_grant.py [--waiters 64 256] [--requests 20000]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from assay.models.openai import ServerBudget


class NaiveBudget(ServerBudget):
    """The same budget, handing slots over by sorting every parked waiter per answer."""

    def _grant(self) -> None:
        for w in sorted(self._waiters, key=lambda w: w.order()):
            if self.in_flight >= self.allowed(w.cap):
                continue
            self._waiters.remove(w)
            self.in_flight += 1
            w.loop.call_soon_threadsafe(self._deliver, w.fut)


async def _per_request(budget: ServerBudget, waiters: int, requests: int) -> float:
    ranks = [budget.start(32) for _ in range(8)]
    while budget.in_flight < 32:
        await budget.acquire(32, ranks[0])
    each = requests // waiters + 1

    async def lane(rank: int) -> None:
        for _ in range(each):
            await budget.acquire(32, rank)
            await asyncio.sleep(0)
            budget.done(sent_at=None, status=200)

    t = time.process_time()
    lanes = [asyncio.create_task(lane(ranks[i % 8])) for i in range(waiters)]
    for _ in range(32):
        budget.done(sent_at=None, status=200)
    await asyncio.gather(*lanes)
    return (time.process_time() - t) / (waiters * each) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--waiters", type=int, nargs="*", default=[64, 256])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print("| parked waiters | naive (sort + walk) | ServerBudget | ratio |")
    print("|---|---|---|---|")
    for w in a.waiters:
        naive, now = [], []
        for _ in range(a.repeats):
            naive.append(asyncio.run(_per_request(NaiveBudget("http://x/v1"), w, a.requests)))
            now.append(asyncio.run(_per_request(ServerBudget("http://x/v1"), w, a.requests)))
        n, m = statistics.median(naive), statistics.median(now)
        print(f"| {w} | {n:.1f} us/request | {m:.1f} us/request | {n / m:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
