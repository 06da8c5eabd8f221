"""Benchmark: the preference data plane (build, checksum, effective n, filter, collapse) vs
reward-lens.

Run: ``.venv/bin/python benchmarks/data_plane.py [--n 100000] [--repeats 5]``. Every repeat of
each side runs in a fresh subprocess (ours in this interpreter, reward-lens in
/work/peers/bin/python), alternating sides, on the same generated texts; the script prints
medians of the repeats and the ratios (peer / ours).

What is timed, per side:
- ``build+checksum``: 100k ``make_pair`` calls, wrap in a DataView, first ``checksum()``.
  Ours also with the bulk builder ``make_pairs`` (same validation, one tight loop).
- ``checksum (2nd call)``: a second ``checksum()`` on the same view (ours caches it).
- ``effective_n``, ``filter`` (a predicate keeping half; ours also the replayable ``where``),
  ``collapse`` (``collapse_duplicates`` on a fresh build with 10% duplicate rows).
- memory: tracemalloc peak and retained bytes of build+checksum (the input strings are made
  before tracing starts, so both sides are charged only for their own objects).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc

PEER_PYTHON = "/work/peers/bin/python"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def texts(n: int) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    prompts = [f"Question {i}: how should I handle case {i % 977} in my report?" for i in range(n)]
    chosen = [f"Handle case {i} by checking the totals first, then the dates ({i * 7 % 1000})."
              for i in range(n)]
    rejected = [f"Case {i} does not matter much; skip it." for i in range(n)]
    axes = ["helpfulness" if i % 2 else "verbosity" for i in range(n)]
    seeds = [f"seed-{i}" for i in range(n)]
    return prompts, chosen, rejected, axes, seeds


def worker(side: str, n: int, repeats: int, memory: bool) -> dict[str, list[float]]:
    if side == "ours":
        sys.path.insert(0, REPO)
        from assay.data import DataView, make_pair, make_pairs
    else:
        from reward_lens.data.schema import DataView, make_pair  # type: ignore[no-redef]

        make_pairs = None
    P, C, R, A, S = texts(n)
    out: dict[str, list[float]] = {}

    def rec(key: str, value: float) -> None:
        out.setdefault(key, []).append(value)

    def build() -> list:
        return [make_pair(p, c, r, a, seed_id=s, builder_id="bench")
                for p, c, r, a, s in zip(P, C, R, A, S)]

    for _ in range(repeats):
        t0 = time.perf_counter()
        view = DataView(build())
        t1 = time.perf_counter()
        view.checksum()
        t2 = time.perf_counter()
        view.checksum()
        t3 = time.perf_counter()
        rec("build", t1 - t0)
        rec("build+checksum", t2 - t0)
        rec("checksum (2nd call)", t3 - t2)
        if make_pairs is not None:
            t0 = time.perf_counter()
            bulk = DataView(make_pairs(P, C, R, A, seed_ids=S, builder_id="bench"))
            bulk.checksum()
            rec("build+checksum (bulk make_pairs)", time.perf_counter() - t0)
            assert bulk.checksum() == view.checksum()
            del bulk
        t0 = time.perf_counter()
        view.effective_n()
        rec("effective_n", time.perf_counter() - t0)
        t0 = time.perf_counter()
        half = view.filter(lambda p: p.axis == "helpfulness")
        rec("filter (predicate)", time.perf_counter() - t0)
        assert len(half) == n // 2
        if side == "ours":
            t0 = time.perf_counter()
            w = view.where(axis="helpfulness")
            rec("filter (where, replayable)", time.perf_counter() - t0)
            assert len(w) == n // 2
        del view, half
        dup = build()
        dup = dup + dup[: n // 10]
        dview = DataView(dup)
        t0 = time.perf_counter()
        u, weights = dview.collapse_duplicates(warn=False)
        rec("collapse (10% dups)", time.perf_counter() - t0)
        assert len(u) == n and max(weights) == 2
        del dup, dview, u, weights
    if not memory:
        return out
    # memory, measured in an untimed pass
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    view = DataView(build())
    view.checksum()
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out["mem retained MB"] = [(cur - base) / 2**20]
    out["mem peak MB"] = [(peak - base) / 2**20]
    return out


def run_side(side: str, n: int, memory: bool) -> dict[str, list[float]]:
    exe = sys.executable if side == "ours" else PEER_PYTHON
    cmd = [exe, os.path.abspath(__file__), "--worker", side, "--n", str(n), "--repeats", "1"]
    if memory:
        cmd.append("--memory")
    res = subprocess.run(cmd, capture_output=True, text=True, cwd="/tmp")
    if res.returncode != 0:
        raise SystemExit(f"{side} worker failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def collect(n: int, repeats: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    # One fresh process per repeat, alternating sides, so a load spike on the machine hits both.
    ours: dict[str, list[float]] = {}
    peer: dict[str, list[float]] = {}
    for r in range(repeats):
        for side, acc in ((("ours", ours), ("peer", peer)) if r % 2 == 0
                          else (("peer", peer), ("ours", ours))):
            for k, v in run_side(side, n, memory=(r == 0)).items():
                acc.setdefault(k, []).extend(v)
    return ours, peer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--worker", choices=["ours", "peer"])
    ap.add_argument("--memory", action="store_true")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.n, args.repeats, args.memory)))
        return
    ours, peer = collect(args.n, args.repeats)
    print(f"data plane, {args.n:,} pairs, medians of {args.repeats} repeats "
          "(ratio = reward-lens / assay; > 1 means assay is faster or smaller)")
    print(f"{'operation':36s} {'assay':>12s} {'reward-lens':>12s} {'ratio':>9s}")
    keys = list(dict.fromkeys([*ours, *peer]))
    ratios = {}
    for k in keys:
        o = statistics.median(ours[k]) if k in ours else None
        p = statistics.median(peer[k]) if k in peer else None
        if k == "build+checksum (bulk make_pairs)":
            p = statistics.median(peer["build+checksum"])
        unit = "MB" if "MB" in k else "s"
        ratio = (p / o) if (o and p) else None
        ratios[k] = ratio
        fo = "-" if o is None else (f"{o:.3f}" if unit == "MB" else f"{o:.4f}")
        fp = "-" if p is None else (f"{p:.3f}" if unit == "MB" else f"{p:.4f}")
        fr = "-" if ratio is None else f"{ratio:.1f}x"
        print(f"{k:36s} {fo:>12s} {fp:>12s} {fr:>9s}")
    print()
    print(f"target build+checksum >= 5x: make_pair loop {ratios['build+checksum']:.1f}x, "
          f"bulk {ratios['build+checksum (bulk make_pairs)']:.1f}x")
    print("target checksum cached: 2nd call "
          f"{statistics.median(ours['checksum (2nd call)']) * 1e6:.1f} us")
    print(f"target memory < half: peak ratio {ratios['mem peak MB']:.1f}x, retained ratio "
          f"{ratios['mem retained MB']:.1f}x")


if __name__ == "__main__":
    main()
