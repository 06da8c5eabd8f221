"""Loading the bundled MiniLM: torch alone vs transformers' AutoModel vs sentence-transformers.

Run: ``.venv/bin/python benchmarks/encoder_load.py [--repeats 5]``

Each load is a fresh interpreter (so no import is shared) that imports assay, then times
``load_encoder(bundled_model_path(), backend=...)`` to a model ready to embed, and checks all
give the same bytes on a few texts. ``auto`` runs the MiniLM's BERT in torch alone
(:mod:`assay.reward.bert`), ``transformers`` the same layout over AutoModel, and
``sentence-transformers`` the library itself. The backends rotate; medians and per-run ratios
against ``auto``.

Measured 2026-12-02 (a slower VM day), 3 rotated runs: torch alone 2.79 s; transformers' AutoModel
8.98 s -> 3.22x (per run 2.96, 3.34, 3.04); sentence-transformers 11.22 s -> 4.02x (4.02, 4.44,
3.71); the same embedding bytes from all three.

Measured 2026-12-02 on the quiet 2-core VM, before the torch-only BERT, 5 alternated pairs:
the transformers path 5.31 s, sentence-transformers 7.67 s -> 1.44x (per pair 0.89, 1.37, 1.54,
1.48, 1.35); same embedding bytes. The load sits on the study graph's critical path on a CPU-only
box (README, graph section).
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
    times: dict[str, list[float]] = {"auto": [], "transformers": [], "sentence-transformers": []}
    seen: dict[str, str] = {}
    for i in range(args.repeats):
        order = list(times)[i % 3:] + list(times)[:i % 3]
        for backend in order:
            doc = one(backend)
            times[backend].append(doc["s"])
            seen.setdefault(backend, doc["bytes"])
            assert seen[backend] == doc["bytes"], f"{backend}: embeddings differ by run"
    same = len(set(seen.values())) == 1
    med = {k: statistics.median(v) for k, v in times.items()}
    parts = []
    for k in ("transformers", "sentence-transformers"):
        pairs = [b / a for a, b in zip(times["auto"], times[k])]
        parts.append(f"{k} {med[k]:.2f} s -> {med[k] / med['auto']:.2f}x (per run "
                     f"{', '.join(f'{x:.2f}' for x in pairs)})")
    print(f"load to a ready model, fresh process, medians of {args.repeats}: torch alone (auto) "
          f"{med['auto']:.2f} s; {'; '.join(parts)}; same embedding bytes: {same}")

if __name__ == "__main__":
    main()
