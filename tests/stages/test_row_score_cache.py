"""Reward-model row scores are cached per row input, not per shard (issue 49): an inserted,
reordered or regraded record asks the model only for inputs it never scored, a killed scoring
run resumes, and scores an earlier version cached per shard still serve without a model call."""

from __future__ import annotations

import importlib
import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assay import stages
from assay.hashing import combine
from assay.models.journal import Journal
from assay.spec import load_spec
from assay.stages.score_rows import ROW_PROTOCOL, clear_model_cache, inputs_checksum
from assay.store import Store

# A reward model as a user writes one; CALLS counts the completions it scores, FAIL_AT (set by a
# test) makes the call that would reach that many scored completions fail, as a killed run would
RM_MODULE = '''
CALLS = []
FAIL_AT = None


def score(prompts, responses):
    if FAIL_AT is not None and sum(CALLS) + len(responses) >= FAIL_AT:
        raise RuntimeError("killed")
    CALLS.append(len(responses))
    return [float(len(r)) + 0.1 * len(p) for p, r in zip(prompts, responses)]
'''
#: 12 distinct prompts with 2 distinct completions each: 24 rows, 2 shards of 12
RECORDS = [{"id": f"t{i}", "q": f"question {i}?", "a": f"{i + j}" + "x" * j, "g": str(i)}
           for i in range(12) for j in range(2)]
SPEC = """
name: rowscores
sources:
  - name: s
    kind: file
    path: d.jsonl
    fields: {prompt: q, completion: a, reference: g, task_id: id}
    verifier: {kind: exact_match}
reward:
  models: [{name: cnt, kind: function, function: "cnt_rm:score", params: {batched: true}}]
  data: null
  score: {sources: [s]}
measure: {pass_at: {k: 2}}
execution: {shard_rows: 12}
"""


@pytest.fixture
def rm(tmp_path: Path):
    """The counting reward model's module (a fresh copy per test: one built by an earlier test
    would count into that test's CALLS)."""
    clear_model_cache()
    sys.modules.pop("cnt_rm", None)
    (tmp_path / "cnt_rm.py").write_text(RM_MODULE)
    sys.path.insert(0, str(tmp_path))  # a test sets FAIL_AT before the study imports it
    yield lambda: importlib.import_module("cnt_rm")
    sys.modules.pop("cnt_rm", None)
    clear_model_cache()
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def run(folder: Path, records: list[dict], store: Store) -> stages.StudyRun:
    folder.mkdir(exist_ok=True)
    (folder / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "s.yaml").write_text(SPEC)
    (folder / "cnt_rm.py").write_text(RM_MODULE)
    return stages.run_study(load_spec(folder / "s.yaml"), store, progress=None)


def rows_of(store: Store, r: stages.StudyRun) -> pa.Table:
    return stages.concat_rows(store, r.graded["s"]).to_arrow()


def scored(rm) -> int:
    return sum(rm().CALLS)


def test_an_inserted_record_scores_only_its_completion(tmp_path, rm):
    store = Store(tmp_path / "store")
    first = run(tmp_path / "a", RECORDS, store)
    assert scored(rm) == 24 and len(first.graded["s"]) == 2
    new = {"id": "t99", "q": "a new question?", "a": "fresh", "g": "no"}
    again = run(tmp_path / "b", [new] + RECORDS, store)
    # every shard boundary moved, yet the model saw only the one input it never scored
    assert scored(rm) == 25 and rm().CALLS[2:] == [1]
    summaries = [r.summary for r in again.results if r.stage == "score-rows" and not r.cached]
    assert sum(s["scored"]["rm:cnt"] for s in summaries) == 1
    # and the rows equal a cold run's, byte for byte
    cold_store = Store(tmp_path / "cold")
    cold = run(tmp_path / "c", [new] + RECORDS, cold_store)
    assert rows_of(store, again).equals(rows_of(cold_store, cold))
    assert (stages.concat_rows(store, again.graded["s"]).checksum()
            == stages.concat_rows(cold_store, cold.graded["s"]).checksum())
    markers = [dict(m) for m in rows_of(store, again).column("markers").to_pylist()]
    expect = [float(len(r["a"])) + 0.1 * len(r["q"]) for r in [new] + RECORDS]
    assert [m["rm:cnt"] for m in markers] == expect  # each score is its own row's


