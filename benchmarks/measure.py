"""Benchmark of the measure stage: 800k rows in one process, and the peer whileai at 10k x 8.

Prints seconds (median of repeats), peak memory, and our speed-up over the peer on the same rows.

Usage:
    .venv/bin/python benchmarks/measure.py                  # full run (the peer takes ~30 min)
    .venv/bin/python benchmarks/measure.py --skip-peer      # ours only
    .venv/bin/python benchmarks/measure.py --peer-repeats 1 # one peer repeat per call

Ours runs in /work/main/.venv; the peer runs in its own interpreter (/work/peers/bin/python,
or $PEER_PYTHON) as a subprocess reading the same rows from a JSONL file. Our 10k x 8 timings
are given twice: from ``Rows`` (assay's own row container, an Arrow table: what ``assay.rows()``
and ``grade()`` return) and from the same list of dicts the peer receives (this includes
validating every row in Python).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER_PYTHON = os.environ.get("PEER_PYTHON", "/work/peers/bin/python")
CALLS = ("pass_at", "compare", "eval_variance", "holdout_size", "select")


def make_columns(n_tasks: int, k: int, shift: float, seed: int):
    """Column arrays of one arm: task rates ~ Beta(2, 2) (+shift), binary rewards, a marker,
    short replies with repeats within a task, and a reference per task."""
    import numpy as np

    rng = np.random.default_rng(seed)
    base = np.random.default_rng(12345).beta(2, 2, n_tasks)  # the same tasks in every arm
    p = np.clip(base + shift, 0, 1)
    task = np.repeat(np.arange(n_tasks), k)
    reward = (rng.random(n_tasks * k) < p[task]).astype(np.float64)
    length = rng.integers(20, 400, n_tasks * k).astype(np.float64)
    answer = rng.integers(0, 6, n_tasks * k)
    return task, reward, length, answer


def arrow_rows(n_tasks: int, k: int, shift: float, seed: int):
    """An Arrow table of assay's ROW_SCHEMA, built column-wise."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from assay.rows import MARKERS_TYPE, ROW_SCHEMA, ROWS_SCHEMA_VERSION

    task, reward, length, answer = make_columns(n_tasks, k, shift, seed)
    n = len(task)
    tid = pc.binary_join_element_wise("t", pa.array(task.astype(str)), "")
    prompt = pc.binary_join_element_wise("question ", pa.array(task.astype(str)), "")
    text = pc.binary_join_element_wise("the answer is ", pa.array(answer.astype(str)), "")
    offsets = pa.array(np.arange(n + 1, dtype=np.int32))
    markers = pa.MapArray.from_arrays(offsets, pa.array(["len"] * n), pa.array(length))
    assert markers.type == MARKERS_TYPE
    ref = pc.binary_join_element_wise('{"reference": "', pa.array((task % 6).astype(str)), '"}', "")
    cols = {
        "task_id": tid, "prompt": prompt, "final_text": text, "reward": pa.array(reward),
        "markers": markers, "messages": pa.nulls(n, ROW_SCHEMA.field("messages").type),
        "rollout_index": pa.array(np.tile(np.arange(k), n_tasks)), "privileged": ref,
        "judge_name": pa.array(["given"] * n), "judge_status": pa.array(["given"] * n),
        "reason": pa.nulls(n, pa.string()), "judge_meta": pa.nulls(n, pa.string()),
        "schema_version": pa.array(np.full(n, ROWS_SCHEMA_VERSION, dtype=np.int32)),
    }
    return pa.Table.from_arrays([cols[f.name] for f in ROW_SCHEMA], schema=ROW_SCHEMA)


def dict_rows(n_tasks: int, k: int, shift: float, seed: int) -> list[dict]:
    task, reward, length, answer = make_columns(n_tasks, k, shift, seed)
    return [
        {"task_id": f"t{t}", "prompt": f"question {t}", "final_text": f"the answer is {a}", "reward": float(r),
         "markers": {"len": float(m)}, "privileged": {"reference": str(t % 6)}}
        for t, r, m, a in zip(task.tolist(), reward.tolist(), length.tolist(), answer.tolist())
    ]


