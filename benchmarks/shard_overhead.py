"""Per-shard overhead benchmark: one given-completions study at shard_rows 256, 32 (and 8),
cold and with the store warm but a new output folder: the fixed cost of each shard (issue 50).

Each run is ``assay run SPEC --set execution.shard_rows=N`` in a fresh child process (the spec and
completions come from benchmarks/scale.py). Per repeat, in alternated order over the shard sizes:
one cold run (fresh store and output folder) and one rerun on that store into a new folder
(``--no-fast-path``, so the flow records every node as a cache hit). Medians of the repeats;
every run's report.json must equal the first's (shard size never changes a result).

Printed: wall per setting, ``overhead/shard = (wall_small - wall_256) / (shards_small -
shards_256)`` and ``wall_32 / wall_256``. ``--in-process`` also times cold runs in-process
without Prefect (``assay.stages.run_study`` on threads, as the head start runs it): the stage
side of the overhead; ``--top N`` adds one run per size with every node under cProfile.

Run: ``.venv/bin/python benchmarks/shard_overhead.py [--rows 8000] [--shards 256 32 8]
[--repeats 3] [--in-process [--no-bench] [--top 40]]``
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import ROOT, WRAP, write_completions  # noqa: E402  (the spec maker, reused)


def run(spec: Path, store: Path, out: Path, shard_rows: int, *, rerun: bool) -> float:
    """Wall seconds of one ``assay run`` child (checked to succeed)."""
    cmd = [sys.executable, "-c", WRAP, sys.executable, "-m", "assay.cli", "run", str(spec),
           "--store", str(store), "--output", str(out), "--prefect-home",
           str(spec.parent / "ph"), "--set", f"execution.shard_rows={shard_rows}", "--no-view"]
    if rerun:
        cmd.append("--no-fast-path")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=spec.parent, timeout=3600)
    if p.returncode:
        raise SystemExit(f"assay run failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    return float(json.loads(p.stdout.strip().splitlines()[-1])["wall"])


def measure(rows: int, sizes: list[int], repeats: int, work: Path) -> dict[int, dict[str, float]]:
    spec = write_completions(work, rows)
    walls: dict[int, dict[str, list[float]]] = {n: {"cold": [], "warm": []} for n in sizes}
    ref: bytes | None = None
    for i in range(repeats):
        for n in (sizes if i % 2 == 0 else sizes[::-1]):  # alternated: drift hits all alike
            store, out = work / f"s{n}-{i}", work / f"o{n}-{i}"
            walls[n]["cold"].append(run(spec, store, out, n, rerun=False))
            walls[n]["warm"].append(run(spec, store, work / f"w{n}-{i}", n, rerun=True))
            got = json.loads((out / "report.json").read_bytes())
            got.pop("run", None)
            doc = json.dumps(got, sort_keys=True).encode()
            if ref is None:
                ref = doc
            elif doc != ref:
                raise SystemExit(f"shard_rows {n}: report.json differs from the first run's")
            for p in (store, out, work / f"w{n}-{i}"):
                shutil.rmtree(p)
    return {n: {k: statistics.median(v) for k, v in w.items()} for n, w in walls.items()}


class _Profiled:
    """A thread executor whose every node runs under cProfile (cProfile sees one thread
    only): the stats of all nodes, added up."""

    def __init__(self, workers: int) -> None:
        from assay.stages.graph import ThreadExecutor

        self.inner = ThreadExecutor(workers)
        self.stats: pstats.Stats | None = None
        self.lock = threading.Lock()

    def submit(self, node: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               waits: list[Any], done: Any) -> Any:
        def fn(*a: Any, **k: Any) -> Any:
            prof = cProfile.Profile()
            try:
                return prof.runcall(node.fn, *a, **k)
            finally:
                with self.lock:
                    if self.stats is None:
                        self.stats = pstats.Stats(prof)
                    else:
                        self.stats.add(prof)
        return self.inner.submit(replace(node, fn=fn), args, kwargs, waits, done)

    def result(self, handle: Any) -> Any:
        return self.inner.result(handle)

    def close(self, cancel: bool) -> None:
        self.inner.close(cancel)


def in_process(rows: int, sizes: list[int], repeats: int, work: Path, top: int = 0) -> None:
    """Cold runs in-process without Prefect (``assay.stages.run_study`` on threads inside the
    store's ``in_use(write_behind=True)``, as the head start runs it), alternated, medians: the
    stage side of each shard's cost. With ``top``: one more run per size with each node under
    cProfile, its top functions printed."""
    from assay import stages
    from assay.spec import load_spec
    from assay.store import Store

    spec = write_completions(work, rows)
    cwd = os.getcwd()
    os.chdir(work)
    walls: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        for i in range(repeats):
            for n in (sizes if i % 2 == 0 else sizes[::-1]):
                s = load_spec(str(spec), [f"execution.shard_rows={n}"])
                st = Store(work / f"st{n}-{i}")
                t = time.perf_counter()
                with st.in_use(write_behind=True):
                    stages.run_study(s, st, progress=None)
                walls[n].append(time.perf_counter() - t)
                shutil.rmtree(work / f"st{n}-{i}")
        base = sizes[0]
        nb = -(-rows // base)
        print("\n| in-process, no Prefect: shard_rows | shards | cold | overhead/shard |")
        print("|---|---|---|---|")
        for n in sizes:
            w, w0, ns = statistics.median(walls[n]), statistics.median(walls[base]), -(-rows // n)
            per = "" if n == base else f"{(w - w0) / (ns - nb) * 1000:.1f} ms"
            print(f"| {n} | {ns} | {w:.2f} s | {per} |", flush=True)
        for n in sizes if top else ():
            s = load_spec(str(spec), [f"execution.shard_rows={n}"])
            ex = _Profiled(stages.max_parallel_for(s, None))
            st = Store(work / f"pstore{n}")
            with st.in_use(write_behind=True):
                stages.run_study(s, st, executor=ex, progress=None)
            print(f"\nshard_rows {n}: nodes' own time by function (cumulative, all threads):")
            assert ex.stats is not None
            ex.stats.sort_stats("cumulative").print_stats(top)
    finally:
        os.chdir(cwd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--shards", type=int, nargs="+", default=[256, 32, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--in-process", action="store_true",
                    help="also time runs in-process, no Prefect (the stage side)")
    ap.add_argument("--no-bench", action="store_true", help="only --in-process")
    ap.add_argument("--top", type=int, default=0,
                    help="with --in-process: profile one run per size, print its top N")
    a = ap.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores; {a.rows:,} rows, medians of {a.repeats}")
    with tempfile.TemporaryDirectory(prefix="assay-shards-") as tmp:
        if a.no_bench:
            in_process(a.rows, a.shards, a.repeats, Path(tmp), a.top)
            return
        res = measure(a.rows, a.shards, a.repeats, Path(tmp))
        base = a.shards[0]
        nb = -(-a.rows // base)
        print("| shard_rows | shards | cold | overhead/shard | x base | warm store, new dir "
              "| overhead/shard | x base |")
        print("|---|---|---|---|---|---|---|---|")
        for n in a.shards:
            ns = -(-a.rows // n)
            cells = []
            for k in ("cold", "warm"):
                w, w0 = res[n][k], res[base][k]
                per = "" if n == base else f"{(w - w0) / (ns - nb) * 1000:.1f} ms"
                cells += [f"{w:.2f} s", per, f"{w / w0:.2f}"]
            print(f"| {n} | {ns} | " + " | ".join(cells) + " |", flush=True)
        if a.in_process:
            (Path(tmp) / "p").mkdir()
            in_process(a.rows, a.shards, a.repeats, Path(tmp) / "p", a.top)


if __name__ == "__main__":
    main()