def test_a_shuffled_file_scores_nothing(tmp_path, rm):
    store = Store(tmp_path / "store")
    run(tmp_path / "a", RECORDS, store)
    shuffled = RECORDS[:]
    random.Random(3).shuffle(shuffled)
    again = run(tmp_path / "b", shuffled, store)
    assert scored(rm) == 24
    assert all(r.summary["scores"] == {"rm:cnt": "cached"}
               for r in again.results if r.stage == "score-rows" and not r.cached)


def test_a_changed_reference_regrades_and_scores_nothing(tmp_path, rm):
    store = Store(tmp_path / "store")
    first = run(tmp_path / "a", RECORDS, store)
    changed = [{**r, "g": "1x"} if r["id"] == "t0" else r for r in RECORDS]  # row 2 passes now
    again = run(tmp_path / "b", changed, store)
    assert scored(rm) == 24
    assert any(s.startswith("grade") for s in again.computed_stages)
    before, after = rows_of(store, first), rows_of(store, again)
    assert before.column("reward").to_pylist() != after.column("reward").to_pylist()
    assert before.column("markers").equals(after.column("markers"))


def test_a_killed_scoring_run_resumes_from_the_journalled_chunks(tmp_path, rm, monkeypatch):
    from assay.stages import score_rows

    monkeypatch.setattr(score_rows, "COMMIT_ROWS", 4, raising=False)
    store = Store(tmp_path / "store")
    one_shard = RECORDS[:12]
    rm().FAIL_AT = 10  # the third chunk of 4 fails: the first 8 scores were committed
    with pytest.raises(Exception, match="killed"):
        run(tmp_path / "a", one_shard, store)
    assert scored(rm) == 8
    rm().FAIL_AT = None
    again = run(tmp_path / "a", one_shard, store)
    assert scored(rm) == 12 and rm().CALLS == [4, 4, 4]  # the 4 never committed, no other
    cold_store = Store(tmp_path / "cold")
    cold = run(tmp_path / "c", one_shard, cold_store)
    assert rows_of(store, again).equals(rows_of(cold_store, cold))


def test_scores_an_earlier_version_cached_per_shard_still_serve(tmp_path, rm):
    from assay.stages.score_rows import journal_file, journal_id

    store = Store(tmp_path / "store")
    first = run(tmp_path / "a", RECORDS, store)
    spec = load_spec(tmp_path / "a" / "s.yaml")
    (mspec,) = spec.reward.scoring_models()
    ident = mspec.identity(spec.paths)
    # the store as the per-shard cache left it: one score table per shard's inputs, no journal,
    # no score-rows stage outputs
    for part in first.graded["s"]:
        table = stages.load_rows(store, part).to_arrow()
        scores = [dict(m)["rm:cnt"] for m in table.column("markers").to_pylist()]
        key = combine("rowscores", ident, inputs_checksum(table), ROW_PROTOCOL)
        store.set_ref(f"assay-rowscores/{key}", store.put_table(pa.table({"score": scores})),
                      {"model": "cnt", "rows": len(scores)})
    (store.root / journal_file(ident)).unlink()
    for r in first.results:
        if r.stage == "score-rows":
            store.delete_ref(f"assay-stage/{r.key}")
    again = run(tmp_path / "b", RECORDS, store)
    assert scored(rm) == 24  # served from the old tables: no model call
    assert rows_of(store, again).equals(rows_of(store, first))
    # and kept per row now: a shuffled study finds them in the journal
    assert len(Journal(store, journal_id(ident)).load()) == 24
    run(tmp_path / "c", RECORDS[::-1], store)
    assert scored(rm) == 24


