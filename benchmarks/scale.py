"""Scale benchmark: `assay run` on given completions at 4k and 40k rows (400k with --big), cold
and fully cached, wall time, peak RSS and rows/s (issue 50).

Each run is ``assay run SPEC`` in a fresh child process, as a user runs it; its peak RSS is the
child's ``ru_maxrss`` (``resource.getrusage(RUSAGE_CHILDREN)`` read in a wrapper process that runs
only that command, so no other child's peak mixes in). Per size: one cold run (fresh store and
output folder), then ``--repeats`` alternated pairs of cached reruns:

- ``cached, same dir``: the rerun into the run directory the cold run wrote: the outputs already
  there are those of exactly these results, so nothing is rewritten (what this change adds);
- ``cached, new dir``: the rerun into an empty folder: everything is written again (what every
  cached rerun cost before the change; the store side is the same in both).

Both reruns' report.json, rows Parquet and view data are checked byte-equal to the cold run's
before a figure is printed. Medians of the repeats.

Run: ``.venv/bin/python benchmarks/scale.py [--rows 4000 40000] [--big] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K = 4  # samples per prompt

SPEC = """\
name: scale
sources:
  - name: m
    kind: file
    path: completions.jsonl
    fields: {{prompt: q, completion: c, reference: gold, task_id: id}}
    verifier: {{kind: exact_match}}
measure:
  pass_at: {{k: {k}}}
execution: {{shard_rows: 256, view: true}}
"""

#: Runs one command and prints its wall time and peak RSS (KiB, Linux) as JSON on the last line.
WRAP = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - t
if p.returncode:
    sys.stderr.write(p.stderr)
    sys.exit(p.returncode)
print(json.dumps({"wall": wall, "rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def write_completions(folder: Path, rows: int) -> Path:
    """``rows / K`` prompts x K completions, half of them right, a few hundred characters each."""
    with open(folder / "completions.jsonl", "w", encoding="utf-8") as f:
        for i in range(rows // K):
            gold = str(i * 7)
            q = f"Problem {i}: what is 7 times {i}? Show the work. " + "context " * 20
            for j in range(K):
                c = gold if (i + j) % 2 else str(i * 7 + 1)
                f.write(json.dumps({"id": f"t{i}", "q": q, "c": c, "gold": gold}) + "\n")
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(k=K), encoding="utf-8")
    return spec


def run(spec: Path, store: Path, out: Path) -> dict[str, float]:
    cmd = [sys.executable, "-c", WRAP, sys.executable, "-m", "assay.cli", "run", str(spec),
           "--store", str(store), "--output", str(out), "--prefect-home", str(spec.parent / "ph")]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=spec.parent, timeout=3600)
    if p.returncode:
        raise SystemExit(f"assay run failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def digest(run_dir: Path) -> dict[str, str]:
    """sha256 of every result file a run wrote (not run.json/run.log: they hold times)."""
    out = {}
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir).as_posix()
        if p.is_file() and rel not in ("run.json", "run.log") and not rel.startswith("."):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def one_size(rows: int, repeats: int, work: Path) -> dict[str, object]:
    folder = work / f"r{rows}"
    folder.mkdir()
    spec = write_completions(folder, rows)
    store, cold_dir = folder / "store", folder / "out"
    cold = run(spec, store, cold_dir)
    ref = digest(cold_dir)
    same, fresh = [], []
    for i in range(repeats):
        for mode in (("same", "new") if i % 2 == 0 else ("new", "same")):
            if mode == "same":
                same.append(run(spec, store, cold_dir))
                got = digest(cold_dir)
            else:
                new_dir = folder / f"new{i}"
                fresh.append(run(spec, store, new_dir))
                got = digest(new_dir)
                shutil.rmtree(new_dir)
            if got != ref:
                diff = sorted(k for k in set(got) | set(ref) if got.get(k) != ref.get(k))
                raise SystemExit(f"{rows} rows, cached ({mode} dir): files differ: {diff[:10]}")

    def med(xs: list[dict[str, float]], key: str) -> float:
        # --repeats 0: the cold run alone (4M rows: the cached reruns would double its time)
        return statistics.median(x[key] for x in xs) if xs else float("nan")

    res = {"rows": rows, "cold_s": cold["wall"], "cold_rss_mib": cold["rss_kib"] / 1024,
           "cached_same_s": med(same, "wall"), "cached_same_rss_mib": med(same, "rss_kib") / 1024,
           "cached_new_s": med(fresh, "wall"), "cached_new_rss_mib": med(fresh, "rss_kib") / 1024,
           "cold_rows_per_s": rows / cold["wall"], "files": len(ref)}
    shutil.rmtree(folder)
    return res


def main() -> None:
    import sys

    if sys.argv[1:2] == ["--generation"]:  # the generation half of issue 50's curve
        from scale_generation import main as generation

        generation(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="scale.py --generation [ARGS]: generation at 1k-20k "
                                 "samples against inspect_ai (scale_generation.py --help)")
    ap.add_argument("--rows", type=int, nargs="*", default=[4000, 40000])
    ap.add_argument("--big", action="store_true", help="add 400,000 rows (minutes, ~1 GB)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="pairs of cached reruns per size (0: the cold run only)")
    a = ap.parse_args()
    sizes = a.rows + ([400_000] if a.big else [])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores")
    print("| rows | cold | cold RSS | cold rows/s | cached, same dir | RSS | cached, new dir "
          "| RSS |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="assay-scale-") as tmp:
        for n in sizes:
            r = one_size(n, a.repeats, Path(tmp))
            print(f"| {n:,} | {r['cold_s']:.1f} s | {r['cold_rss_mib']:.0f} MiB "
                  f"| {r['cold_rows_per_s']:,.0f} | {r['cached_same_s']:.2f} s "
                  f"| {r['cached_same_rss_mib']:.0f} MiB | {r['cached_new_s']:.2f} s "
                  f"| {r['cached_new_rss_mib']:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
