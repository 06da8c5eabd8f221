"""The report's source lines read shard by shard (issue 50): rows, tasks, guard counts and
unjudged reasons equal to those of all rows at once, one shard's table held at a time."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import assay
from assay.report import guard_counts
from assay.rows import Rows
from assay.stages import report
from assay.unjudged import unjudged_summary

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_cached_outputs import finished  # noqa: E402


def _rows(seed: int) -> pa.Table:
    """30 tasks of 1-4 rows; some unjudged (several reasons), some stopped by a guard."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 4) for _ in range(30)]
    t = assay.rows([f"q{i}" for i in range(30)], [[f"c{j}" for j in range(n)] for n in sizes],
                   [[1.0] * n for n in sizes], task_ids=[f"t{i}" for i in range(30)]).to_arrow()
    reward, status, reason, meta = [], [], [], []
    for _ in range(t.num_rows):
        u = rng.random()
        reward.append(None if u < 0.3 else float(u < 0.6))
        status.append("error" if u < 0.1 else "unjudged" if u < 0.3 else "ok")
        reason.append(rng.choice(["KeyError: 'x'", "no   answer", "timeout"]) if u < 0.3 else None)
        meta.append(json.dumps({"guard": rng.choice(["plain_data", "patched"])})
                    if rng.random() < 0.2 else None)
    for name, col, typ in (("reward", reward, pa.float64()), ("judge_status", status, pa.string()),
                           ("reason", reason, pa.string()), ("judge_meta", meta, pa.string())):
        t = t.set_column(t.column_names.index(name), name, pa.array(col, typ))
    return t


@pytest.mark.parametrize("shard", [1, 5, 13, 1000])
def test_source_counts_equal_those_of_all_rows(monkeypatch: pytest.MonkeyPatch,
                                                shard: int) -> None:
    t = _rows(shard)
    shards = [t.slice(i, shard) for i in range(0, t.num_rows, shard)]  # tasks split across
    monkeypatch.setattr(report, "shard_tables", lambda store, parts: iter(shards))
    got = report.source_counts(None, [])  # type: ignore[arg-type]
    whole = Rows(t)
    assert (got.rows, got.tasks) == (t.num_rows, 30)
    assert got.guards == guard_counts(whole) and sum(got.guards.values()) > 0
    assert unjudged_summary(got.unjudged) == unjudged_summary(whole)
    assert unjudged_summary(whole)["rows"] > 0


def test_the_report_reads_one_shard_at_a_time(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import assay.report as assay_report

    seen: list[int] = []
    real = assay_report.guard_counts

    def spy(rows: object) -> dict[str, int]:
        seen.append(len(rows))  # type: ignore[arg-type]
        return real(rows)

    monkeypatch.setattr(assay_report, "guard_counts", spy)
    store, _, run = finished(tmp_path)  # shard_rows: 8: a's 10 rows graded in 4 shards
    from assay.stages.cache import load_rows

    shards = [load_rows(store, p).to_arrow().num_rows
              for parts in run.graded.values() for p in parts]  # type: ignore[attr-defined]
    assert len(run.graded["a"]) > 1  # type: ignore[attr-defined]
    assert sorted(seen) == sorted(shards)  # each shard's table, never a source's concatenated
