"""The completion cache is keyed per request, not per shard of rows (issue 49): an edited
reference or metadata field, an inserted or reordered record, asks only for prompts never asked."""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Iterator

import pytest
from helpers.openai_server import OpenAIServer

from assay import stages
from assay.models import generate
from assay.models.journal import Journal
from assay.spec import parse_spec
from assay.store import Store

K = 2
#: 14 prompts, 3 per shard (shard_rows 6 / k 2): 5 shards, the last one short
RECORDS = [{"id": f"q{i}", "question": f"What is {i} + {3 * i + 1}?", "gold": str(4 * i + 1)}
           for i in range(14)]
SPEC = """
name: request-cache
sources:
  - name: ckpt
    kind: file
    path: prompts.jsonl
    fields: {{prompt: question, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt, max_retries: 1}}
      api: chat
      k: {k}
      params: {{temperature: 0.7, max_tokens: 8}}
      seed: 0
      max_connections: 4
      system: "Answer briefly."
    verifier: {{kind: numeric}}
measure:
  pass_at: {{k: 2}}
execution: {{shard_rows: 6}}
"""


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    from assay.models import openai

    openai._BUDGETS.clear()  # a port the OS reuses is another server
    srv = OpenAIServer(["tiny-ckpt"]).start()
    yield srv
    srv.stop()
    openai._BUDGETS.clear()


