"""Benchmark: `assay run` against `inspect eval` (inspect_ai) end to end on one loopback server.

Run: ``.venv/bin/python benchmarks/race_inspect.py [--inspect /tmp/inspect-venv/bin/inspect]
[--prompts 200] [--k 4] [--repeats 3] [--scenario clean|429|storm|cached]`` (inspect_ai lives
in its own venv: its pins differ).

Scenarios: ``clean`` (no faults); ``429`` (each request's first attempt is a 429 with
Retry-After 1); ``storm`` (its first two attempts refused: a 429, then a 503); ``cached``
(a second run over the first one's cache: assay's store, inspect's ``--cache``; the timed run
must send no request).

One OpenAI-protocol server (tests/helpers/openai_server.py, in this process, 50 ms per answer)
serves both sides the same prompts (``What is a + b?``), k samples each (inspect: ``epochs``),
16 connections, explicit temperature/top_p/max_tokens/seed. assay: a warm folder (its
``.prefect`` exists), a fresh store each repeat, numeric grading, no page. inspect: the
``openai-api`` provider, ``includes()`` scorer, sample logging off, no display. Repeats
alternate sides. Per side: wall (process start to exit), time to first request and the
server's busy span (first request's arrival to the last answer's); medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from helpers.openai_server import Fault, OpenAIServer  # noqa: E402
from startup import assay_env, write_study  # noqa: E402

TASK = '''
import json
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

@task
def sums():
    recs = [json.loads(line) for line in open("p.jsonl")]
    return Task(dataset=MemoryDataset([Sample(input=r["q"], target=r["gold"], id=r["id"])
                                       for r in recs]),
                solver=[generate()], scorer=includes(), epochs={k})
'''

LATENCY = 0.05


def faults(scenario: str) -> Callable[[int, dict[str, Any]], Fault | None] | None:
    """The server's scripted refusals for a scenario, by how many times it has seen the same
    request body (the same rule for both sides): ``429`` refuses each body's first attempt
    (Retry-After 1), ``storm`` its first two (a 429, then a 503)."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def nth(body: dict[str, Any]) -> int:
        key = json.dumps(body, sort_keys=True)
        with lock:
            seen[key] = seen.get(key, 0) + 1
            return seen[key]

    if scenario == "429":
        return lambda n, body: Fault(429, retry_after="1") if nth(body) % 2 == 1 else None
    if scenario == "storm":
        def storm(n: int, body: dict[str, Any]) -> Fault | None:
            i = nth(body) % 3
            return Fault(429, retry_after="1") if i == 1 else Fault(503) if i == 2 else None
        return storm
    return None


def _side(srv: OpenAIServer, cmd: list[str], cwd: Path, env: dict[str, str],
          want: int | None) -> tuple[float, float, float]:
    """(wall, seconds to the first request, server busy span) of one process, which must have
    sent ``want`` requests (each sample asked once: nothing failed, nothing cached; 0: served
    from its cache; None: retries make the count the server's business)."""
    n0 = srv.count()
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    got = srv.requests[n0:]
    if p.returncode != 0 or (want is not None and len(got) != want):
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}, {len(got)} of {want} requests):"
                           f"\n{p.stderr[-3000:]}{p.stdout[-2000:]}")
    if not got:
        return wall, float("nan"), 0.0
    return wall, got[0]["_t"] - t0, got[-1]["_t"] + LATENCY - got[0]["_t"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inspect", default="/tmp/inspect-venv/bin/inspect")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scenario", choices=["clean", "429", "storm", "cached"], default="clean")
    a = ap.parse_args()
    srv = OpenAIServer(latency=LATENCY).start()
    base = Path(tempfile.mkdtemp(prefix="assay-race-"))
    try:
        folder = base / "assay"
        write_study(folder, srv.base_url, a.prompts, 1, a.k)
        store = folder / "store"
        assay_cmd = [str(Path(sys.executable).parent / "assay"), "run", "study.yaml",
                     "--no-view", "--store", str(store), "--output", str(folder / "out")]
        ins = base / "inspect"
        ins.mkdir()
        shutil.copy(folder / "p.jsonl", ins / "p.jsonl")
        (ins / "task.py").write_text(TASK.format(k=a.k))
        ins_env = {**{k: v for k, v in os.environ.items() if not k.startswith("INSPECT_")},
                   "LOOP_BASE_URL": srv.base_url, "LOOP_API_KEY": "unused",
                   "INSPECT_CACHE_DIR": str(ins / "cache")}
        ins_cmd = [a.inspect, "eval", "task.py", "--model", "openai-api/loop/tiny-ckpt",
                   "--max-connections", "16", "--temperature", "0.7", "--top-p", "0.95",
                   "--max-tokens", "64", "--seed", "0", "--no-log-samples", "--display", "none",
                   "--log-dir", str(ins / "logs")] + (["--cache"] if a.scenario == "cached" else [])
        n = a.prompts * a.k
        cached = a.scenario == "cached"
        want = 0 if cached else n if a.scenario == "clean" else None
        shutil.rmtree(store, ignore_errors=True)
        _side(srv, assay_cmd, folder, assay_env(), n)  # warm-up: .prefect exists from here on
        sides: dict[str, list[tuple[float, float, float]]] = {"assay": [], "inspect_ai": []}
        for r in range(a.repeats):
            order = ["assay", "inspect_ai"] if r % 2 == 0 else ["inspect_ai", "assay"]
            for side in order:
                if side == "assay":
                    shutil.rmtree(store, ignore_errors=True)  # every completion asked again
                    if cached:  # fill the store, then time the rerun
                        _side(srv, assay_cmd, folder, assay_env(), n)
                    srv.faults = faults(a.scenario) or []
                    sides[side].append(_side(srv, assay_cmd, folder, assay_env(), want))
                else:
                    shutil.rmtree(ins / "logs", ignore_errors=True)
                    shutil.rmtree(ins / "cache", ignore_errors=True)
                    if cached:
                        _side(srv, ins_cmd, ins, ins_env, n)
                    srv.faults = faults(a.scenario) or []
                    sides[side].append(_side(srv, ins_cmd, ins, ins_env, want))
                srv.faults = []
        print(f"{a.scenario}: {a.prompts} prompts x {a.k} samples, 16 connections, "
              f"{LATENCY * 1000:.0f} ms per answer, {a.repeats} alternated repeats "
              f"(load average {os.getloadavg()[0]:.1f})")
        med = {}
        for side, got in sides.items():
            wall, ttfr, busy = (statistics.median(x[i] for x in got) for i in range(3))
            med[side] = wall
            print(f"{side:>10}: wall {wall:.2f} s (all: {', '.join(f'{x[0]:.2f}' for x in got)}),"
                  f" first request {ttfr:.2f} s, server busy {busy:.2f} s")
        print(f"inspect_ai / assay wall: {med['inspect_ai'] / med['assay']:.2f}x")
    finally:
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
