"""Store benchmark: one study on the local store vs an S3 store (SeaweedFS on 127.0.0.1), a
cached rerun against S3, many small refs, and the local store against an earlier revision's.

Run: ``.venv/bin/python benchmarks/store_s3.py [--repeats 5] [--prompts 1500] [--refs 400]
[--base-rev REV]``

1. study: a file source of ``--prompts`` prompts x 4 completions graded by a numeric verifier
   in shards of 256 rows, measured, reported: ``stages.run_study`` in this process on a fresh
   local store and on a fresh S3 prefix, alternated, under ``Store.in_use`` as the flow runs it
   (on S3: writes published behind the nodes, all published when it returns), after one
   unmeasured study on each (the process's imports); wall from the store's opening to the end
   of ``in_use``; goal S3 / local within 1.2x.
2. cached: ``assay run SPEC --store s3://...`` (a subprocess, as a user runs it, with its
   bytecode written by a first, unmeasured rerun) on the store the study just filled: every
   stage served from S3; wall; goal under 3 s.
3. refs: ``--refs`` small documents put and pointed at by refs, then every ref read back, one
   after another and from 8 threads, on each store: refs per second; and, as the floor, the
   server's own rate of 100-byte PUTs through ``pyarrow.fs`` directly (1 and 8 threads; as
   ``from_uri`` opens the filesystem, and as the store does).
4. local: put + set_ref + get_ref of ``--refs`` entries on a local store with this revision's
   store and with ``--base-rev``'s (default: the last revision before the object store),
   alternated: the local path must not slow down.
5. far: SeaweedFS behind a relay that delays each chunk (``--rtt-ms``, default 10: an object
   store a network away, which loopback hides): the study on S3 / local, and a fully cached
   rerun with its nodes looked up one at a time vs side by side; ``store verify`` of that
   store with one request at a time vs side by side.
Medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPEC = """
name: store-bench
sources:
  - name: model
    kind: file
    path: data.jsonl
    fields: {prompt: question, completion: response, reference: gold, task_id: id}
    verifier: {kind: numeric, params: {tol: 1.0e-6}}
measure:
  pass_at: {k: 4}