def run(server, folder, records, store):
    """Run the study on ``records`` (written to ``folder``) into ``store``; (run, requests)."""
    folder.mkdir(exist_ok=True)
    (folder / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    spec = parse_spec(SPEC.format(url=server.base_url, k=K), base_dir=str(folder))
    before = len(server.requests)
    done = stages.run_study(spec, store, progress=None)
    return done, len(server.requests) - before


def results(store, done):
    """What a run hands over: its report files and its graded rows, as bytes."""
    rows = stages.concat_rows(store, done.graded["ckpt"])
    return stages.report_files(store, done.report), rows.to_arrow().to_pylist()


def same_as_cold(server, tmp_path, records, store, done):
    """The run's results equal a cold run's of the same records in a fresh store, byte for byte."""
    cold_store = Store(tmp_path / "cold")
    cold, asked = run(server, tmp_path / "cold-data", records, cold_store)
    assert asked == len(records) * K
    got, want = results(store, done), results(cold_store, cold)
    assert got[0] == want[0]
    assert got[1] == want[1]


def generate_shards(done) -> list[str]:
    return [s for s in done.computed_stages if s.startswith("generate")]


def test_a_changed_reference_asks_nothing_and_regrades(server, tmp_path):
    store = Store(tmp_path / "store")
    _, asked = run(server, tmp_path / "data", RECORDS, store)
    assert asked == len(RECORDS) * K
    edited = [dict(r) for r in RECORDS]
    edited[4]["gold"] = "999"  # shard 2's rows change; none of its prompts does
    done, asked = run(server, tmp_path / "data", edited, store)
    assert generate_shards(done) and asked == 0  # the shard ran again and asked nothing
    rows = stages.concat_rows(store, done.graded["ckpt"])
    assert {r["reward"] for r in rows if r["task_id"] == "q4"} == {0.0}  # regraded
    same_as_cold(server, tmp_path, edited, store, done)


def test_a_changed_metadata_field_asks_nothing(server, tmp_path):
    store = Store(tmp_path / "store")
    run(server, tmp_path / "data", RECORDS, store)
    edited = [dict(r) for r in RECORDS]
    edited[7]["source_note"] = "checked by hand"
    done, asked = run(server, tmp_path / "data", edited, store)
    assert generate_shards(done) and asked == 0
    same_as_cold(server, tmp_path, edited, store, done)


def test_an_inserted_record_asks_only_its_samples(server, tmp_path):
    store = Store(tmp_path / "store")
    run(server, tmp_path / "data", RECORDS, store)
    new = {"id": "q-new", "question": "What is 100 + 23?", "gold": "123"}
    done, asked = run(server, tmp_path / "data", [new, *RECORDS], store)
    # every shard boundary moved: all shards ran again, and only the new prompt was asked
    assert len(generate_shards(done)) == 5 and asked == K
    assert {b["messages"][-1]["content"] for b in server.requests[-K:]} == {new["question"]}
    same_as_cold(server, tmp_path, [new, *RECORDS], store, done)
    # a removed record asks nothing
    _, asked = run(server, tmp_path / "data", RECORDS[:5] + RECORDS[6:], store)
    assert asked == 0


def test_a_shuffled_file_asks_nothing(server, tmp_path):
    store = Store(tmp_path / "store")
    run(server, tmp_path / "data", RECORDS, store)
    shuffled = RECORDS[:]
    random.Random(3).shuffle(shuffled)
    assert shuffled != RECORDS
    done, asked = run(server, tmp_path / "data", shuffled, store)
    assert generate_shards(done) and asked == 0
    same_as_cold(server, tmp_path, shuffled, store, done)


def test_journals_an_earlier_version_wrote_per_shard_keep_serving(server, tmp_path):
    """A store from before: completions journalled per shard of rows (``journal=<the shard's
    checksum>``, as the generate stage passed it), no journal of the config. A run on changed
    rows re-runs its shards, and they find every completion in those journals."""
    store = Store(tmp_path / "store")
    model = {"kind": "openai", "base_url": server.base_url, "model": "tiny-ckpt",
             "max_retries": 1}
    kw = {"k": K, "params": {"temperature": 0.7, "max_tokens": 8}, "seed": 0, "api": "chat",
          "system": "Answer briefly.", "store": store}
    for i in range(0, len(RECORDS), 3):  # the old shards, each its own journal
        generate([r["question"] for r in RECORDS[i:i + 3]], model, journal=f"old-shard-{i}",
                 **kw)
    assert len(list(store.journal_files())) == 5 and len(server.requests) == len(RECORDS) * K
    edited = [dict(r) for r in RECORDS]
    edited[0]["gold"] = "0"
    done, asked = run(server, tmp_path / "data", edited, store)
    assert len(generate_shards(done)) == 5 and asked == 0
    same_as_cold(server, tmp_path, edited, store, done)
    # what was found in the old journals is now in the config's: found there at once
    assert len(list(store.journal_files())) == 6
    again, asked = run(server, tmp_path / "data", RECORDS, store)
    assert asked == 0


def test_a_named_journal_serves_a_call_with_another_name(store):
    model = {"kind": "function", "callable": "assay.models.function:echo"}
    first = generate(["a", "b"], model, k=2, store=store, journal="one")
    again = generate(["b", "a", "c"], model, k=2, store=store, journal="two")
    assert first.sent == 4 and again.sent == 2
    assert again.completions == [["b", "b"], ["a", "a"], ["c", "c"]]
    assert generate(["c", "a"], model, k=2, store=store).sent == 0


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def test_lookup_reads_what_another_writer_appended_since(store):
    a, b = Journal(store, "gshard:" + "ab" * 32), Journal(store, "gshard:" + "ab" * 32)
    a.append({"key": "gen:1", "status": "ok", "completion": "x"})
    a.close()
    assert list(b.lookup(["gen:1", "gen:2"])) == ["gen:1"]
    a.append({"key": "gen:2", "status": "error", "completion": None})
    a.append({"key": "gen:1", "status": "error", "completion": None})  # a duplicate's failure
    a.close()
    got = b.lookup(["gen:1", "gen:2"])
    assert got["gen:1"]["completion"] == "x" and got["gen:2"]["status"] == "error"
    a.append({"key": "gen:2", "status": "ok", "completion": "y"})  # a retry succeeds
    a.close()
    assert b.lookup(["gen:2"])["gen:2"]["completion"] == "y"
    # a file rewritten shorter (gc, a repair) is read again from its start
    b.path.write_bytes(b"")
    assert b.lookup(["gen:1"]) == {}


def test_an_unended_last_line_is_not_reported_by_a_reader(store):
    """Two shards share a journal: a reader may see the other's line half written. It is left
    for the next look, not reported torn; the writer that ends a truly torn one reports it."""
    j = Journal(store, "gshard:" + "cd" * 32)
    j.append({"key": "gen:1", "status": "ok", "completion": "x"})
    j.append({"key": "gen:2", "status": "ok", "completion": "y"})
    j.close()
    data = j.path.read_bytes()
    j.path.write_bytes(data[:-9])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(Journal(store, "gshard:" + "cd" * 32).lookup(["gen:1", "gen:2"])) == ["gen:1"]
    j.path.write_bytes(data)  # the write completes
    assert sorted(Journal(store, "gshard:" + "cd" * 32).lookup(["gen:1", "gen:2"])) == [
        "gen:1", "gen:2"]


def test_find_elsewhere_ignores_error_records_and_a_key_quoted_in_a_completion(store):
    from assay.models.journal import find_elsewhere

    old = Journal(store, "gshard:" + "01" * 32)
    old.append({"key": "gen:a", "status": "error", "completion": None})
    old.append({"key": "gen:b", "status": "ok", "completion": '{"key":"gen:c","status":"ok"}'})
    old.close()
    mine = "journals/" + "02" * 32 + ".jsonl"
    assert list(find_elsewhere(store, ["gen:a", "gen:b", "gen:c"], skip=mine)) == ["gen:b"]
    # the journal being skipped is not read
    assert find_elsewhere(store, ["gen:b"], skip=old.rel) == {}


def test_on_an_object_store_segments_are_looked_up_by_key(s3):
    """No append there: each flush is a segment. A reader reads only new segments, and a key in
    another journal's segments serves a call that writes elsewhere."""
    st = Store(s3.url("request-cache"))
    a, b = Journal(st, "gshard:" + "ab" * 32), Journal(Store(s3.url("request-cache")),
                                                       "gshard:" + "ab" * 32)
    a.append({"key": "gen:1", "status": "ok", "completion": "x"})
    a.close()
    assert list(b.lookup(["gen:1", "gen:2"])) == ["gen:1"]
    a.append({"key": "gen:2", "status": "ok", "completion": "y"})
    a.close()
    assert sorted(b.lookup(["gen:1", "gen:2"])) == ["gen:1", "gen:2"]
    model = {"kind": "function", "callable": "assay.models.function:echo"}
    assert generate(["a", "b"], model, k=2, store=st, journal="one").sent == 4
    again = generate(["b", "a"], model, k=2, store=Store(s3.url("request-cache")))
    assert again.sent == 0 and again.completions == [["b", "b"], ["a", "a"]]
