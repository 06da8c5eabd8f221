"""Loading the bundled MiniLM: the direct transformers path vs sentence-transformers itself.

Run: ``.venv/bin/python benchmarks/encoder_load.py [--repeats 5]``

Each load is a fresh interpreter (so no import is shared) that imports assay, then times
``load_encoder(bundled_model_path(), backend=...)`` to a model ready to embed, and checks both
give the same bytes on a few texts. The two backends alternate; medians and the per-pair ratio.

Measured 2026-12-02 on the quiet 2-core VM, 5 alternated pairs: direct 5.31 s, sentence-transformers
7.67 s -> 1.44x (per pair 0.89, 1.37, 1.54, 1.48, 1.35); same embedding bytes. The load sits on
the study graph's critical path on a CPU-only box (README, graph section).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = """
import json, sys, time
import assay.reward.embedding as e
from assay.reward.sentence_encoder import load_encoder
t0 = time.perf_counter()
enc = load_encoder(e.bundled_model_path(), backend=sys.argv[1])
v = enc.encode(["What is the capital of France?", "Paris.", ""], batch_size=8)
print(json.dumps({"s": time.perf_counter() - t0, "bytes": v.tobytes().hex()}))
"""


def one(backend: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, backend], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        sys.exit(f"{backend} load failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"auto": [], "sentence-transformers": []}
    seen: dict[str, str] = {}
    for i in range(args.repeats):
        order = list(times) if i % 2 == 0 else list(times)[::-1]
        for backend in order:
            doc = one(backend)
            times[backend].append(doc["s"])
            seen.setdefault(backend, doc["bytes"])
            assert seen[backend] == doc["bytes"], f"{backend}: embeddings differ by run"
    same = seen["auto"] == seen["sentence-transformers"]
    d, s = (statistics.median(times[k]) for k in ("auto", "sentence-transformers"))
    pairs = [b / a for a, b in zip(times["auto"], times["sentence-transformers"])]
    print(f"load to a ready model, fresh process, medians of {args.repeats}: direct {d:.2f} s, "
          f"sentence-transformers {s:.2f} s -> {s / d:.2f}x (per pair "
          f"{', '.join(f'{x:.2f}' for x in pairs)}); same embedding bytes: {same}")


if __name__ == "__main__":
    main()
