"""A rerun against an unchanged corpus reads the saved answer back; any change recomputes it."""

from __future__ import annotations

import dataclasses

import numpy as np

from assay.decontam import ContaminationIndex, contamination
from assay.store import Store

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron "
         "pi rho").split()


def _corpus() -> list[str]:
    docs = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(60)) + f" doc{i}"
            for i in range(30)]
    docs[7] = ("intro text here. " + "Сколько будет два плюс два умножить на три минус один, "
               "ответ числом пожалуйста сейчас" + " outro")
    return docs


EVALS = [
    {"task_id": "ru", "prompt": "сколько будет ДВА плюс два умножить на три минус один, ответ "
                                "числом пожалуйста сейчас"},
    {"task_id": "clean",
     "prompt": "a question that appears nowhere in the corpus at all, not even in part, truly"},
    {"task_id": "short", "prompt": "doc7 words"},
]


def test_rerun_reads_the_saved_result(tmp_path):
    store = Store(tmp_path)
    first = contamination(EVALS, _corpus(), store=store)
    again = contamination(EVALS, _corpus(), store=store)
    assert not first.corpus["result_cached"] and again.corpus["result_cached"]
    assert again.corpus["index_reused"] and again.corpus["ref"] == first.corpus["ref"]
    assert again.items == first.items
    assert (again.n_contaminated, again.by_rule, again.thresholds, again.warnings) == (
        first.n_contaminated, first.by_rule, first.thresholds, first.warnings)
    assert str(again.rate) == str(first.rate)
    assert first.contaminated_task_ids() == ["ru"]


def test_any_change_recomputes(tmp_path):
    store = Store(tmp_path)
    contamination(EVALS, _corpus(), store=store)
    # different parameters, eval items or corpus: not the cached answer
    r = contamination(EVALS, _corpus(), store=store, min_coverage=0.9)
    assert not r.corpus["result_cached"] and r.corpus["index_reused"]
    r = contamination(EVALS[:2], _corpus(), store=store)
    assert not r.corpus["result_cached"] and len(r.items) == 2
    changed = _corpus()
    changed[7] = "nothing to see"
    r = contamination(EVALS, changed, store=store)
    assert not r.corpus["result_cached"] and not r.corpus["index_reused"]
    assert r.contaminated_task_ids() == []
    # reuse=False recomputes
    r = contamination(EVALS, _corpus(), store=store, reuse=False)
    assert not r.corpus["result_cached"] and not r.corpus["index_reused"]
    # a saved result whose index is gone from the store is not trusted: rebuilt and rematched
    store.delete_ref(r.corpus["ref"])
    r = contamination(EVALS, _corpus(), store=store)
    assert not r.corpus["result_cached"] and not r.corpus["index_reused"]
    assert r.contaminated_task_ids() == ["ru"]


def test_whole_document_matches_are_confirmed_on_all_64_bits(tmp_path):
    # entries keep only pbits + 32 bits of a hash; the exact rule re-checks the full whole-text
    # hash (a real 44-bit collision turned up at 20k docs x 10k items in the benchmark)
    store = Store(tmp_path)
    docs = ["Cancel order 9911", "something else entirely"]
    built = ContaminationIndex.build(docs, n=5, store=store)
    loaded = ContaminationIndex.build(docs, n=5, store=store)
    assert not loaded.built and np.array_equal(loaded.whole_hashes, built.whole_hashes)
    assert contamination(["cancel ORDER 9911"], index=loaded).items[0].rule == "exact"
    forged = dataclasses.replace(built, whole_hashes=built.whole_hashes ^ np.uint64(1))
    assert contamination(["cancel ORDER 9911"], index=forged).items[0].rule == "near_duplicate"
    assert not contamination(["cancel ORDER 9911"], index=forged,
                             near_duplicate=None).items[0].contaminated
    assert contamination(["cancel ORDER 9911"], index=built,
                         near_duplicate=None).items[0].rule == "exact"


def test_corpus_checksum_framing_and_surrogates():
    from assay.decontam.corpus import CorpusSource

    def cs(docs, **kw):
        return CorpusSource(docs, **kw).checksum()

    assert cs(["ab", "c"]) != cs(["a", "bc"]) != cs(["abc"])
    assert cs(["ab", "c"]) == cs(["ab", "c"])
    assert cs(["x \ud800 y"]) != cs(["x  y"])  # a lone surrogate still counts
    rows = [{"id": "a", "text": "t"}, {"id": "b", "text": "u"}]
    assert cs(rows) != cs([{"id": "ab", "text": "t"}, {"id": "", "text": "u"}])
