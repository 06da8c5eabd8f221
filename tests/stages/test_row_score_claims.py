"""Overlapping runs on one store score each new row input once (issue 49): row scoring claims its
missing inputs (assay.models.claims), waits for the inputs another live run claimed to appear in
the reward model's journal, and takes over those of a claimant that died."""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from assay import stages
from assay.hashing import canonical_json
from assay.models.claims import Claims
from assay.models.journal import Journal
from assay.spec import load_spec
from assay.stages.score_rows import clear_model_cache
from assay.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_row_score_cache import RECORDS  # noqa: E402
from test_row_score_cache import SPEC as CACHE_SPEC  # noqa: E402

# A counting reward model; GATE (set by a test) is called before each scoring call
RM_MODULE = '''
CALLS = []
GATE = None


def score(prompts, responses):
    if GATE is not None:
        GATE()
    CALLS.append(len(responses))
    return [float(len(r)) + 0.1 * len(p) for p, r in zip(prompts, responses)]
'''
#: the row-score cache test's 12 prompts x 2 completions and study, all 24 inputs in one shard,
#: so a run holds one claim at a time (two claim documents: two runs)
SPEC = CACHE_SPEC.replace("name: rowscores", "name: rowclaims").replace("shard_rows: 12",
                                                                        "shard_rows: 24")
assert SPEC.count("rowclaims") == 1 and "shard_rows: 24" in SPEC


@pytest.fixture
def study(tmp_path: Path, monkeypatch):
    """The study's folder, and its counting reward model's module (fresh per test)."""
    monkeypatch.setenv("ASSAY_CLAIM_POLL_S", "0.02")
    clear_model_cache()
    sys.modules.pop("cnt_rm", None)
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (folder / "s.yaml").write_text(SPEC)
    (folder / "cnt_rm.py").write_text(RM_MODULE)
    sys.path.insert(0, str(folder))
    yield folder, importlib.import_module("cnt_rm")
    sys.modules.pop("cnt_rm", None)
    clear_model_cache()
    while str(folder) in sys.path:
        sys.path.remove(str(folder))


def run(folder: Path, store: Store) -> stages.StudyRun:
    return stages.run_study(load_spec(folder / "s.yaml"), store, progress=None)


def rows_bytes(store: Store, r: stages.StudyRun) -> bytes:
    """The scored rows as Arrow IPC bytes (byte-identical rows give identical bytes)."""
    import pyarrow as pa

    t = stages.concat_rows(store, r.graded["s"]).to_arrow()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def claim_docs(store: Store) -> list[str]:
    return [e.rel for e in store.entries("claims")]


def journal_rel(store: Store) -> str:
    """The reward model's row-score journal (the study's only journal: its source is a file)."""
    (rel,) = [e.rel for e in store.entries("journals") if e.rel.endswith(".jsonl")]
    return rel


def reference(folder: Path, tmp_path: Path, rm) -> tuple[bytes, list[dict]]:
    """A lone run's rows and its journal's records (each input's score, keyed)."""
    ref_store = Store(tmp_path / "ref")
    ref = run(folder, ref_store)
    hexd = journal_rel(ref_store).rsplit("/", 1)[-1].removesuffix(".jsonl")
    recs = list(Journal(ref_store, f"rsjournal:{hexd}").load().values())
    assert len({r["key"] for r in recs}) == 24 == sum(rm.CALLS)
    return rows_bytes(ref_store, ref), recs


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_overlapping_runs_score_each_input_once(study, tmp_path, where, request,
                                                   monkeypatch):
    folder, rm = study
    # the report draws in forked children when it has cores to spare (two reports at once in
    # one process draw one at a time: assay.report._DRAWING)
    monkeypatch.setattr("assay.grading.cores", lambda: 2)
    ref_rows, _ = reference(folder, tmp_path, rm)
    before = sum(rm.CALLS)
    # an object store: its journal is segments, published at close, listed by a waiter
    store = (Store(tmp_path / "st") if where == "local"
             else Store(request.getfixturevalue("s3").url("overlap")))
    entered: list[str] = []
    lock = threading.Lock()

    def gate() -> None:
        """The first scoring call holds on until the other run is known to overlap it: it has
        entered the model too (the old code) or claimed inputs (its claim document is there).
        Either way both runs are scoring the same new inputs at once, whatever the timing."""
        with lock:
            entered.append(threading.current_thread().name)
            if len(entered) > 1:
                return
        deadline = time.monotonic() + 60  # a bailout only: the test fails if it is reached
        while len(entered) < 2 and len(claim_docs(store)) < 2:
            assert time.monotonic() < deadline, "the other run never overlapped this one"
            time.sleep(0.005)

    rm.GATE = gate
    got: dict[str, stages.StudyRun] = {}
    errors: list[BaseException] = []

    def one(name: str) -> None:
        try:
            got[name] = run(folder, store)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread below
            errors.append(e)

    ts = [threading.Thread(target=one, args=(n,), name=n) for n in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in ts)
    assert sum(rm.CALLS) - before == 24  # every input scored once, by one run or the other
    assert rows_bytes(store, got["a"]) == rows_bytes(store, got["b"]) == ref_rows
    assert claim_docs(store) == []  # both released