execution: {shard_rows: 256}
"""


def _data(folder: Path, prompts: int) -> Path:
    with open(folder / "data.jsonl", "w") as f:
        for i in range(prompts):
            for j in range(4):
                ans = 2 * i + 1 + (1 if (i + j) % 3 == 0 else 0)
                f.write(json.dumps({"id": f"t{i}", "question": f"What is {i} + {i + 1}?",
                                    "response": f"The answer is {ans}.",
                                    "gold": str(2 * i + 1)}) + "\n")
    spec = folder / "spec.yaml"
    spec.write_text(SPEC)
    return spec


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _study(spec: Path, location: str) -> tuple[float, float]:
    """(wall, CPU seconds of this process) of one cold study."""
    from assay import stages
    from assay.spec import load_spec
    from assay.store import Store

    t0, c0 = time.perf_counter(), _cpu()
    st = Store(location)
    with st.in_use(write_behind=True):  # as the flow holds it for a local runner
        stages.run_study(load_spec(spec), st, progress=None)
    return time.perf_counter() - t0, _cpu() - c0


def _raw_puts(url: str, n: int, threads: int, one_put: bool = False) -> float:
    """PUTs per second of 100-byte objects straight through pyarrow.fs (the server's floor):
    as ``from_uri`` opens it (a multipart upload per object), or ``one_put``: as the store
    opens it (one PutObject per object)."""
    from pyarrow import fs

    from assay.store_files import _one_put

    f, base = fs.FileSystem.from_uri(url)
    if one_put:
        f = _one_put(f)

    def put(i: int) -> None:
        with f.open_output_stream(f"{base}/{threads}/{i}") as out:
            out.write(b"x" * 100)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(put, range(n)))
    return n / (time.perf_counter() - t0)


def _refs(location: str, n: int, threads: int, tag: str,
          behind: bool = False) -> tuple[float, float]:
    """(puts+refs per second, ref reads per second) for ``n`` small entries; ``behind``: the
    puts under ``in_use(write_behind=True)``, as a study makes them (until all are published),
    and the reads from a second ``Store`` (no memory of the puts: each read asks the server)."""
    from assay.store import Store

    st = Store(location)
    if behind:
        t0 = time.perf_counter()
        with st.in_use(write_behind=True):
            for i in range(n):
                st.set_ref(f"bench:{tag}:{i}", st.put_json({"i": i, "tag": tag}))
        put_rate = n / (time.perf_counter() - t0)
        fresh = Store(location)
        t0 = time.perf_counter()
        for i in range(n):
            assert fresh.get_ref(f"bench:{tag}:{i}") is not None
        return put_rate, n / (time.perf_counter() - t0)

    def put(i: int) -> None:
        st.set_ref(f"bench:{tag}:{i}", st.put_json({"i": i, "tag": tag}))

    def get(i: int) -> None:
        assert st.get_ref(f"bench:{tag}:{i}") is not None

    rates = []
    for fn in (put, get):
        t0 = time.perf_counter()
        if threads == 1:
            for i in range(n):
                fn(i)
        else:
            with concurrent.futures.ThreadPoolExecutor(threads) as ex:
                list(ex.map(fn, range(n)))
        rates.append(n / (time.perf_counter() - t0))
    return rates[0], rates[1]


def _far(spec: Path, s3: Any, work: Path, repeats: int, rtt_ms: float) -> None:
    """Section 5: the server ``rtt_ms`` away (a relay delaying each chunk half that, each way):
    a cold study, S3 / local; and a fully cached rerun (``serve_cached``, in this process),
    its nodes looked up one at a time (the inline path) vs side by side (what it does)."""
    from urllib.parse import urlsplit

    from assay import store, upkeep
    from assay.spec import load_spec
    from assay.stages import plan
    from assay.store import Store
    from benchmarks.latency_proxy import LatencyProxy

    med = statistics.median
    u = urlsplit(s3.endpoint)
    assert u.hostname is not None and u.port is not None
    direct = os.environ["AWS_ENDPOINT_URL"]
    with LatencyProxy(u.hostname, u.port, rtt_ms / 2000) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
        try:
            local_t, far_t, one_t, side_t = [], [], [], []
            for r in range(repeats):
                local_t.append(_study(spec, str(work / f"far-local-{r}"))[0])
                far_t.append(_study(spec, s3.url(f"far-{r}"))[0])
            for _ in range(repeats):
                for readers, acc in ((1, one_t), (plan.CACHED_READERS, side_t)):
                    was, plan.CACHED_READERS = plan.CACHED_READERS, readers
                    try:
                        t0 = time.perf_counter()
                        assert plan.serve_cached(load_spec(spec), Store(s3.url("far-0")),
                                                 progress=None) is not None
                        acc.append(time.perf_counter() - t0)
                    finally:
                        plan.CACHED_READERS = was
            one_v, side_v = [], []
            for _ in range(repeats):
                for threads, acc in ((1, one_v), (store.READ_THREADS, side_v)):
                    was, store.READ_THREADS = store.READ_THREADS, threads
                    try:
                        t0 = time.perf_counter()
                        assert not upkeep.verify(Store(s3.url("far-0"))).corrupt
                        acc.append(time.perf_counter() - t0)
                    finally:
                        store.READ_THREADS = was
        finally:
            os.environ["AWS_ENDPOINT_URL"] = direct
    print(f"S3 {rtt_ms:g} ms away: study local {med(local_t):.2f} s, S3 {med(far_t):.2f} s, "
          f"ratio {med(far_t) / med(local_t):.2f}x; fully cached rerun (in process): nodes one "
          f"at a time {med(one_t):.2f} s, side by side {med(side_t):.2f} s, "
          f"{med(one_t) / med(side_t):.1f}x faster; `store verify` of that study's store: one "
          f"request at a time {med(one_v):.2f} s, side by side {med(side_v):.2f} s, "
          f"{med(one_v) / med(side_v):.1f}x faster")


def _old_store(rev: str) -> Any:
    for where in ("src/assay/store.py", "assay/store.py"):  # the src layout moved the package
        shown = subprocess.run(["git", "show", f"{rev}:{where}"], cwd=ROOT, capture_output=True,
                               text=True)
        if shown.returncode == 0:
            break
    else:
        raise SystemExit(f"--base-rev {rev}: no store module there ({shown.stderr.strip()})")
    src = shown.stdout
    path = Path(tempfile.mkdtemp()) / "old_store.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_store", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Store


def _local_loop(store_cls: Any, n: int) -> float:
    st = store_cls(tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP")))
    t0 = time.perf_counter()
    for i in range(n):
        key = st.put_json({"i": i})
        st.set_ref(f"r{i}", key)
    for i in range(n):
        assert st.get_ref(f"r{i}") is not None
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=1500)
    ap.add_argument("--refs", type=int, default=400)
    ap.add_argument("--rtt-ms", type=float, default=10.0)  # section 5's distance to the server
    ap.add_argument("--base-rev", default="d189629")  # the store before it moved behind pyarrow.fs
    args = ap.parse_args()
    from tests.helpers.seaweed import seaweed

    work = Path(tempfile.mkdtemp(prefix="store-bench-"))
    spec = _data(work, args.prompts)
    with seaweed(work / "s3") as s3:
        os.environ.update(s3.env)
        local_t, s3_t, cached_t = [], [], []
        local_c, s3_c = [], []
        # unmeasured: the first study in a process pays its imports (whichever store it ran on)
        _study(spec, str(work / "warm-local"))
        _study(spec, s3.url("warm"))
        for r in range(args.repeats):
            order = [("local", str(work / f"local-{r}")), ("s3", s3.url(f"study-{r}"))]
            if r % 2:
                order.reverse()
            for kind, loc in order:
                wall, cpu = _study(spec, loc)
                (local_t if kind == "local" else s3_t).append(wall)
                (local_c if kind == "local" else s3_c).append(cpu)
        cached_c = []
        # as an installed package runs: with its bytecode (pip compiles it at install; a
        # PYTHONDONTWRITEBYTECODE environment would compile every module on every rerun), which
        # an unmeasured first rerun writes
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = str(ROOT)
        for r in range(-1, args.repeats):
            t0 = time.perf_counter()
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.run([str(Path(sys.executable).with_name("assay")), "run", str(spec),
                                "--store", s3.url("study-0"), "--output",
                                str(work / f"cached-{r}")], cwd=work, capture_output=True,
                               text=True, env=env)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            assert p.returncode == 0 and " 0 computed" in p.stderr, p.stderr[-2000:]
            if r >= 0:
                cached_t.append(time.perf_counter() - t0)
                cached_c.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        med = statistics.median
        print(f"study ({args.prompts} prompts x 4 rows, shards of 256): local "
              f"{med(local_t):.2f} s {sorted(round(x, 2) for x in local_t)}, S3 "
              f"{med(s3_t):.2f} s {sorted(round(x, 2) for x in s3_t)}, ratio "
              f"{med(s3_t) / med(local_t):.2f}x (goal <= 1.2x); CPU of this process: local "
              f"{med(local_c):.2f} s, S3 {med(s3_c):.2f} s")
        print(f"cached rerun against S3 (assay run, fast path): {med(cached_t):.2f} s "
              f"{sorted(round(x, 2) for x in cached_t)} (goal < 3 s); CPU {med(cached_c):.2f} s")
        _far(spec, s3, work, args.repeats, args.rtt_ms)
        for one_put in (False, True):
            for threads in (1, 8):
                rate = med([_raw_puts(s3.url(f"raw-{one_put}-{r}"), args.refs, threads, one_put)
                            for r in range(args.repeats)])
                how = "one PutObject each" if one_put else "from_uri's multipart uploads"
                print(f"server floor: 100-byte PUTs through pyarrow.fs ({how}), {threads} "
                      f"thread(s): {rate:.0f}/s")
        for kind, loc in (("local", str(work / "refs")), ("S3", s3.url("refs"))):
            for threads in (1, 8):
                puts, gets = zip(*[_refs(loc, args.refs, threads, f"{threads}-{r}")
                                   for r in range(args.repeats)], strict=True)
                print(f"refs on {kind}, {threads} thread(s): put+set_ref {med(puts):.0f}/s, "
                      f"get_ref {med(gets):.0f}/s")
        puts, gets = zip(*[_refs(s3.url("refs-behind"), args.refs, 1, f"b-{r}", behind=True)
                           for r in range(args.repeats)], strict=True)
        print(f"refs on S3, 1 thread, as a study writes them (write-behind, until all are "
              f"published): put+set_ref {med(puts):.0f}/s; get_ref by a fresh Store (each read "
              f"asks the server) {med(gets):.0f}/s")
    from assay.store import Store

    base = args.base_rev
    old = _old_store(base)
    new_t, old_t = [], []
    for r in range(args.repeats):
        pair = [(new_t, Store), (old_t, old)] if r % 2 == 0 else [(old_t, old), (new_t, Store)]
        for acc, cls in pair:
            acc.append(_local_loop(cls, args.refs))
    print(f"local store, {args.refs} x (put_json + set_ref + get_ref): this revision "
          f"{statistics.median(new_t) * 1e3:.0f} ms, {base} "
          f"{statistics.median(old_t) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
