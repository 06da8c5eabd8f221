"""Hand-made nightly run directories for the gate and history tests (no flow, no Prefect)."""

from __future__ import annotations

import json
from pathlib import Path

import assay

SPECDEF = "specdef:test"


def make_rows(rates: list[float], k: int = 4,
              marker: dict[str, list[float]] | None = None) -> assay.Rows:
    """Task i passes round(rates[i] * k) of its k samples; optional per-task marker values."""
    prompts, comps, rewards, markers = [], [], [], []
    for i, r in enumerate(rates):
        c = round(r * k)
        prompts.append(f"q{i}")
        comps.append([f"a{j}" for j in range(k)])
        rewards.append([float(j < c) for j in range(k)])
        markers.append([{n: v[i] for n, v in (marker or {}).items()} for _ in range(k)])
    return assay.rows(prompts, comps, rewards, task_ids=[f"t{i}" for i in range(len(rates))],
                      markers=markers)


def make_night(base: Path, night: str, rows: dict[str, assay.Rows], specdef: str = SPECDEF) -> Path:
    d = base / night
    (d / "rows").mkdir(parents=True)
    for name, r in rows.items():
        r.to_parquet(d / "rows" / f"{name}.parquet")
    (d / "report.md").write_text("# report\n")
    (d / "run.json").write_text(json.dumps({"spec_definition": specdef, "study": "s"}))
    return d
