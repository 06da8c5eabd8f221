"""Benchmark: time from `assay run` to its first request, warm and in a new folder; medians.

Run: ``.venv/bin/python benchmarks/startup.py [--repeats 5] [--prompts 40] [--sources 2]``.

A loopback OpenAI server (tests/helpers/openai_server.py, in this process, 50 ms per answer)
serves a spec shaped like configs/generate_openai.yaml (k=4, 16 connections, numeric grading).
Each repeat starts ``assay run`` as a subprocess with a fresh store, so every completion is
asked; time to first request is the server's arrival time of the first completion request
minus the moment before the process was started. ``warm``: a folder whose ``.prefect`` exists
(one unmeasured run first); ``new folder``: a new working directory each repeat (the user's
template database exists after the first). ``wall``: until the process exited.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.openai_server import OpenAIServer  # noqa: E402

SOURCE = """  - name: {name}
    kind: file
    path: p.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt}}
      k: {k}
      max_connections: 16
      params: {{temperature: 0.7, top_p: 0.95, max_tokens: 64}}
      seed: {seed}
    verifier: {{kind: numeric}}
"""


def write_study(folder: Path, url: str, prompts: int, sources: int = 1, k: int = 4) -> Path:
    """A generate-and-grade spec over ``prompts`` sums in ``folder``; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "p.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"What is {i} + {i + 1}?", "gold": str(2 * i + 1)})
        + "\n" for i in range(prompts)))
    body = "".join(SOURCE.format(name=f"s{j}", url=url, k=k, seed=j) for j in range(sources))
    spec = folder / "study.yaml"
    spec.write_text(f"name: startup\nsources:\n{body}execution: {{runner: local}}\n")
    return spec


def assay_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def timed_run(srv: OpenAIServer, folder: Path, store: Path) -> tuple[float, float]:
    """(seconds to the first completion request, seconds until `assay run` exited)."""
    shutil.rmtree(store, ignore_errors=True)
    n0 = srv.count()
    t0 = time.monotonic()
    p = subprocess.run([str(Path(sys.executable).parent / "assay"), "run", "study.yaml",
                        "--no-view", "--store", str(store), "--output", str(folder / "out")],
                       cwd=folder, env=assay_env(), capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    if p.returncode != 0 or srv.count() == n0:
        raise RuntimeError(f"assay run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return srv.requests[n0]["_t"] - t0, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--sources", type=int, default=1)
    a = ap.parse_args()
    srv = OpenAIServer(latency=0.05).start()
    base = Path(tempfile.mkdtemp(prefix="assay-startup-"))
    try:
        warm = base / "warm"
        write_study(warm, srv.base_url, a.prompts, a.sources)
        timed_run(srv, warm, warm / "store")  # makes .prefect (and the user's template)
        rows: dict[str, list[tuple[float, float]]] = {"warm": [], "new folder": []}
        for r in range(a.repeats):  # alternated, so load drifts hit both alike
            rows["warm"].append(timed_run(srv, warm, warm / "store"))
            new = base / f"new{r}"
            write_study(new, srv.base_url, a.prompts, a.sources)
            rows["new folder"].append(timed_run(srv, new, new / "store"))
        print(f"{a.prompts} prompts x 4 samples x {a.sources} source(s), {a.repeats} repeats "
              f"(load average {os.getloadavg()[0]:.1f})")
        for name, got in rows.items():
            ttfr = statistics.median(t for t, _ in got)
            wall = statistics.median(w for _, w in got)
            print(f"{name:>10}: first request {ttfr:.2f} s (min {min(t for t, _ in got):.2f}, "
                  f"max {max(t for t, _ in got):.2f}), wall {wall:.2f} s")
    finally:
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
