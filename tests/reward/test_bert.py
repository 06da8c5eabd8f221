"""The torch-only BERT gives transformers' BertModel bytes, and names why it cannot otherwise.

Reference: transformers itself (AutoTokenizer, AutoModel on its sdpa path) on the bundled
MiniLM and on tiny random BERTs saved locally; sentence-transformers for a folder left to it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from assay.reward.bert import BertEncoder, bert_reason  # noqa: E402
from assay.reward.embedding import bundled_model_path  # noqa: E402
from assay.reward.sentence_encoder import SentenceEncoder, load_encoder  # noqa: E402

WORDS = ("The cat sat on a MAT Paris capital France 12 + 7 = 19 ünïcödé Éclair 東京 🙂 "
         "def f(x): return x \\n\\t supercalifragilistic [SEP] [MASK]").split()


def _texts(n: int = 30, longest: int = 400, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["", " ", "  padded  ", "Hi", "\n\ttabs\n", "x" * 300] + [
        " ".join(rng.choice(WORDS, size=int(rng.integers(1, longest)))) for _ in range(n)]


def _reference(path: Path, max_len: int | None) -> tuple:
    from transformers import AutoModel, AutoTokenizer

    kw = {"model_max_length": max_len} if max_len is not None else {}
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True, **kw)
    model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    tok.model_max_length = min(tok.model_max_length, model.config.max_position_embeddings)
    return tok, model


def assert_same_as_transformers(path: Path, texts: list[str], max_len: int | None = None) -> None:
    enc = BertEncoder(path, max_seq_length=max_len)
    tok, model = _reference(path, max_len)
    assert enc.max_seq_length == tok.model_max_length
    lengths = tok(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    assert enc.token_lengths(texts).tolist() == [len(x) for x in lengths]
    assert max(map(len, lengths)) > enc.max_seq_length  # truncation is exercised
    same_length = [t for t in texts if len(tok(t)["input_ids"]) == 3][:4]  # no padding at all
    for batch in (texts[:1], texts[3:4], same_length, texts[:8], texts):
        ours = enc.features(batch)
        ref = tok(batch, padding=True, truncation="longest_first", return_tensors="pt")
        assert set(ours) == set(ref)
        for k in ours:
            assert torch.equal(ours[k], ref[k]), k
        with torch.inference_mode():
            a = enc.hidden(ours)
            b = model(**ref, return_dict=True).last_hidden_state
        assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape
        assert a.numpy().tobytes() == b.numpy().tobytes()
    assert len(same_length) >= 2


def test_bundled_minilm_equals_transformers():
    path = bundled_model_path()
    assert bert_reason(path) is None
    assert_same_as_transformers(path, _texts(), max_len=256)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random BERT (4 heads, 40 positions: under the tokenizer's limit) saved locally."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny-bert")
    AutoTokenizer.from_pretrained(str(bundled_model_path())).save_pretrained(path)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=48,
                         max_position_embeddings=40)).save_pretrained(path)
    return path


def test_tiny_bert_equals_transformers(tiny):
    assert bert_reason(tiny) is None
    assert_same_as_transformers(tiny, _texts(20, longest=60, seed=2))


def test_checkpoint_of_a_task_model_loads_its_bert(tmp_path, tiny):
    # A fine-tuned classifier's folder stores the encoder under "bert."; AutoModel takes it.
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    AutoTokenizer.from_pretrained(str(tiny)).save_pretrained(tmp_path)
    torch.manual_seed(3)
    BertForSequenceClassification(BertConfig(
        vocab_size=30522, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
        intermediate_size=40, max_position_embeddings=64, num_labels=1)).save_pretrained(tmp_path)
    assert bert_reason(tmp_path) is None
    assert_same_as_transformers(tmp_path, _texts(12, longest=80, seed=4))


def _edit_json(path: Path, name: str, **changes) -> None:
    doc = json.loads((path / name).read_text())
    for k, v in changes.items():
        if v is None:
            doc.pop(k, None)
        else:
            doc[k] = v
    (path / name).write_text(json.dumps(doc))


def _half(path: Path) -> None:
    from transformers import BertModel

    BertModel.from_pretrained(str(path)).half().save_pretrained(path)


def _drop_tensor(path: Path) -> None:
    from safetensors.torch import load_file, save_file

    w = load_file(str(path / "model.safetensors"))
    del w["encoder.layer.1.output.dense.bias"]
    save_file(w, str(path / "model.safetensors"), metadata={"format": "pt"})


def _add_token(path: Path) -> None:
    doc = json.loads((path / "tokenizer.json").read_text())
    doc["added_tokens"].append({"id": 1000, "content": "<extra>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": False})
    (path / "tokenizer.json").write_text(json.dumps(doc))


CASES = {
    "roberta": (lambda p: _edit_json(p, "config.json", model_type="roberta"), "model_type"),
    "decoder": (lambda p: _edit_json(p, "config.json", is_decoder=True), "is_decoder"),
    "relative": (lambda p: _edit_json(p, "config.json", position_embedding_type="relative_key"),
                 "position_embedding_type"),
    "gelu_new": (lambda p: _edit_json(p, "config.json", hidden_act="gelu_new"), "hidden_act"),
    "half": (_half, "config.json: dtype"),
    # weights in half precision under a config that does not say so: read from the header
    "half-weights": (lambda p: (_half(p), _edit_json(p, "config.json", dtype=None,
                                                     torch_dtype=None)), "F16"),
    "no-safetensors": (lambda p: (p / "model.safetensors").unlink(), "no model.safetensors"),
    "missing-tensor": (_drop_tensor, "lacks encoder.layer.1.output.dense.bias"),
    "cased": (lambda p: _edit_json(p, "tokenizer_config.json", do_lower_case=False),
              "normalizer"),
    "other-class": (lambda p: _edit_json(p, "tokenizer_config.json",
                                         tokenizer_class="DistilBertTokenizer"),
                    "tokenizer_class"),
    "added-token": (_add_token, "adds tokens"),
    "left-padding": (lambda p: _edit_json(p, "tokenizer_config.json", padding_side="left"),
                     "padding"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_it_cannot_reproduce_is_named(tmp_path, tiny, case):
    edit, why = CASES[case]
    path = tmp_path / case
    shutil.copytree(tiny, path)
    edit(path)
    assert why in (bert_reason(path) or "")


def _as_sentence_transformer(bert: Path, out: Path) -> Path:
    """The folder layout sentence-transformers saves: Transformer -> mean Pooling -> Normalize."""
    shutil.copytree(bert, out)
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}]))
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    (out / "2_Normalize").mkdir()
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 30}))
    return out


@pytest.mark.parametrize("case", [None, "cased"])
def test_sentence_encoder_backend_and_bytes_equal_sentence_transformers(tmp_path, tiny, case):
    from sentence_transformers import SentenceTransformer

    path = _as_sentence_transformer(tiny, tmp_path / "st")
    if case:
        CASES[case][0](path)
    enc = load_encoder(path)
    assert isinstance(enc, SentenceEncoder)
    assert enc.backend == ("torch" if case is None else "transformers")
    assert (enc.backend_reason is None) == (case is None)
    texts = _texts(16, longest=50, seed=6)
    ref = SentenceTransformer(str(path), device="cpu").encode(
        texts, batch_size=8, normalize_embeddings=True, convert_to_numpy=True)
    assert enc.encode(texts, batch_size=8).tobytes() == ref.tobytes()
    assert enc.max_seq_length == 30 and enc.token_lengths(texts).max() > 30
