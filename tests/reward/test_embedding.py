"""EmbeddingRewardModel on the bundled all-MiniLM-L6-v2 (offline, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import DataError
from assay.reward import EmbeddingRewardModel, RewardModel, audit, bundled_model_path


@pytest.fixture(scope="module")
def emb():
    return EmbeddingRewardModel(device="cpu")


PROMPTS = ["What's the capital of Australia?", "How do plants make food?",
           "What's the capital of Australia?"]
RESPONSES = ["The capital of Australia is Canberra.",
             "Plants use photosynthesis: sunlight, water and carbon dioxide become sugar.",
             "My favourite football team won on Saturday."]


def test_scores_are_prompt_response_cosine(emb):
    assert isinstance(emb, RewardModel)
    s = emb.score(PROMPTS, RESPONSES)
    assert s.dtype == np.float64 and np.all(np.abs(s) <= 1 + 1e-6)
    assert s[0] > s[2] + 0.2  # on-topic answer beats an off-topic one for the same prompt
    # independent reference: sentence-transformers' own encode + normalize
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(bundled_model_path()), device="cpu", local_files_only=True)
    e = st.encode(PROMPTS + RESPONSES, normalize_embeddings=True, convert_to_numpy=True)
    ref = (e[:3] * e[3:]).sum(axis=1)
    assert np.allclose(s, ref, atol=1e-5)
    assert emb.last_run.n_items == 3 and emb.last_run.n_scored == 5  # one prompt repeats


def test_budget_batching_equals_naive_loop(emb):
    rng = np.random.default_rng(0)
    words = "sun water leaf sugar light green root stem cell energy".split()
    texts = [" ".join(rng.choice(words, rng.integers(1, 25))) for _ in range(20)]
    fast, plan = emb.embed(texts)
    naive, _ = emb.embed(texts, batching="fixed16")
    assert np.allclose(fast, naive, atol=1e-5)
    assert plan.n_batches == 1  # 20 short texts fit one token-budget batch
    a = emb.score(texts[:4], texts[4:8])
    assert np.array_equal(a, emb.score(texts[:4], texts[4:8]))  # bit-identical reruns


def test_truncation_is_counted_or_refused(emb):
    long = "photosynthesis " * 400
    emb.score(["Q", "Q"], [long, "short"])
    assert emb.last_run.truncated == 1 and emb.last_run.truncated_items == (0,)
    strict = EmbeddingRewardModel(device="cpu", truncation="error")
    with pytest.raises(DataError, match="item 1: the response is .* tokens, over"):
        strict.score(["Q", "Q"], ["short", long])
    assert strict.fingerprint != emb.fingerprint


def test_fingerprint_is_stable_and_names_the_files(emb):
    assert emb.fingerprint == EmbeddingRewardModel(device="cpu").fingerprint
    assert (bundled_model_path() / "model.safetensors").is_file()


def test_audit_a_diagnostic_dimension(emb, tmp_path):
    data = pytest.importorskip("assay.data")
    if not hasattr(data, "load_diagnostic_v3"):
        pytest.skip("assay.data.load_diagnostic_v3 has not landed")
    views = data.load_diagnostic_v3()
    res = audit(emb, {"verbosity": views["verbosity"]}, store=tmp_path)
    # Cosine relevance favours the padded answer that restates the question: verbosity fails.
    assert res["verbosity"].accuracy.interval.high < 0.5
    assert res["verbosity"].accuracy.n == len(views["verbosity"])
    assert "verbosity" in res.table()
