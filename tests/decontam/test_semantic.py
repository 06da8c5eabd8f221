"""The optional semantic rule: batched cosine, thresholds, calibration; one run with MiniLM."""

from __future__ import annotations

import numpy as np
import pytest

from assay.decontam import contamination, decontaminate
from assay.decontam.semantic import best_matches, calibration, embed
from assay.errors import RowsError


def _bow(texts):
    """A deterministic bag-of-words embedder (a reference, no model)."""
    vocab = ["apple", "banana", "river", "train", "speed", "fruit", "boat", "hour"]
    return np.array([[t.lower().count(w) for w in vocab] + [0.01] for t in texts], dtype=float)


def test_batched_best_matches_equal_one_big_product():
    rng = np.random.default_rng(0)
    q = embed(lambda t: rng.normal(size=(len(t), 16)), [str(i) for i in range(30)])
    c = embed(lambda t: rng.normal(size=(len(t), 16)), [str(i) for i in range(100)])
    best, arg = best_matches(q, [c[:33], c[33:34], c[34:]])
    full = q @ c.T
    assert np.allclose(best, full.max(axis=1)) and np.array_equal(arg, full.argmax(axis=1))


def test_semantic_rule_with_a_custom_embedder_and_calibration_warning():
    evals = ["apple banana fruit", "river boat", "train speed hour", "apple fruit banana apple"]
    corpus = ["a banana and an apple, the fruit", "nothing relevant here", "the boat on the river"]
    r = contamination(evals, corpus, store=False, semantic=True, embedder=_bow, similarity=0.95)
    rules = [i.rule for i in r.items]
    assert rules == ["semantic", "semantic", None, None]
    assert r.items[2].rule is None and r.items[0].similarity >= 0.95
    assert r.calibration is not None and r.calibration["pairs"] == 6
    assert "similarity=0.95" in r.report() and "calibration" in r.report()
    # a threshold below how alike distinct eval items read is called out
    low = contamination(evals, corpus, store=False, semantic=True, embedder=_bow, similarity=0.1)
    assert any("share a domain" in w for w in low.warnings)
    kept, rep = decontaminate([{"prompt": c} for c in corpus], against=evals, semantic=True,
                              embedder=_bow, similarity=0.95)
    assert [k["prompt"] for k in kept] == ["nothing relevant here"] and rep.by_rule["semantic"] == 2
    with pytest.raises(RowsError, match="one vector per text"):
        contamination(evals, corpus, store=False, semantic=True,
                      embedder=lambda t: np.zeros((1, 3)))


def test_minilm_catches_a_paraphrase_the_text_rules_miss(tmp_path):
    question = "What is the capital city of France, and on which river does it stand?"
    paraphrase = "Which city is France's capital, and what river flows through it?"
    corpus = [paraphrase, "Banana bread needs ripe bananas and a hot oven.",
              "The train was late again today."]
    evals = [question, "How many legs does a spider have?", "Explain how a bicycle gear works."]
    text_only = contamination(evals, corpus, store=tmp_path)
    assert text_only.n_contaminated == 0
    r = contamination(evals, corpus, store=tmp_path, semantic=True, similarity=0.75)
    assert [i.rule for i in r.items] == ["semantic", None, None]
    assert r.items[0].doc_ids == ("0",) and r.calibration["distinct_item_similarity"] < 0.75
    assert r.thresholds["embedder"].startswith("all-MiniLM-L6-v2")
    cal = calibration(embed(lambda t: np.eye(len(t)), ["a", "b", "c"]))
    assert cal["distinct_item_similarity"] == 0.0
