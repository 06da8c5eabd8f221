"""Benchmark of the measure stage: 800k rows in one process, and the peer whileai at 10k x 8.

Prints seconds (median of repeats), peak memory, and our speed-up over the peer on the same rows.

Usage:
    .venv/bin/python benchmarks/measure.py                  # full run (the peer takes ~10-20 min)
    .venv/bin/python benchmarks/measure.py --skip-peer      # ours only

Ours runs in /work/main/.venv; the peer runs in its own interpreter (/work/peers/bin/python,
or $PEER_PYTHON) as a subprocess reading the same rows from a JSON file. Our 10k x 8 timings
are given twice: from ``Rows`` (assay's own row container, an Arrow table: what ``assay.rows()``
and ``grade()`` return) and from the same list of dicts the peer receives (this includes
validating every row in Python).

Measured 2026-11-30 15:55 on the 2-core dev VM (full run, `--repeats 5`, peer in the same run):
800k rows per arm measured in 0.45 s in all (pass_at 0.024, compare 0.055, eval_variance 0.042,
holdout_size 0.032, select 0.299 s), peak RSS 532 MiB. At 10k x 8, from Rows (cold) vs whileai:
pass_at 10,194x, compare 14,897x, eval_variance 104x (4.3 ms vs 0.447 s, 227x warm; 117x in an
earlier run of this code, 57x in a run of the code before it), holdout_size 1,481x, select 950x.
From the peer's list of dicts (validation included): pass_at 1,038x, compare 1,122x,
holdout_size 77x, select 165x, eval_variance 3.7x. The last is the floor of reading Python
dicts: eval_variance reads task_id, reward and markers from 160k dicts, ~55 ms per 80k-row arm
(itemgetter alone is ~5 ms per field per arm, plus the key check and the markers); 50x would
need the whole call in 9 ms. Dict rows are checked on the columns each call reads (see
assay.rows.as_table columns=).
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
        "meta": pa.nulls(n, pa.string()),
        "schema_version": pa.array(np.full(n, ROWS_SCHEMA_VERSION, dtype=np.int32)),
    }
    return pa.Table.from_arrays([cols[f.name] for f in ROW_SCHEMA], schema=ROW_SCHEMA)


def dict_rows(n_tasks: int, k: int, shift: float, seed: int) -> list[dict]:
    task, reward, length, answer = make_columns(n_tasks, k, shift, seed)
    return [
        {"task_id": f"t{t}", "prompt": f"question {t}", "final_text": f"the answer is {a}",
         "reward": float(r), "markers": {"len": float(m)},
         "privileged": {"reference": str(t % 6)}}
        for t, r, m, a in zip(task.tolist(), reward.tolist(), length.tolist(), answer.tolist())
    ]


def time_calls(ns: dict, repeats: int, budget: float | None = None, fresh=None) -> dict[str, dict]:
    """Median wall and CPU seconds of each call over ``repeats`` runs.

    ``budget``: stop repeating a call once its runs took that many seconds (the peer's slowest
    calls take minutes each; one run then suffices for a ratio in the thousands).
    ``fresh``: a function returning new arguments before each run (cold timings).
    """
    out = {}
    for name in CALLS:
        wall, cpu = [], []
        for _ in range(repeats):
            fn = ns[name] if fresh is None else fresh()[name]
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            if budget is not None and sum(wall) > budget:
                break
        out[name] = {"wall": statistics.median(wall), "cpu": statistics.median(cpu), "n": len(wall)}
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


def _fresh(table):
    """The same rows in a new table object (zero-copy), so nothing cached on the old one helps."""
    import pyarrow as pa

    return pa.Table.from_batches(table.to_batches(), schema=table.schema)


def child_big(args) -> None:
    import resource

    t0 = time.perf_counter()
    before = arrow_rows(args.tasks, args.k, 0.0, 1)
    after = arrow_rows(args.tasks, args.k, 0.03, 2)
    build = time.perf_counter() - t0
    cold = time_calls({}, args.repeats, fresh=lambda: our_calls(_fresh(before), _fresh(after)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    print(json.dumps({"times": cold, "peak_mib": peak, "build_s": build}))


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
    print(json.dumps({"times": time_calls(calls, args.repeats, budget=args.peer_budget)}))


def main() -> None:
    global CALLS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--peer-tasks", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--peer-repeats", type=int, default=3)
    ap.add_argument("--peer-budget", type=float, default=120.0,
                    help="stop repeating a peer call after this many seconds (slow calls then run "
                         "once)")
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--calls", default=",".join(CALLS),
                    help="comma-separated subset of " + ",".join(CALLS))
    ap.add_argument("--child", choices=("big", "peer"))
    ap.add_argument("--data")
    args = ap.parse_args()
    CALLS = tuple(c for c in CALLS if c in args.calls.split(","))
    if args.child == "big":
        return child_big(args)
    if args.child == "peer":
        return child_peer(args)

    here = Path(__file__).resolve()
    print(f"measure benchmark: {args.tasks} tasks x {args.k} rows per arm (2 arms), median of "
          f"{args.repeats} cold runs (fresh table objects); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    big = json.loads(subprocess.run([sys.executable, str(here), "--child", "big",
                                     "--tasks", str(args.tasks), "--k", str(args.k),
                                     "--repeats", str(args.repeats), "--calls", args.calls],
                                    check=True, capture_output=True, text=True).stdout)
    total = sum(v["wall"] for v in big["times"].values())
    for name in CALLS:
        print(f"  {name:14s} {big['times'][name]['wall']:8.3f} s wall  "
              f"{big['times'][name]['cpu']:8.3f} s cpu")
    print(f"  total          {total:8.3f} s  (target < 10 s); peak RSS {big['peak_mib']:.0f} MiB "
          f"(target < 2048 MiB), including building the 1.6M rows ({big['build_s']:.1f} s, not "
          "timed)")

    import assay
    import assay.measure  # noqa: F401  (import outside the timings)

    T, k = args.peer_tasks, args.k
    before_d, after_d = dict_rows(T, k, 0.0, 1), dict_rows(T, k, 0.03, 2)
    before_r, after_r = assay.Rows.from_records(before_d), assay.Rows.from_records(after_d)
    cold = time_calls({}, args.repeats, fresh=lambda: our_calls(assay.Rows(_fresh(before_r.table)),
                                                                 assay.Rows(_fresh(after_r.table))))
    warm_ns = our_calls(before_r, after_r)
    for fn in warm_ns.values():
        fn()
    warm = time_calls(warm_ns, args.repeats)
    dicts = time_calls(our_calls(before_d, after_d), args.repeats)
    print(f"\nat {T} tasks x {k} rows per arm, the same rows for both (seconds, medians):")
    print("  ours(Rows, cold): first call on a Rows; ours(Rows, warm): the same Rows again "
          "(decoded task codes\n  are cached per immutable table); ours(dicts): from the list of "
          "dicts the peer gets (validation incl.)")
    if args.skip_peer:
        for name in CALLS:
            print(f"  {name:14s} cold {cold[name]['wall']:.4f}  warm {warm[name]['wall']:.4f}  "
                  f"dicts {dicts[name]['wall']:.4f}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.json"
        path.write_text(json.dumps({"before": before_d, "after": after_d}))
        out = subprocess.run([PEER_PYTHON, str(here), "--child", "peer", "--data", str(path),
                              "--repeats", str(args.peer_repeats),
                              "--peer-budget", str(args.peer_budget), "--calls", args.calls],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"peer failed: {out.stderr[-2000:]}")
            return
        peer = json.loads(out.stdout.strip().splitlines()[-1])["times"]
    print(f"  {'call':14s} {'whileai':>9s} {'(runs)':>6s} {'cold':>8s} {'ratio':>7s} {'warm':>8s} "
          f"{'ratio':>7s} {'dicts':>8s} {'ratio':>6s} | cpu ratio cold")
    for name in CALLS:
        pw = peer[name]["wall"]
        print(f"  {name:14s} {pw:9.3f} {peer[name]['n']:6d} {cold[name]['wall']:8.4f} "
              f"{pw / cold[name]['wall']:6.0f}x {warm[name]['wall']:8.4f} "
              f"{pw / warm[name]['wall']:6.0f}x {dicts[name]['wall']:8.4f} "
              f"{pw / dicts[name]['wall']:5.1f}x | {peer[name]['cpu'] / cold[name]['cpu']:6.0f}x")
    print("  (target >= 50x; peer and ours measured in this run; load average now "
          f"{os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
