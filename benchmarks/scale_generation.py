"""Benchmark: generation at 1k, 5k and 20k samples, `assay run` against `inspect eval` on one
lean 20 ms, 32-connection server: wall, client CPU per request, the server's busy share.

Run: ``.venv/bin/python benchmarks/scale_generation.py [--samples 1000 5000 20000] [--k 4]
[--repeats 3] [--big-repeats 1] [--inspect /tmp/inspect-venv/bin/inspect | --no-inspect]``
(inspect_ai lives in its own venv: its pins differ; without it only assay's side runs).

The server is client_cpu.py's (its own process, so its CPU is not on the client's core): it
answers every completion after 20 ms and integrates its requests in flight. Both sides get the
same prompts (race_inspect.py's sums, N/k prompts x k samples: inspect's ``epochs``), the same
explicit sampling parameters and 32 connections. assay: a warm folder (its ``.prefect``
exists), a fresh store each repeat, numeric grading, no page. inspect: ``openai-api``,
``includes()``, sample logging off, no display. Per run: wall (process start to exit), client
CPU (user + system of the process and the children it waited for: ``getrusage
(RUSAGE_CHILDREN)`` deltas) per request, the server's busy share (in-flight integral over
32 x wall), and the requests the server answered, which must be exactly N for both sides.
Sides alternate; medians of ``--repeats`` (``--big-repeats`` from 20,000 samples on). The
marginal CPU per request, between the smallest and the largest N, takes start-up out.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import client_cpu  # noqa: E402
import race_inspect  # noqa: E402
from startup import assay_env, write_study  # noqa: E402

CONNECTIONS = 32
LATENCY = 0.02
BIG = 20000  # from this many samples on, --big-repeats runs


def _stats(url: str) -> dict[str, Any]:
    """The server's counters since the last call (then reset): ``area`` (requests in flight
    integrated over seconds), ``requests`` answered."""
    import httpx

    got: dict[str, Any] = httpx.get(url + "/stats", timeout=30).json()
    return got


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(url: str, cmd: list[str], cwd: Path, env: dict[str, str], want: int) -> dict[str, float]:
    """One process run: wall, CPU per request, busy share; it must have sent ``want``."""
    _stats(url)  # reset the server's counters
    c0, t0 = _cpu(), time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    wall, cpu = time.monotonic() - t0, _cpu() - c0
    st = _stats(url)
    if p.returncode != 0 or st["requests"] != want:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}, {st['requests']} of {want} "
                           f"requests):\n{p.stderr[-3000:]}{p.stdout[-2000:]}")
    return {"wall": wall, "cpu_ms": 1000 * cpu / want, "cpu": cpu,
            "busy": st["area"] / (CONNECTIONS * wall), "requests": st["requests"]}


class Sides:
    """The two commands over one N: assay's folder and inspect's, the same prompts."""

    def __init__(self, base: Path, url: str, n: int, k: int, inspect: str | None) -> None:
        self.n, self.url = n, url
        self.folder = base / f"assay-{n}"
        spec = write_study(self.folder, url, n // k, 1, k)
        text = spec.read_text()
        # startup.py's spec asks 16 connections; this race is at the server's 32
        assert "max_connections: 16\n" in text
        spec.write_text(text.replace("max_connections: 16\n",
                                     f"max_connections: {CONNECTIONS}\n"))
        self.store = self.folder / "store"
        self.assay_cmd = [str(Path(sys.executable).parent / "assay"), "run", "study.yaml",
                          "--no-view", "--store", str(self.store),
                          "--output", str(self.folder / "out")]
        self.inspect_cmd: list[str] | None = None
        if inspect:
            self.ins = base / f"inspect-{n}"
            self.ins.mkdir()
            shutil.copy(self.folder / "p.jsonl", self.ins / "p.jsonl")
            (self.ins / "task.py").write_text(race_inspect.TASK.format(k=k))
            self.ins_env = {**{a: v for a, v in os.environ.items()
                               if not a.startswith("INSPECT_")},
                            "LOOP_BASE_URL": url, "LOOP_API_KEY": "unused",
                            "INSPECT_CACHE_DIR": str(self.ins / "cache")}
            self.inspect_cmd = [
                inspect, "eval", "task.py", "--model", "openai-api/loop/tiny-ckpt",
                "--max-connections", str(CONNECTIONS), "--temperature", "0.7", "--top-p", "0.95",
                "--max-tokens", "64", "--seed", "0", "--no-log-samples", "--display", "none",
                "--log-dir", str(self.ins / "logs")]

    def run(self, side: str) -> dict[str, float]:
        if side == "assay":
            shutil.rmtree(self.store, ignore_errors=True)  # every completion asked again
            return timed(self.url, self.assay_cmd, self.folder, assay_env(), self.n)
        assert self.inspect_cmd is not None
        shutil.rmtree(self.ins / "logs", ignore_errors=True)
        shutil.rmtree(self.ins / "cache", ignore_errors=True)
        return timed(self.url, self.inspect_cmd, self.ins, self.ins_env, self.n)


def _med(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv: list[str] | None = None) -> dict[int, dict[str, list[dict[str, float]]]]:
    """Run the race and print its table; returns every run's figures by N and side.

    >>> main(["--samples", "40", "--k", "4", "--repeats", "1", "--no-inspect"])  # doctest: +SKIP
    """
    ap = argparse.ArgumentParser(prog="scale_generation.py")
    ap.add_argument("--samples", type=int, nargs="+", default=[1000, 5000, 20000])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--big-repeats", type=int, default=1,
                    help=f"repeats from {BIG} samples on")
    ap.add_argument("--inspect", default="/tmp/inspect-venv/bin/inspect")
    ap.add_argument("--no-inspect", action="store_true", help="only assay's side")
    a = ap.parse_args(argv)
    inspect = None if a.no_inspect else a.inspect
    if inspect and not Path(inspect).exists():
        raise SystemExit(f"error: --inspect {inspect} does not exist (or pass --no-inspect)")
    for n in a.samples:
        if n % a.k:
            raise SystemExit(f"error: --samples {n} is not a multiple of --k {a.k}")
    names = ["assay"] + (["inspect_ai"] if inspect else [])
    proc, url = client_cpu.start_server(LATENCY)
    base = Path(tempfile.mkdtemp(prefix="assay-scalegen-"))
    res: dict[int, dict[str, list[dict[str, float]]]] = {}
    try:
        load0 = os.getloadavg()[0]
        for i, n in enumerate(a.samples):
            sides = Sides(base, url, n, a.k, inspect)
            if i == 0:  # warm-up: .prefect exists, inspect's bytecode is compiled
                for side in names:
                    sides.run(side)
            res[n] = {s: [] for s in names}
            repeats = a.big_repeats if n >= BIG else a.repeats
            for r in range(repeats):
                for side in (names if r % 2 == 0 else names[::-1]):
                    res[n][side].append(sides.run(side))
                    print(f"  [{n} {side}] " + ", ".join(
                        f"{k} {v:.3f}" for k, v in res[n][side][-1].items()),
                        file=sys.stderr, flush=True)
        print(f"generation: N samples (N/{a.k} prompts x {a.k}), server "
              f"{LATENCY * 1000:g} ms x {CONNECTIONS} connections, medians of {a.repeats} "
              f"alternated repeats ({a.big_repeats} from {BIG} on); load average "
              f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
        print(f"{'N':>6} {'side':>10} {'wall s':>8} {'CPU ms/req':>10} {'busy':>6} "
              f"{'requests':>8}")
        for n, by in res.items():
            for side, runs in by.items():
                print(f"{n:>6} {side:>10} {_med(runs, 'wall'):>8.2f} "
                      f"{_med(runs, 'cpu_ms'):>10.2f} {100 * _med(runs, 'busy'):>5.0f}% "
                      f"{int(_med(runs, 'requests')):>8}")
            if inspect:
                w = _med(by["inspect_ai"], "wall") / _med(by["assay"], "wall")
                c = _med(by["inspect_ai"], "cpu_ms") / _med(by["assay"], "cpu_ms")
                print(f"{n:>6} {'ratio':>10} inspect_ai / assay: wall {w:.2f}x, "
                      f"CPU per request {c:.2f}x")
        if len(res) > 1:
            lo, hi = min(res), max(res)
            for side in names:
                d = _med(res[hi][side], "cpu") - _med(res[lo][side], "cpu")
                print(f"marginal CPU per request {lo}->{hi}, {side}: "
                      f"{1000 * d / (hi - lo):.2f} ms")
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(base, ignore_errors=True)
    return res


if __name__ == "__main__":
    main()