def test_inputs_a_live_run_claimed_are_read_from_its_answers(study, tmp_path):
    folder, rm = study
    ref_rows, recs = reference(folder, tmp_path, rm)
    before = sum(rm.CALLS)
    store = Store(tmp_path / "st")
    ref_rel = "journals/" + journal_rel(Store(tmp_path / "ref")).rsplit("/", 1)[-1]
    other = Claims(store, ref_rel)  # another run, scoring every input right now
    keys = [r["key"] for r in recs]
    assert other.claim(keys) == keys
    got: list[stages.StudyRun] = []
    t = threading.Thread(target=lambda: got.append(run(folder, store)))
    t.start()
    # the waiter's own claim document appears once it has looked (the old code writes none)
    while len(claim_docs(store)) < 2 and t.is_alive():
        time.sleep(0.01)
    log = Journal(store, "rsjournal:" + ref_rel.removeprefix("journals/").removesuffix(".jsonl"))
    for rec in recs:  # the other run's scores arrive, then its claim goes
        log.append(rec)
    log.close()
    other.release()
    t.join(120)
    assert not t.is_alive()
    assert sum(rm.CALLS) == before  # nothing scored twice
    assert rows_bytes(store, got[0]) == ref_rows
    assert claim_docs(store) == []


def test_a_dead_claimants_inputs_are_taken_over_and_scored_once(study, tmp_path):
    folder, rm = study
    ref_rows, recs = reference(folder, tmp_path, rm)
    before = sum(rm.CALLS)
    store = Store(tmp_path / "st")
    hexd = journal_rel(Store(tmp_path / "ref")).rsplit("/", 1)[-1].removesuffix(".jsonl")
    # a claimant killed mid-run: its claim, never renewed, lapses 0.3 s (the store's clock)
    # after it was written; no score was journalled
    dead = f"claims/{hexd}/dead.json"
    store.write_file(dead, canonical_json({"kind": "claim", "ttl": 0.3,
                                           "keys": [r["key"] for r in recs],
                                           "host": "gone", "pid": -1}))
    again = run(folder, store)
    assert sum(rm.CALLS) - before == 24  # each scored once, by the taker
    assert rows_bytes(store, again) == ref_rows
    assert dead not in claim_docs(store) and claim_docs(store) == []


def test_a_lone_run_lists_the_claims_once_and_leaves_none(study, tmp_path, monkeypatch):
    """With no other run, claiming costs one claim write and one listing of the journal's
    claims, and the claim is gone at the end; a run with nothing new to score takes none."""
    folder, rm = study
    ref_rows, _ = reference(folder, tmp_path, rm)
    listed: list[str] = []
    entries = Store.entries

    def counting(self: Store, sub: str) -> list:
        if sub.startswith("claims"):
            listed.append(sub)
        return entries(self, sub)

    monkeypatch.setattr(Store, "entries", counting)
    store = Store(tmp_path / "st")
    first = run(folder, store)
    assert len(listed) == 1
    assert rows_bytes(store, first) == ref_rows
    monkeypatch.setattr(Store, "entries", entries)
    assert claim_docs(store) == []
    monkeypatch.setattr(Store, "entries", counting)
    clear_model_cache()
    (folder / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS[::-1]))
    again = run(folder, store)  # reordered: a new shard, every input journalled
    assert [r.summary["scores"] for r in again.results
            if r.stage == "score-rows" and not r.cached] == [{"rm:cnt": "cached"}]
    assert len(listed) == 1


def test_inputs_a_failed_claimant_released_unscored_are_scored_by_the_waiter(study, tmp_path):
    """A claimant whose model raised releases its claim with no score journalled: the waiter
    scores those inputs itself, once, and only after the release."""
    folder, rm = study
    ref_rows, recs = reference(folder, tmp_path, rm)
    before = sum(rm.CALLS)
    store = Store(tmp_path / "st")
    ref_rel = "journals/" + journal_rel(Store(tmp_path / "ref")).rsplit("/", 1)[-1]
    other = Claims(store, ref_rel)
    keys = [r["key"] for r in recs]
    assert other.claim(keys) == keys
    released = threading.Event()
    seen: list[bool] = []  # per scoring call: had the other claim gone yet
    rm.GATE = lambda: seen.append(released.is_set())
    got: list[stages.StudyRun] = []
    t = threading.Thread(target=lambda: got.append(run(folder, store)))
    t.start()
    while len(claim_docs(store)) < 2 and t.is_alive():
        time.sleep(0.01)
    released.set()
    other.release()  # its model failed: nothing journalled
    t.join(120)
    assert not t.is_alive()
    assert seen == [True] and sum(rm.CALLS) - before == 24
    assert rows_bytes(store, got[0]) == ref_rows
    assert claim_docs(store) == []
