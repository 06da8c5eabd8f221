"""Benchmark: generation throughput of assay.generate vs the naive ways, medians of repeats.

Run: ``.venv/bin/python benchmarks/generation.py [--prompts 128] [--repeats 3]``.

1. ``openai``: an OpenAI-protocol server on 127.0.0.1 (tests/helpers/openai_server.py, its own
   process) answering after 50 ms. Baseline: a sequential client, one request at a time (the
   lm-eval ``local-completions`` default), sending byte-for-byte the same request bodies. Ours:
   ``assay.generate(max_connections=16)`` into a fresh store. Checks identical completions.
2. ``hf`` on CPU: a random 4-layer Llama (hidden 256) built in a temp dir, prompts of 4 to 250
   words, greedy at fp32, 16 new tokens. Baseline: the same decode loop in fixed batches of 8 in
   input order. Ours: sorted token-budget batches. Checks identical greedy outputs.

3. ``openai`` under faults: a second server fails 10% of first attempts with 429 and 5% with
   500 (no Retry-After, so backoff applies); assay's time next to its fault-free time (goal:
   within 1.5x). Retries wait in a heap, not on a lane, so the other lanes keep sending.
4. ``recovery``: every request answered 429 (Retry-After 1) for 2 s, then accepted; seconds
   until 16 requests are in flight again at the server.

Prints seconds per side (median of repeats), throughput and the ratio baseline / ours.

Measured 2026-12-02 (load average 18-20 from other jobs), 256 prompts, 5 repeats: sequential
15.42 s, assay 2.09 s fault-free (7.4x), 2.56 s with 10% 429 + 5% 500 (1.22x the fault-free
time; 30-45 retries per run, every sample answered); recovery to 16 in flight 0.43 s after the
429 burst (median of 3).

Measured 2026-12-01 on the shared 2-core CPU box (load average 7-11 from other jobs), 128
prompts: openai 7.29 s sequential vs 0.76 s (9.6x, 5 repeats), identical completions; hf 51.6 s
fixed-8 vs 13.5 s sorted token-budget (3.8x, 3 repeats, 2 batches), identical greedy outputs. On
GPU: not measured; the device tool lent this task no GPU (run ``--only hf`` on one to get tok/s).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from assay.models import generate  # noqa: E402
from assay.models.base import Request, to_messages  # noqa: E402
from assay.models.journal import sample_seed  # noqa: E402
from assay.models.openai import OpenAIBackend  # noqa: E402
from assay.models.specs import SamplingParams  # noqa: E402
from assay.store import Store  # noqa: E402


def start_server(latency: float,
                 faults: tuple[float, float] | None = None) -> tuple[subprocess.Popen, str]:
    port_file = Path(tempfile.mkdtemp()) / "url"
    extra = [str(f) for f in faults] if faults else []
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "helpers" / "openai_server.py"),
                             str(port_file), str(latency), *extra])
    for _ in range(200):
        if port_file.exists() and port_file.read_text():
            return proc, port_file.read_text()
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the benchmark server did not start")


def sequential(url: str, prompts: list[str], params: dict, seed: int) -> list[str]:
    """One request at a time, the same bodies assay sends."""
    backend = OpenAIBackend({"kind": "openai", "base_url": url, "model": "tiny-ckpt"})
    sp = SamplingParams(**params)
    out = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for i, p in enumerate(prompts):
            rendered = to_messages(p)
            body = backend.body(Request("", i, 0, sample_seed(seed, rendered, 0), rendered), sp,
                                "chat")
            out.append(client.post("/chat/completions", json=body)
                       .json()["choices"][0]["message"]["content"])
    return out


def bench_openai(n: int, repeats: int) -> float:
    """Sequential, assay fault-free, and assay against a server failing 10% of first attempts
    with 429 and 5% with 500 (no Retry-After: backoff applies), each on a fresh store."""
    proc, url = start_server(0.05)
    bad, bad_url = start_server(0.05, (0.10, 0.05))
    try:
        prompts = [f"What is {i} + {i * 3}?" for i in range(n)]
        params = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 64}
        seq_t, ours_t, faulty_t, retries = [], [], [], []
        for rep in range(repeats):
            t = time.perf_counter()
            seq = sequential(url, prompts, params, 0)
            seq_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            g = generate(prompts, {"kind": "openai", "base_url": url, "model": "tiny-ckpt"},
                         params=params, max_connections=16, store=Store(tempfile.mkdtemp()))
            ours_t.append(time.perf_counter() - t)
            assert [c[0] for c in g.completions] == seq, "completions differ"
            # a fresh seed per repeat: the server fails first attempts only, per (prompt, seed)
            t = time.perf_counter()
            f = generate(prompts, {"kind": "openai", "base_url": bad_url, "model": "tiny-ckpt"},
                         params=params, seed=rep, max_connections=16,
                         store=Store(tempfile.mkdtemp()))
            faulty_t.append(time.perf_counter() - t)
            assert not f.errors, "a faulty run left failed samples"
            retries.append(f.stats["retries"])
        s, o, fo = statistics.median(seq_t), statistics.median(ours_t), statistics.median(faulty_t)
        print(f"openai  {n} prompts, 50 ms/request: sequential {s:.2f}s ({n / s:.1f} req/s), "
              f"assay max_connections=16 {o:.2f}s ({n / o:.1f} req/s); ratio {s / o:.1f}x; "
              "completions identical")
        print(f"openai  with 10% 429 + 5% 500 on first attempts: assay {fo:.2f}s "
              f"({n / fo:.1f} req/s), "
              f"{fo / o:.2f}x the fault-free time (goal <= 1.5x), {s / fo:.1f}x faster than "
              f"sequential fault-free; retries per run {retries}; medians of {repeats}")
        return s / o
    finally:
        for p in (proc, bad):
            p.kill()
            p.wait()


def bench_recovery(repeats: int) -> float:
    """A burst: every request is answered 429 (Retry-After: 1) for the first 2 s, then the
    server accepts (50 ms per answer). Seconds from the end of the burst until 16 requests are
    in flight at the server again (an in-process server, which watches its own count)."""
    import threading

    from helpers.openai_server import Fault, OpenAIServer

    times = []
    for rep in range(repeats):
        srv = OpenAIServer(latency=0.05).start()
        t_end: list[float] = []
        back: list[float] = []
        lock = threading.Lock()

        def faults(n, body, srv=srv, t_end=t_end, back=back, lock=lock):
            now = time.monotonic()
            with lock:
                if not t_end:
                    t_end.append(now + 2.0)
                if now < t_end[0]:
                    return Fault(429, retry_after="1", message="rate limited")
                if not back and srv.in_flight >= 16:
                    back.append(now - t_end[0])
            return None

        srv.faults = faults
        try:
            generate([f"What is {i} + 1?" for i in range(600)],
                     {"kind": "openai", "base_url": srv.base_url, "model": "tiny-ckpt",
                      "max_retries": 20}, params={"max_tokens": 8}, seed=rep,
                     max_connections=16, store=Store(tempfile.mkdtemp()))
        finally:
            srv.stop()
        times.append(back[0] if back else float("inf"))
    m = statistics.median(times)
    print(f"recovery: after 2 s of 429s (Retry-After 1), 16 requests in flight again {m:.2f}s "
          "after "
          f"the server accepted (median of {repeats}: {[round(t, 2) for t in times]})")
    return m


def bench_hf(n: int, repeats: int) -> float:
    import torch
    from helpers.tiny_lm import WORDS, build_tiny_lm

    from assay.models.hf import HFBackend

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    d = build_tiny_lm(tempfile.mkdtemp(), layers=4, hidden=256)
    rng = random.Random(0)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.choice([4, 8, 16, 32, 64, 128, 250])))
               for _ in range(n)]
    params = {"temperature": 0.0, "max_tokens": 16}
    fixed = HFBackend({"kind": "hf", "path": str(d)}, fixed_batch=8)
    ours = HFBackend({"kind": "hf", "path": str(d), "batch_tokens": 16384})
    fixed_t, ours_t = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        a = generate(prompts, fixed, params=params, store=Store(tempfile.mkdtemp()))
        fixed_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = generate(prompts, ours, params=params, store=Store(tempfile.mkdtemp()))
        ours_t.append(time.perf_counter() - t)
        assert a.completions == b.completions, "greedy outputs differ"
    toks = sum(r["completion_tokens"] for r in b.records)
    f, o = statistics.median(fixed_t), statistics.median(ours_t)
    print(f"hf cpu  {n} prompts (4-250 words), greedy fp32, 16 new tokens, "
          f"{torch.get_num_threads()} threads: fixed batch 8 in input order {f:.2f}s "
          f"({toks / f:.0f} tok/s), sorted token-budget {o:.2f}s ({toks / o:.0f} tok/s, "
          f"{ours.stats['batches'] // repeats} batches); ratio {f / o:.1f}x; outputs identical")
    return f / o


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=["openai", "recovery", "hf"], default=None)
    args = ap.parse_args()
    if args.only in (None, "openai"):
        bench_openai(args.prompts, args.repeats)
    if args.only in (None, "recovery"):
        bench_recovery(args.repeats)
    if args.only in (None, "hf"):
        bench_hf(args.prompts, args.repeats)


if __name__ == "__main__":
    main()
