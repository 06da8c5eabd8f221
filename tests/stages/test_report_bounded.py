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


def test_generation_summary_shard_by_shard_equals_all_rows() -> None:
    """Failed requests by cause, token means and totals, the truncated share and the prompts
    whose samples differ at temperature 0, fed one shard at a time, against a count over the
    row dicts."""
    from assay.models.base import failure_cause
    from assay.spec import parse_spec

    spec = parse_spec(
        "name: s\nsources:\n  - name: m\n    kind: file\n    path: m.jsonl\n"
        "    fields: {prompt: q}\n    generate: {model: {kind: openai, model: x, base_url: "
        "'http://localhost:1'}, k: 3, params: {temperature: 0}}\n    verifier: {kind: "
        "exact_match}\n")
    gspec = spec.sources[0].generate
    rng = random.Random(11)
    prompts, comps, markers = [], [], []
    for i in range(40):
        prompts.append(f"q{i}")
        comps.append([rng.choice(["a", "b"]) if i % 3 else "a" for _ in range(3)])
        markers.append([{"completion_tokens": float(rng.randint(1, 50)),
                         "prompt_tokens": 0.1 * rng.randint(1, 30),
                         **({"truncated": float(rng.random() < 0.3)} if j else {}),
                         **({"stop_trimmed": 1.0} if rng.random() < 0.2 else {})}
                        for j in range(3)])
    t = assay.rows(prompts, comps, task_ids=[f"t{i}" for i in range(40)],
                   markers=markers).to_arrow()
    status = ["gen_error" if rng.random() < 0.15 else "ok" for _ in range(t.num_rows)]
    reason = [rng.choice(["HTTP 503: busy", "timeout after 30 s", None]) if s == "gen_error"
              else None for s in status]
    for name, col in (("judge_status", status), ("reason", reason)):
        t = t.set_column(t.column_names.index(name), name, pa.array(col, pa.string()))
    rows = t.to_pylist()
    ok = [dict(r["markers"]) for r in rows if r["judge_status"] != "gen_error"]
    texts: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        if r["judge_status"] != "gen_error":
            texts.setdefault((r["task_id"], r["prompt"]), set()).add(r["final_text"])
    causes: dict[str, int] = {}
    for r in rows:
        if r["judge_status"] == "gen_error":
            causes[failure_cause(r["reason"])] = causes.get(failure_cause(r["reason"]), 0) + 1
    trunc = [m["truncated"] for m in ok if "truncated" in m]
    for shard in (1, 7, 1000):
        tally = report.GenerationTally(gspec)
        for i in range(0, t.num_rows, shard):
            tally.add(t.slice(i, shard))
        got = tally.summary()
        assert got == report.generation_summary(Rows(t), gspec)
        assert (got["completions"], got["errors"]) == (len(ok), len(rows) - len(ok))
        assert got["errors_by_cause"] == dict(sorted(causes.items()))
        assert got["differ_at_t0"] == sum(len(v) > 1 for v in texts.values()) > 0
        assert got["truncated_share"] == round(sum(trunc) / len(trunc), 4)
        assert got["completion_tokens_total"] == int(sum(m["completion_tokens"] for m in ok))
        assert got["prompt_tokens_mean"] == round(
            sum(m["prompt_tokens"] for m in ok) / len(ok), 1)
        assert got["stop_trimmed"] == int(sum(m.get("stop_trimmed", 0) for m in ok)) > 0
