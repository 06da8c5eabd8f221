"""The report's figures: drawn one after another vs side by side (``assay.report.render_plots``).

Run: ``.venv/bin/python benchmarks/report_figures.py [--repeats 5]``

In one warm process (matplotlib imported, fonts loaded, as at a run's report stage), the report's
estimate plot drawn for a list of jobs: serially (``_plot_estimates`` per job, what the report
did before) and through ``render_plots`` (each extra core draws its share in a forked child).
Alternated, medians and per-pair ratios; checks both give the same PNG bytes.

Measured 2026-12-02 evening on the 2-core VM, 5 alternated pairs each, same bytes: two figures
(10 and 4 estimates) 0.545 s -> 0.341 s, 1.60x (per pair 1.55, 1.58, 2.30, 1.06, 1.55); four
figures 1.111 s -> 0.657 s, 1.69x (1.76, 1.68, 1.69, 2.31, 1.76).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from assay import report  # noqa: E402


def jobs(n_figures: int) -> list[tuple]:
    ests = [{"label": f"source{i % 2} minilm: estimate {i}", "value": 0.3 + 0.05 * i,
             "low": 0.2 + 0.05 * i, "high": 0.4 + 0.05 * i, "n": 64} for i in range(10)]
    sizes = [10, 4, 7, 12][:n_figures]
    return [(f"figure {k}", ests[:s] if s <= 10 else ests + ests[:s - 10], "rate")
            for k, s in enumerate(sizes)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--figures", type=int, default=2)
    args = ap.parse_args()
    work = jobs(args.figures)
    report._plot_estimates(*work[0])  # warm: fonts, caches (a run's loader imports them earlier)
    serial, side = [], []
    for i in range(args.repeats):
        for mode in ("serial", "side") if i % 2 == 0 else ("side", "serial"):
            t0 = time.perf_counter()
            if mode == "serial":
                a = [report._plot_estimates(*j) for j in work]
                serial.append(time.perf_counter() - t0)
            else:
                b = report.render_plots(work)
                side.append(time.perf_counter() - t0)
        assert a == b, "side by side drew different bytes"
    s, p = statistics.median(serial), statistics.median(side)
    pairs = [x / y for x, y in zip(serial, side)]
    print(f"{len(work)} figures, {args.repeats} alternated pairs: one after another {s:.3f} s, "
          f"side by side {p:.3f} s -> {s / p:.2f}x (per pair "
          f"{', '.join(f'{x:.2f}' for x in pairs)}); same bytes: True")


if __name__ == "__main__":
    main()
