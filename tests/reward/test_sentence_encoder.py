"""The direct sentence encoder gives sentence-transformers' bytes, and falls back to it otherwise.

References: sentence-transformers itself, on the bundled MiniLM (its 2.x layout) and on tiny
BERT models saved by sentence-transformers 6 in each pooling mode the direct path takes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from assay.reward.embedding import EmbeddingRewardModel, bundled_model_path  # noqa: E402
from assay.reward.sentence_encoder import (  # noqa: E402
    SentenceEncoder,
    STEncoder,
    direct_reason,
    load_encoder,
)

WORDS = ("the cat sat on a mat Paris capital France 12 + 7 = 19 ünïcödé 東京 🙂 def f(x): "
         "return x \\n\\t").split()


def _texts(n: int = 40, longest: int = 400, seed: int = 0) -> list[str]:
    """Edge cases first (empty, blank, padded with spaces), then random lengths past the limit."""
    rng = np.random.default_rng(seed)
    return ["", " ", "  padded on both sides  ", "Hi", "\n\ttabs\n"] + [
        " ".join(rng.choice(WORDS, size=int(rng.integers(1, longest)))) for _ in range(n)]


def assert_same_bytes(direct: SentenceEncoder, ref: STEncoder, texts: list[str]) -> None:
    assert (direct.max_seq_length, direct.dim) == (ref.max_seq_length, ref.dim)
    for batch in (texts[:3], texts[4:9], texts):
        fd, fr = direct.features(batch), ref.features(batch)
        assert set(fd) <= set(fr)
        for k in fd:
            assert torch.equal(fd[k], fr[k]), k
        a, b = direct.forward(fd).numpy(), ref.forward(fr).numpy()
        assert a.dtype == b.dtype == np.float32 and a.tobytes() == b.tobytes()
    a, b = direct.encode(texts, batch_size=8), ref.encode(texts, batch_size=8)
    assert a.shape == (len(texts), ref.dim) and a.tobytes() == b.tobytes()
    lengths = [direct.token_lengths(texts), ref.token_lengths(texts)]
    assert lengths[0].tolist() == lengths[1].tolist()
    assert lengths[0].max() > direct.max_seq_length  # truncation was exercised


def test_bundled_minilm_direct_equals_sentence_transformers():
    path = bundled_model_path()
    assert direct_reason(path) is None
    direct = load_encoder(path)
    assert isinstance(direct, SentenceEncoder) and direct.pooling == "mean" and direct.normalize
    assert_same_bytes(direct, STEncoder(path), _texts())


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory) -> dict[str, Path]:
    """Tiny random BERT encoders saved by sentence-transformers 6 in several layouts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as M
    from transformers import AutoTokenizer, BertConfig, BertModel

    root = tmp_path_factory.mktemp("tiny-st")
    bert = root / "bert"
    AutoTokenizer.from_pretrained(str(bundled_model_path())).save_pretrained(bert)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=128)).save_pretrained(bert)
    layouts = {
        "cls": lambda: [M.Pooling(32, pooling_mode="cls")],
        "max": lambda: [M.Pooling(32, pooling_mode="max")],
        "mean-normalize": lambda: [M.Pooling(32, pooling_mode="mean"), M.Normalize()],
        "dense": lambda: [M.Pooling(32, pooling_mode="mean"), M.Dense(32, 8)],
        "weighted": lambda: [M.Pooling(32, pooling_mode="weightedmean")],
    }
    out = {}
    for name, tail in layouts.items():
        torch.manual_seed(1)
        st = SentenceTransformer(modules=[M.Transformer(str(bert), max_seq_length=48), *tail()])
        st.save(str(root / name))
        out[name] = root / name
    prompts = root / "prompts"
    SentenceTransformer(str(out["cls"])).save(str(prompts))
    cfg = json.loads((prompts / "config_sentence_transformers.json").read_text())
    cfg["prompts"] = {"query": "query: ", "document": ""}
    cfg["default_prompt_name"] = "query"
    (prompts / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    out["prompts"] = prompts
    return out


@pytest.mark.parametrize("layout", ["cls", "max", "mean-normalize"])
def test_direct_layouts_equal_sentence_transformers(tiny_st, layout):
    path = tiny_st[layout]
    assert direct_reason(path) is None
    direct = load_encoder(path)
    assert isinstance(direct, SentenceEncoder)
    assert direct.pooling == layout.split("-")[0] and direct.max_seq_length == 48
    assert_same_bytes(direct, STEncoder(path), _texts(longest=120, seed=3))


@pytest.mark.parametrize("layout, why", [("dense", "modules"), ("weighted", "pooling"),
                                         ("prompts", "prompts")])
def test_other_layouts_load_through_sentence_transformers(tiny_st, layout, why):
    from sentence_transformers import SentenceTransformer

    path = tiny_st[layout]
    assert why in (direct_reason(path) or "")
    enc = load_encoder(path)
    assert isinstance(enc, STEncoder)
    texts = _texts(10, longest=60)
    ref = SentenceTransformer(str(path), device="cpu").encode(
        texts, batch_size=8, normalize_embeddings=True, convert_to_numpy=True)
    assert enc.encode(texts, batch_size=8).tobytes() == ref.tobytes()


def test_not_a_sentence_transformers_folder_and_bad_backend(tmp_path):
    from assay.reward.base import RewardModelError

    assert "modules.json" in (direct_reason(tmp_path) or "")
    with pytest.raises(RewardModelError, match="backend must be"):
        load_encoder(bundled_model_path(), backend="onnx")


def test_reward_scores_equal_across_backends():
    prompts = ["What is the capital of France?", "Hi", "Explain photosynthesis. " * 80]
    responses = ["Paris is the capital.", "Hello!", "Plants make sugar from light. " * 90]
    direct = EmbeddingRewardModel(device="cpu")
    via_hf = EmbeddingRewardModel(device="cpu", backend="transformers")
    ref = EmbeddingRewardModel(device="cpu", backend="sentence-transformers")
    assert isinstance(direct.encoder, SentenceEncoder) and isinstance(ref.encoder, STEncoder)
    assert (direct.encoder.backend, via_hf.encoder.backend) == ("torch", "transformers")
    a, b = direct.score(prompts, responses), ref.score(prompts, responses)
    assert a.tobytes() == b.tobytes() and direct.fingerprint == ref.fingerprint
    assert via_hf.score(prompts, responses).tobytes() == a.tobytes()
    assert via_hf.fingerprint == direct.fingerprint
    assert direct.last_run.truncated == ref.last_run.truncated == 1


def test_bundled_model_scores_without_importing_sentence_transformers_or_transformers():
    # The point of the direct path: the imports it skips are seconds of CPU on a study's
    # critical path (its BERT runs in torch alone: assay.reward.bert). Checked in a fresh
    # interpreter, where nothing else imported them.
    code = ("import sys, json; from assay.reward.embedding import EmbeddingRewardModel; "
            "from assay.decontam.semantic import MiniLM; "
            "rm = EmbeddingRewardModel(device='cpu'); s = rm.score(['Hi'], ['Hello!']); "
            "v = MiniLM()(['Hi', 'Hello!']); "
            "print(json.dumps([float(s[0]), v.shape[0], rm.encoder.backend, "
            "[m in sys.modules for m in ('sentence_transformers', 'transformers')]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    score, n, backend, imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert n == 2 and 0.3 < score <= 1.0 and backend == "torch"
    assert imported == [False, False]


def test_decontam_embedder_equals_sentence_transformers_encode():
    from sentence_transformers import SentenceTransformer

    from assay.decontam.semantic import MiniLM, default_model_path

    texts = _texts(30, longest=300, seed=5)
    ref = SentenceTransformer(default_model_path(), device="cpu").encode(
        texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    assert MiniLM()(texts).tobytes() == ref.tobytes()