def test_gc_keeps_the_row_score_journal_a_kept_run_names(tmp_path, rm):
    import os
    import time

    from assay import upkeep
    from assay.stages.score_rows import journal_file

    store = Store(tmp_path / "store")
    started = time.time()
    first = run(tmp_path / "a", RECORDS, store)
    kept = upkeep.RunDir(tmp_path / "run", "rowscores",
                         tuple(sorted({r.key for r in first.results})), started, None)
    spec = load_spec(tmp_path / "a" / "s.yaml")
    (mspec,) = spec.reward.scoring_models()
    path = store.root / journal_file(mspec.identity(spec.paths))
    old = started - 10 * 86400  # written long before the kept run: kept only by being named
    os.utime(path, (old, old))
    res = upkeep.gc(store, [kept], keep_nights=1, grace=0.0)
    assert path.exists() and res.removed_journals == 0
    shuffled = RECORDS[::-1]  # every score-rows shard recomputes, from the journal alone
    run(tmp_path / "b", shuffled, store)
    assert scored(rm) == 24


HF_SPEC = SPEC.replace(
    '[{name: cnt, kind: function, function: "cnt_rm:score", params: {batched: true}}]',
    "[{name: tiny, kind: hf, path: PATH, params: {device: cpu}}]")


def run_hf(folder: Path, records: list[dict], store: Store, model: Path
           ) -> tuple[dict[str, bytes], stages.StudyRun]:
    """The study with the tests' tiny transformers reward model, written out as `assay run`
    writes it: report.json and each source's rows Parquet, as bytes."""
    from assay.report import write_run_dir

    folder.mkdir(exist_ok=True)
    (folder / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "s.yaml").write_text(HF_SPEC.replace("PATH", str(model)))
    r = stages.run_study(load_spec(folder / "s.yaml"), store, progress=None)
    rows = {name: stages.concat_rows(store, parts) for name, parts in r.graded.items()}
    write_run_dir(folder / "out", stages.report_files(store, r.report), rows, {})
    return {f: (folder / "out" / f).read_bytes() for f in ("report.json", "rows/s.parquet")}, r


def test_an_hf_models_rerun_after_an_insert_equals_a_cold_run_byte_for_byte(tmp_path):
    """A transformers reward model: the rerun scores only the inserted record's input (alone),
    the cold run scores it among its shard's other inputs; rows and report are the same bytes."""
    from helpers.reward_fixtures import build_tiny_reward_model

    clear_model_cache()
    model = build_tiny_reward_model(tmp_path / "tiny_rm")
    store = Store(tmp_path / "store")
    run_hf(tmp_path / "a", RECORDS, store, model)
    new = {"id": "t99", "q": "what is the capital of a new question?", "a": "Paris, x", "g": "no"}
    edited = [new] + RECORDS
    again, rerun = run_hf(tmp_path / "b", edited, store, model)
    # every shard boundary moved, yet the model scored only the one new input
    assert sum(r.summary["scored"]["rm:tiny"] for r in rerun.results
               if r.stage == "score-rows" and not r.cached) == 1
    clear_model_cache()
    cold, _ = run_hf(tmp_path / "c", edited, Store(tmp_path / "cold"), model)
    assert again["rows/s.parquet"] == cold["rows/s.parquet"]
    assert again["report.json"] == cold["report.json"]
    markers = pq.read_table(tmp_path / "c" / "out" / "rows" / "s.parquet").column("markers")
    scores = [dict(m)["rm:tiny"] for m in markers.to_pylist()]
    assert len(set(scores)) > 10  # the scores are real and varied, so equality means something
    # and the report measures them (so its bytes follow the scores' bits)
    labels = [m["label"] for m in json.loads(cold["report.json"])["measurements"]]
    assert "reward_rows[s, rm:tiny]" in labels
    clear_model_cache()


def test_hf_row_scores_of_the_old_batched_scoring_are_not_reused(tmp_path, rm):
    """hf row scores are keyed with KIND_PROTOCOL: a journal the old (padded-batch) scoring wrote
    under the bare identity is never read; a function model's keys are unchanged."""
    from assay.stages.score_rows import journal_file, model_identity

    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "s.yaml").write_text(HF_SPEC.replace("PATH", str(tmp_path / "m")))
    spec = load_spec(folder / "s.yaml")
    (hf,) = spec.reward.scoring_models()
    assert journal_file(model_identity(hf, spec.paths)) != journal_file(hf.identity(spec.paths))
    (folder / "t.yaml").write_text(SPEC)
    fspec = load_spec(folder / "t.yaml")
    (fn,) = fspec.reward.scoring_models()
    assert model_identity(fn, fspec.paths) == fn.identity(fspec.paths)
