"""ContaminationIndex: lookups against a brute-force index, reuse from the store, spill, files."""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assay.decontam import ContaminationIndex, contamination
from assay.decontam.ngrams import NGRAM_SALT, SpanHasher
from assay.decontam.normalize import encode
from assay.errors import RowsError, RowsTypeError
from assay.store import Store


def _corpus(seed: int = 3, docs: int = 150, vocab: int = 12) -> list[str]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 40))) for _ in range(docs)]


def test_ranges_match_bruteforce_document_sets():
    corpus = _corpus()
    n = 3
    idx = ContaminationIndex.build(corpus, n=n, store=False, batch_size=17)
    truth: dict[tuple[str, ...], set[int]] = {}
    for d, t in enumerate(corpus):
        w = t.split()
        for p in range(len(w) - n + 1):
            truth.setdefault(tuple(w[p:p + n]), set()).add(d)
    rng = random.Random(0)
    queries = list(truth)[:300] + [tuple(rng.choice(["w1", "w2", "zz"]) for _ in range(n))
                                   for _ in range(50)]
    enc = encode([" ".join(q) for q in queries])
    h, _pos, doc = SpanHasher(enc).ngrams(n, NGRAM_SALT)
    assert doc.tolist() == list(range(len(queries)))
    lo, hi = idx.ranges(h)
    for q, a, b in zip(queries, lo.tolist(), hi.tolist()):
        assert set(idx.docs[a:b].tolist()) == truth.get(q, set()), q
        assert b - a == len(truth.get(q, ()))  # deduplicated per document: df
    assert idx.doc_ids([0, 5]) == ["0", "5"]


def test_reuse_loads_instead_of_rebuilding(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    corpus = _corpus(docs=80)
    calls = []
    real = ContaminationIndex._build.__func__

    def counting(cls, *a, **k):
        calls.append(1)
        return real(cls, *a, **k)

    monkeypatch.setattr(ContaminationIndex, "_build", classmethod(counting))
    first = ContaminationIndex.build(corpus, n=4, store=store)
    second = ContaminationIndex.build(list(corpus), n=4, store=store)
    assert len(calls) == 1 and first.built and not second.built
    assert np.array_equal(first.fps, second.fps) and np.array_equal(first.docs, second.docs)
    assert np.array_equal(first.offsets, second.offsets)
    assert second.doc_ids() == first.doc_ids()
    # a nightly run through contamination() reuses it too, and says so
    r = contamination(["w1 w2 w3 w4 w5"], corpus, n=4, store=store)
    assert len(calls) == 1 and r.corpus["index_reused"]
    # a changed corpus or changed parameters build anew
    ContaminationIndex.build(corpus + ["new doc here"], n=4, store=store)
    ContaminationIndex.build(corpus, n=5, store=store)
    assert len(calls) == 3
    ContaminationIndex.build(corpus, n=4, store=store, reuse=False)
    assert len(calls) == 4


def test_spilled_build_equals_in_memory_build():
    corpus = _corpus(seed=9, docs=120)
    a = ContaminationIndex.build(corpus, n=3, store=False, batch_size=64)
    b = ContaminationIndex.build(corpus, n=3, store=False, batch_size=7, memory_limit=1)
    assert b.stats.spilled and not a.stats.spilled
    assert np.array_equal(a.fps, b.fps) and np.array_equal(a.docs, b.docs)
    assert np.array_equal(a.offsets, b.offsets)
    assert np.array_equal(a.minhash_sigs, b.minhash_sigs)


def test_file_corpora_match_in_memory_and_rebuild_on_change(tmp_path):
    texts = _corpus(seed=5, docs=40)
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    jl = tmp_path / "c.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pqf = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(rows), pqf)
    mem = ContaminationIndex.build(rows, n=3, store=False)
    store = Store(tmp_path / "s")
    for src in (jl, str(pqf), [jl, pqf]):
        idx = ContaminationIndex.build(src, n=3, store=store, batch_size=11)
        if src is not jl and not isinstance(src, list):
            assert np.array_equal(idx.fps, mem.fps) and np.array_equal(idx.docs, mem.docs)
        assert idx.doc_ids([0, 39]) == ["d0", "d39"]
    again = ContaminationIndex.build(jl, n=3, store=store)
    assert not again.built
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))  # the file changed
    changed = ContaminationIndex.build(jl, n=3, store=store)
    assert changed.built and changed.n_docs == 39
    # no id field: ids are "<file>:<line>"
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps({"text": "a b c"}) + "\n" + json.dumps({"text": "d e f"}) + "\n")
    assert ContaminationIndex.build(plain, n=2, store=False).doc_ids() == ["p.jsonl:0", "p.jsonl:1"]


