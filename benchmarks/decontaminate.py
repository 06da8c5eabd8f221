"""Benchmark: assay.decontam against the peer whileai.decontaminate on the same synthetic data.

10,000 eval prompts against 100,000 documents of 1,000 words (seeded), some documents quoting an
eval prompt inside them. Timed end to end (index build included), then again on a rerun that
reuses the saved index; recall on the embedded copies for both tools. A separate run streams a
JSONL corpus through the index build and reports throughput and peak memory.

The peer runs in its own interpreter (/work/peers/bin/python) on the same generated data: this
file is also its driver (``--role peer``), importing only the standard library and whileai there.

Measured 2026-11-30 (afternoon) on the 2-core dev VM, 100,000 docs x 1,000 words, 10,000
prompts, 200 embedded copies, `--repeats 5`, both tools warmed up on 5 documents first:

- assay.decontam, in-memory corpus: end to end incl. index build 6.63 s (median of 7.78, 6.63,
  6.50, 7.14, 6.24; 11.5 CPU-s); rerun 0.33 s (the corpus checksum, XXH3 over 700 MB of text,
  and the saved answer read back); recall 100%, 0 false positives. numba's start-up, once per
  process and not in these times: 1.3 s.
- assay.decontam, JSONL corpus: end to end 11.5 s wall (JSON parsing of the corpus), rerun
  0.21 s (file checksum memoized by path+size+mtime).
- whileai.decontaminate (defaults): 106.2 s wall / 102.9 CPU-s; caught 0 of 200 embedded copies.
- ratios: end to end 16.0x wall (target 10x), rerun 319x (target 100x); 496x for the JSONL
  corpus rerun. Earlier full runs the same afternoon: 13.6x / 259x (ours 7.03 s / 0.37 s, the
  peer 95.3 s) and, before the XXH3 checksum, 10.4x / 95x (ours 8.1 s / 0.89 s, the peer 84 s).
- What bought it (from 3.6x / 85x in the morning): a compiled (numba) ASCII tokenizer,
  n-gram and radix loops, bit-identical to the numpy reference (tokenize + hash: 117 -> ~40 ns
  per token); groups sorted in worker threads on reused buffers with documents packed into
  the sort key; each group written straight from those buffers and mapped back read-only
  (no second copy of the 800 MB index faulted into memory); no fsync on index shards (a
  lost shard fails its checksum and the index is rebuilt); the in-memory corpus checksum with
  XXH3-128 instead of sha256 (0.55 -> 0.18 s). This VM pays ~1 ms per MB of first-touched
  memory, so fresh allocations were a large part of the cost.
- The same machine an hour apart gave 6.4 s and 9 s for the same end-to-end call: ratios come
  from one run of both tools, and leftover files in the page cache slow everything down.
- streaming build from JSONL (`--skip-peer --skip-ours --stream-docs 1000000 --stream-words 100`,
  materialize=False, memory_limit 1 GB): 1,000,000 docs (1,035 MB file), 100M tokens, 89M
  entries in 153.8 s = 6,504 docs/s, peak RSS 1.9 GB (295 s in the morning). Every document
  is short enough for a MinHash signature here (128 permutations each), which is most of it.

Usage:
    .venv/bin/python benchmarks/decontaminate.py                 # the full comparison
    .venv/bin/python benchmarks/decontaminate.py --docs 5000 --evals 1000 --stream-docs 20000
    .venv/bin/python benchmarks/decontaminate.py --skip-peer --stream-docs 1000000  # streaming only
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER_PYTHON = "/work/peers/bin/python"
SEED = 20261130
SYLLABLES = ["ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "ve", "zu", "dan", "mor", "tel", "vis",
             "qua", "ber", "shi", "gon", "lut", "rex"]


def vocabulary(size: int = 50_000) -> list[str]:
    rng = random.Random(SEED)
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def make_data(n_docs: int, n_evals: int, n_planted: int, doc_words: int = 1000):
    """(eval prompts, corpus texts, {doc index: eval index}) for the seed; pure stdlib."""
    rng = random.Random(SEED)
    vocab = vocabulary()
    evals = []
    for _ in range(n_evals):
        words = rng.choices(vocab, k=rng.randint(20, 80))
        evals.append(" ".join(words).capitalize() + "?")
    docs = []
    for _ in range(n_docs):
        words = rng.choices(vocab, k=doc_words)
        for j in range(40, doc_words, 40):
            words[j] += "."
        docs.append(" ".join(words))
    planted: dict[int, int] = {}
    for d, e in zip(rng.sample(range(n_docs), n_planted), rng.sample(range(n_evals), n_planted)):
        words = docs[d].split(" ")
        at = rng.randint(100, doc_words - 200)
        docs[d] = " ".join(words[:at]) + "\n" + evals[e] + "\n" + " ".join(words[at:])
        planted[d] = e
    return evals, docs, planted


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- peer side (runs under /work/peers/bin/python) ---------------------------------------------
def run_peer(args: argparse.Namespace) -> dict:
    import warnings

    import whileai as wai

    warnings.simplefilter("ignore")
    evals, docs, planted = make_data(args.docs, args.evals, args.planted)
    train = [{"prompt": t, "doc": i} for i, t in enumerate(docs)]
    against = [{"prompt": p} for p in evals]
    wai.decontaminate(train[:5], against=[against[:5]])  # warm-up, as for ours
    times, cpu = [], []
    for _ in range(args.peer_repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        kept, report = wai.decontaminate(train, against=[against])
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    kept_docs = {r["doc"] for r in kept}
    caught = sum(1 for d in planted if d not in kept_docs)
    return {"seconds": times, "cpu": cpu, "caught": caught, "planted": len(planted),
            "n_contaminated": report["n_contaminated"], "peak_rss_mb": peak_rss_mb()}


# -- our side ----------------------------------------------------------------------------------
def run_ours(args: argparse.Namespace) -> dict:
    from assay.decontam import contamination
    from assay.store import Store

    evals, docs, planted = make_data(args.docs, args.evals, args.planted)
    eval_rows = [{"task_id": f"e{i}", "prompt": p} for i, p in enumerate(evals)]
    want = {f"e{e}" for e in planted.values()}
    first, rerun, recall, first_cpu, rerun_cpu = [], [], [], [], []
    # Warm-up on a tiny corpus, not timed: loads numba and its compiled loops (a one-time cost
    # per process, reported on its own), as the peer's warm-up loads its code.
    t0 = time.perf_counter()
    contamination(eval_rows[:5], docs[:5], store=False)
    startup = time.perf_counter() - t0
    detail = {}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="assay-bench-") as tmp:
            store = Store(tmp)
            t0, c0 = time.perf_counter(), time.process_time()
            r = contamination(eval_rows, docs, store=store)
            first.append(time.perf_counter() - t0)
            first_cpu.append(time.process_time() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            r2 = contamination(eval_rows, docs, store=store)
            rerun.append(time.perf_counter() - t0)
            rerun_cpu.append(time.process_time() - c0)
            assert r2.corpus["index_reused"] and not r.corpus["index_reused"]
            found = {i.task_id for i in r.items if i.contaminated}
            recall.append(len(found & want) / len(want))
            detail = {"false_positives": len(found - want), "rate": str(r.rate),
                      "by_rule": r.by_rule,
                      "rerun_result_cached": r2.corpus.get("result_cached", False),
                      "first_split": r.seconds, "rerun_split": r2.seconds}
    # The nightly shape: the corpus as a JSONL file, whose checksum is memoized by path, size
    # and mtime, so a rerun neither re-reads the corpus nor rebuilds the index.
    with tempfile.TemporaryDirectory(prefix="assay-bench-file-") as tmp:
        path = Path(tmp) / "corpus.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for i, t in enumerate(docs):
                fh.write(json.dumps({"id": str(i), "text": t}) + "\n")
        store = Store(Path(tmp) / "store")
        t0, c0 = time.perf_counter(), time.process_time()
        rf = contamination(eval_rows, path, store=store)
        file_first = (time.perf_counter() - t0, time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        rf2 = contamination(eval_rows, path, store=store)
        file_rerun = (time.perf_counter() - t0, time.process_time() - c0)
        assert rf2.corpus["index_reused"]
        file_recall = len({i.task_id for i in rf.items if i.contaminated} & want) / len(want)
    return {"first": first, "rerun": rerun, "first_cpu": first_cpu, "rerun_cpu": rerun_cpu,
            "recall": recall,
            "file_first": file_first, "file_rerun": file_rerun, "file_recall": file_recall,
            **detail, "startup": startup, "peak_rss_mb": peak_rss_mb()}


def run_stream(args: argparse.Namespace) -> dict:
    """Build the index from a JSONL corpus on disk: throughput and peak memory (own process)."""
    from assay.decontam import ContaminationIndex
    from assay.store import Store

    path = Path(args.stream_file)
    with tempfile.TemporaryDirectory(prefix="assay-stream-") as tmp:
        t0 = time.perf_counter()
        idx = ContaminationIndex.build(path, store=Store(tmp),
                                       memory_limit=args.memory_limit_mb << 20,
                                       materialize=False)
        secs = time.perf_counter() - t0
        stats = idx.stats
    return {"seconds": secs, "docs": stats.docs, "tokens": stats.tokens, "entries": stats.entries,
            "spilled": stats.spilled, "docs_per_s": stats.docs / secs,
            "tokens_per_s": stats.tokens / secs,
            "file_mb": path.stat().st_size / 2**20, "peak_rss_mb": peak_rss_mb()}


def write_stream_file(path: Path, n_docs: int, doc_words: int) -> None:
    rng = random.Random(SEED + 1)
    vocab = vocabulary()
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n_docs):
            fh.write(json.dumps({"id": f"s{i}", "text": " ".join(rng.choices(vocab, k=doc_words))})
                     + "\n")


def _sub(python: str, role: str, args: argparse.Namespace, extra: list[str] | None = None) -> dict:
    cmd = [python, os.path.abspath(__file__), "--role", role, "--docs", str(args.docs),
           "--evals", str(args.evals), "--planted", str(args.planted),
           "--repeats", str(args.repeats), "--peer-repeats", str(args.peer_repeats),
           "--memory-limit-mb", str(args.memory_limit_mb), *(extra or [])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         cwd=str(Path(__file__).resolve().parents[1]))
    if out.returncode != 0:
        raise SystemExit(f"{role} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", default="main", choices=["main", "peer", "ours", "stream"])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--evals", type=int, default=10_000)
    ap.add_argument("--planted", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer-repeats", type=int, default=1)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--skip-ours", action="store_true",
                    help="with --skip-peer: only the streaming run")
    ap.add_argument("--stream-docs", type=int, default=200_000, help="0 skips the streaming run")
    ap.add_argument("--stream-words", type=int, default=1000)
    ap.add_argument("--stream-file", default="")
    ap.add_argument("--memory-limit-mb", type=int, default=1024)
    args = ap.parse_args()
    if args.role == "peer":
        print(json.dumps(run_peer(args)))
        return
    if args.role == "ours":
        print(json.dumps(run_ours(args)))
        return
    if args.role == "stream":
        print(json.dumps(run_stream(args)))
        return
    if not args.skip_ours:
        compare(args)
    if args.stream_docs:
        stream(args)


def compare(args: argparse.Namespace) -> None:
    print(f"data: {args.evals} eval prompts (20-80 words), {args.docs} documents of 1,000 words, "
          f"{args.planted} documents quoting an eval prompt inside them (seed {SEED})")
    ours = _sub(sys.executable, "ours", args)
    med_first, med_rerun = statistics.median(ours["first"]), statistics.median(ours["rerun"])
    print(f"assay.decontam: end to end incl. index build {med_first:.2f}s (median of "
          f"{len(ours['first'])}: {', '.join(f'{x:.2f}' for x in ours['first'])}); rerun reusing "
          f"the saved index {med_rerun:.2f}s ({', '.join(f'{x:.2f}' for x in ours['rerun'])}); "
          f"recall on embedded copies {min(ours['recall']):.0%}, false positives "
          f"{ours['false_positives']}; peak RSS {ours['peak_rss_mb']:.0f} MB")
    print(f"  (not timed: a warm-up on 5 documents first, {ours['startup']:.2f}s: numba's import "
          "and its compiled loops, once per process; the peer is warmed up the same way)")
    ff, fr = ours["file_first"], ours["file_rerun"]
    print(f"  corpus as a JSONL file (one run): first {ff[0]:.2f}s wall / {ff[1]:.2f}s CPU, rerun "
          f"{fr[0]:.2f}s wall / {fr[1]:.2f}s CPU (checksum memoized by path+size+mtime), recall "
          f"{ours['file_recall']:.0%}")
    print(f"  CPU seconds (all threads): first {statistics.median(ours['first_cpu']):.2f}, rerun "
          f"{statistics.median(ours['rerun_cpu']):.2f} (answer read from the store: "
          f"{ours['rerun_result_cached']}); first run split {ours['first_split']}; "
          f"rerun split {ours['rerun_split']}")
    if not args.skip_peer:
        peer = _sub(PEER_PYTHON, "peer", args)
        med_peer = statistics.median(peer["seconds"])
        print(f"whileai.decontaminate (default n=8, overlap=0.8): {med_peer:.2f}s (median of "
              f"{len(peer['seconds'])}); caught {peer['caught']} of {peer['planted']} embedded "
              f"copies; peak RSS {peer['peak_rss_mb']:.0f} MB")
        cpu_peer = statistics.median(peer["cpu"])
        print(f"  peer CPU seconds: {cpu_peer:.2f}")
        print(f"ratio end to end (wall): {med_peer / med_first:.1f}x faster; rerun with the saved "
              f"index: {med_peer / med_rerun:.1f}x faster")
        print(f"ratio in CPU seconds: {cpu_peer / statistics.median(ours['first_cpu']):.1f}x end "
              f"to end, {cpu_peer / statistics.median(ours['rerun_cpu']):.1f}x rerun; JSONL corpus "
              f"rerun: {med_peer / fr[0]:.1f}x wall, {cpu_peer / fr[1]:.1f}x CPU")
        print("(wall-clock ratios depend on the load on this machine; the CPU ratios less so)")


def stream(args: argparse.Namespace) -> None:
    if args.stream_docs:
        with tempfile.TemporaryDirectory(prefix="assay-stream-data-") as tmp:
            path = Path(args.stream_file) if args.stream_file else Path(tmp) / "stream.jsonl"
            if not path.exists():
                t0 = time.perf_counter()
                write_stream_file(path, args.stream_docs, args.stream_words)
                print(f"wrote {args.stream_docs} documents ({path.stat().st_size / 2**20:.0f} MB) "
                      f"in {time.perf_counter() - t0:.0f}s")
            s = _sub(sys.executable, "stream", args, ["--stream-file", str(path)])
            print(f"streaming index build: {s['docs']} documents, {s['tokens']:,} tokens, "
                  f"{s['entries']:,} entries in {s['seconds']:.1f}s = {s['docs_per_s']:,.0f} "
                  f"docs/s, {s['tokens_per_s'] / 1e6:.1f}M tokens/s; peak RSS "
                  f"{s['peak_rss_mb']:.0f} MB (memory_limit {args.memory_limit_mb} MB, spilled: "
                  f"{s['spilled']})")


if __name__ == "__main__":
    main()