def time_calls(ns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each call, given an environment with the five callables bound."""
    out = {}
    for name in CALLS:
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ns[name]()
            ts.append(time.perf_counter() - t0)
        out[name] = statistics.median(ts)
    return out


def our_calls(before, after) -> dict:
    import assay
    import assay.measure  # noqa: F401  (import outside the timings)

    return {
        "pass_at": lambda: assay.pass_at(before),
        "compare": lambda: assay.compare(before, after),
        "eval_variance": lambda: assay.eval_variance(before, after),
        "holdout_size": lambda: assay.holdout_size(0.05, before=before, after=after),
        "select": lambda: assay.select(before, mode="rl", band=(0.2, 0.8)),
    }


def child_big(args) -> None:
    import resource

    t0 = time.perf_counter()
    before = arrow_rows(args.tasks, args.k, 0.0, 1)
    after = arrow_rows(args.tasks, args.k, 0.03, 2)
    build = time.perf_counter() - t0
    times = time_calls(our_calls(before, after), args.repeats)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    print(json.dumps({"times": times, "peak_mib": peak, "build_s": build}))


def child_peer(args) -> None:
    import whileai as wai

    with open(args.data) as fh:
        data = json.load(fh)
    before, after = data["before"], data["after"]
    calls = {
        "pass_at": lambda: wai.pass_at(before),
        "compare": lambda: wai.compare(before, after),
        "eval_variance": lambda: wai.eval_variance(before, after),
        "holdout_size": lambda: wai.holdout_size(0.05, before=before, after=after),
        "select": lambda: wai.select(before, mode="rl", band=(0.2, 0.8)),
    }
    print(json.dumps({"times": time_calls(calls, args.repeats)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--peer-tasks", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer-repeats", type=int, default=3)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--child", choices=("big", "peer"))
    ap.add_argument("--data")
    args = ap.parse_args()
    if args.child == "big":
        return child_big(args)
    if args.child == "peer":
        return child_peer(args)

    here = Path(__file__).resolve()
    print(f"measure benchmark: {args.tasks} tasks x {args.k} rows per arm (2 arms), repeats {args.repeats}")
    big = json.loads(subprocess.run([sys.executable, str(here), "--child", "big", "--tasks", str(args.tasks),
                                     "--k", str(args.k), "--repeats", str(args.repeats)],
                                    check=True, capture_output=True, text=True).stdout)
    total = sum(big["times"].values())
    for name in CALLS:
        print(f"  {name:14s} {big['times'][name]:8.3f} s")
    print(f"  total          {total:8.3f} s  (target < 10 s); peak RSS {big['peak_mib']:.0f} MiB (target < 2048), "
          f"of which building the rows took {big['build_s']:.1f} s")

    import assay
    import assay.measure  # noqa: F401  (import outside the timings)

    T, k = args.peer_tasks, args.k
    before_d, after_d = dict_rows(T, k, 0.0, 1), dict_rows(T, k, 0.03, 2)
    before_r, after_r = assay.Rows.from_records(before_d), assay.Rows.from_records(after_d)
    ours_rows = time_calls(our_calls(before_r, after_r), args.repeats)
    ours_dicts = time_calls(our_calls(before_d, after_d), args.repeats)
    print(f"\nat {T} tasks x {k} rows (same rows for both):")
    if args.skip_peer:
        for name in CALLS:
            print(f"  {name:14s} ours(Rows) {ours_rows[name]:.4f} s  ours(dicts) {ours_dicts[name]:.4f} s")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.json"
        path.write_text(json.dumps({"before": before_d, "after": after_d}))
        out = subprocess.run([PEER_PYTHON, str(here), "--child", "peer", "--data", str(path),
                              "--repeats", str(args.peer_repeats)], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"peer failed: {out.stderr[-2000:]}")
            return
        peer = json.loads(out.stdout.strip().splitlines()[-1])["times"]
    print(f"  {'call':14s} {'whileai':>10s} {'ours(Rows)':>11s} {'ratio':>8s} {'ours(dicts)':>12s} {'ratio':>8s}")
    for name in CALLS:
        print(f"  {name:14s} {peer[name]:10.3f} {ours_rows[name]:11.4f} {peer[name] / ours_rows[name]:7.0f}x "
              f"{ours_dicts[name]:12.4f} {peer[name] / ours_dicts[name]:7.1f}x")
    print("  (target: >= 50x; ratios are medians of repeats, peer and ours measured in this run)")


if __name__ == "__main__":
    main()