def test_corrupt_store_entry_is_rebuilt_not_trusted(tmp_path):
    store = Store(tmp_path)
    corpus = _corpus(docs=30)
    first = ContaminationIndex.build(corpus, n=3, store=store)
    manifest = store.get_json(store.get_ref(first.ref_name)["blob"])
    shard = store._blob_path(manifest["shards"][0]["key"])
    shard.write_bytes(b"\x00" + shard.read_bytes()[1:])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        again = ContaminationIndex.build(corpus, n=3, store=store)
    assert again.built and any("corrupt" in str(x.message) for x in w)
    # (first maps the blob this test corrupted in place, which the store itself never does:
    # compare with an index kept in memory only)
    assert np.array_equal(again.fps, ContaminationIndex.build(corpus, n=3, store=False).fps)


def test_bad_corpus_inputs_name_the_problem(tmp_path):
    with pytest.raises(RowsError, match=r"corpus\[1\].*'text'"):
        ContaminationIndex.build([{"text": "a"}, {"body": "b"}], store=False)
    with pytest.raises(RowsTypeError, match=r"corpus\[1\]"):
        ContaminationIndex.build(["a", 3], store=False)
    with pytest.raises(RowsError, match="line 2"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"text": "ok"}\n{not json\n')
        ContaminationIndex.build(bad, store=False)
    with pytest.raises(RowsError, match="positive integer"):
        ContaminationIndex.build(["a"], n=0, store=False)
    with pytest.raises(RowsTypeError, match="single string"):
        ContaminationIndex.build("no such\nfile", store=False)


def test_bounded_memory_build_writes_the_store_and_loads_equal(tmp_path, monkeypatch):
    import assay.decontam.index as index_mod
    from assay.errors import StoreError

    monkeypatch.setattr(index_mod, "_SHARD_BYTES", 4096)  # many index and MinHash chunks
    corpus = _corpus(seed=9, docs=120)
    store = Store(tmp_path)
    lean = ContaminationIndex.build(corpus, n=3, store=store, materialize=False, memory_limit=1)
    assert lean.stats.spilled and lean.stats.entries > 0
    with pytest.raises(StoreError, match="materialize"):
        lean.ranges(np.zeros(1, dtype=np.uint64))
    loaded = ContaminationIndex.build(corpus, n=3, store=store)
    ref = ContaminationIndex.build(corpus, n=3, store=False)
    assert not loaded.built and loaded.stats.entries == ref.stats.entries
    assert np.array_equal(loaded.fps, ref.fps) and np.array_equal(loaded.docs, ref.docs)
    assert len(ref.minhash_docs) > 100 and loaded.stats.short_docs == len(ref.minhash_docs)
    assert np.array_equal(loaded.minhash_docs, ref.minhash_docs)
    assert np.array_equal(loaded.minhash_sigs, ref.minhash_sigs)
    # a one-shot generator is indexed too, saved under the checksum taken while streaming
    once = ContaminationIndex.build((t for t in corpus), n=3, store=store)
    assert once.built and once.corpus_checksum and np.array_equal(once.fps, ref.fps)


def test_store_false_writes_nothing_and_none_uses_assay_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASSAY_STORE", str(tmp_path / "default"))
    contamination(["a b c d"], ["a b c d e"], n=2, store=False)
    decontaminate_rows = [{"prompt": "a b c d"}]
    from assay.decontam import decontaminate

    decontaminate(decontaminate_rows, against=["a b c d"])
    assert list(tmp_path.iterdir()) == []
    contamination(["a b c d"], ["a b c d e"], n=2)  # store=None: the default store
    assert (tmp_path / "default" / "refs").is_dir()


def test_many_shards_load_zero_copy_and_answer_like_memory(tmp_path, monkeypatch):
    import assay.decontam.index as index_mod

    monkeypatch.setattr(index_mod, "_SHARD_BYTES", 2048)
    corpus = _corpus(seed=21, docs=200, vocab=9)
    ref = ContaminationIndex.build(corpus, n=3, store=False)
    ContaminationIndex.build(corpus, n=3, store=Store(tmp_path))
    loaded = ContaminationIndex.build(corpus, n=3, store=Store(tmp_path))
    assert not loaded.built and len(loaded.fps.parts) > 5
    enc = encode([f"w{a} w{b} w{c}" for a in range(9) for b in range(9) for c in range(9)]
                 + ["x y z"])
    h, _p, _d = SpanHasher(enc).ngrams(3, NGRAM_SALT)
    lo_r, hi_r = ref.ranges(h)
    lo_l, hi_l = loaded.ranges(h)
    assert np.array_equal(lo_r, lo_l) and np.array_equal(hi_r, hi_l)
    idx = np.arange(0, len(ref.docs), 7)
    assert np.array_equal(loaded.docs[idx], ref.docs[idx])
    evals = corpus[:20]
    a = contamination(evals, corpus, n=3, store=False)
    b = contamination(evals, corpus, n=3, store=Store(tmp_path))
    assert (b.corpus["index_reused"]
            and [i.to_dict() for i in a.items] == [i.to_dict() for i in b.items])
