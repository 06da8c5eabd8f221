"""Normalization, tokenization and span hashing of assay.decontam against brute-force references."""

from __future__ import annotations

import contextlib
import random
import unicodedata

import numpy as np

from assay.decontam import normalize
from assay.decontam.ngrams import NGRAM_SALT, SpanHasher
from assay.decontam.normalize import encode, normalize_text, tokens


@contextlib.contextmanager
def numpy_only():
    """Within: the numpy reference paths, not the compiled loops."""
    k = normalize._KERNELS
    normalize._KERNELS = False
    try:
        yield
    finally:
        normalize._KERNELS = k


def test_unicode_tokens_scripts_and_normalization():
    assert tokens("Ｈello, WORLD!") == ["hello", "world"]  # NFKC full-width + case
    assert tokens("STRASSE straße Straße") == ["strasse"] * 3  # casefold ß -> ss
    assert tokens("ﬁne ①") == ["fine", "1"]  # compatibility ligature and circled digit
    assert tokens("Привет, МИР") == ["привет", "мир"]
    assert tokens("ΚΑΛΗΜΕΡΑ κόσμε") == ["καλημερα", "κόσμε"]
    assert tokens("مرحبا بالعالم") == ["مرحبا", "بالعالم"]
    # combining vowel signs stay inside the word
    assert tokens("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]
    assert tokens("你好，世界。") == ["你", "好", "世", "界"]
    assert tokens("カタカナとひらがな") == list("カタカナとひらがな")
    assert tokens("snake_case x-y 3.14") == ["snake", "case", "x", "y", "3", "14"]
    assert tokens("") == [] and tokens("  ...  ") == []
    # astral: CJK ext. B, math bold, emoji
    assert tokens("𠀀𠀁 abc 𝐀𝐁 😀x") == ["𠀀", "𠀁", "abc", "ab", "x"]
    # decomposed and composed spellings are one token
    assert tokens(unicodedata.normalize("NFD", "Café")) == tokens("café") == ["café"]
    assert normalize_text("ÀB") == "àb"


def _rand_variant(rng: random.Random, word: str) -> str:
    return rng.choice([word, word.upper(), word.capitalize(), unicodedata.normalize("NFD", word)])


def test_token_hash_equal_iff_normalized_token_equal():
    rng = random.Random(1)
    vocab = ["alpha", "beta", "café", "привет", "日", "本", "x1", "Ωmega", "naïve", "b", "ab", "ba"]
    texts = []
    for _ in range(40):
        words = [_rand_variant(rng, rng.choice(vocab)) for _ in range(rng.randint(0, 30))]
        texts.append(rng.choice([" ", "  ", ", ", "\n", " - "]).join(words))
    enc = encode(texts, spans=True)
    strings = [s for d in range(len(texts)) for s in enc.token_strings(d)]
    assert len(strings) == len(enc.hashes)
    by_hash: dict[int, set[str]] = {}
    for h, s in zip(enc.hashes.tolist(), strings):
        by_hash.setdefault(h, set()).add(unicodedata.normalize("NFC", s))
    assert all(len(v) == 1 for v in by_hash.values())  # no collisions
    # equal -> equal hash
    assert len(by_hash) == len({unicodedata.normalize("NFC", s) for s in strings})


def test_ascii_fast_path_agrees_with_unicode_path():
    ascii_only = encode(["The quick brown fox", "jumps over"])
    mixed = encode(["The quick brown fox", "jumps over", "ünïcode"])
    assert np.array_equal(ascii_only.hashes, mixed.hashes[: len(ascii_only.hashes)])


def test_ngrams_match_bruteforce_tuples_and_never_cross_texts():
    rng = random.Random(7)
    vocab = ["a", "b", "c", "d"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 12))) for _ in range(60)]
    n = 3
    enc = encode(texts)
    h, pos, doc = SpanHasher(enc).ngrams(n, NGRAM_SALT)
    expected = [(d, p, tuple(t.split()[p:p + n])) for d, t in enumerate(texts)
                for p in range(len(t.split()) - n + 1)]
    assert [(int(d), int(p)) for d, p in zip(doc, pos)] == [(d, p) for d, p, _ in expected]
    to_tuple: dict[int, tuple[str, ...]] = {}
    for hv, (_, _, tup) in zip(h.tolist(), expected):
        assert to_tuple.setdefault(hv, tup) == tup  # one hash, one tuple
    assert len(to_tuple) == len({tup for _, _, tup in expected})


def test_segments_split_at_sentence_ends_not_decimal_points():
    enc = encode(["Pi is 3.14. Next line\nThird! Fourth? 第一。第二"])
    assert enc.seg.tolist() == [0, 0, 0, 0, 1, 1, 2, 3, 4, 4, 5, 5]


def test_token_hash_depends_on_every_byte_across_word_boundaries():
    # Tokens of every length around the 8-byte words the hash reads, and past its 64-byte
    # word-by-word limit; prefixes of one another, so a dropped tail byte would collide.
    rng = random.Random(3)
    base = "".join(rng.choice("abcdefghij0123") for _ in range(90))
    vocab = [base[:k] for k in range(1, 91)] + [base[:k - 1] + "z" for k in range(2, 91)]
    vocab += ["é" + base[:k] for k in (6, 7, 8, 15, 70)]  # multi-byte first character
    texts = []
    for _ in range(30):
        words = [rng.choice(vocab) for _ in range(rng.randint(1, 25))]
        texts.append(rng.choice([" ", "  ", ". ", "\n", ", "]).join(words))
    texts.append(" ".join(vocab))
    enc = encode(texts, spans=True)
    strings = [s for d in range(len(texts)) for s in enc.token_strings(d)]
    by_hash: dict[int, set[str]] = {}
    for h, s in zip(enc.hashes.tolist(), strings):
        by_hash.setdefault(h, set()).add(s)
    assert all(len(v) == 1 for v in by_hash.values())
    assert len(by_hash) == len(set(strings)) == len(vocab)
    # the same token hashes the same in an ASCII batch and in a batch with other scripts, at any
    # byte alignment
    ascii_only = encode([" ".join(vocab[:170])]).hashes
    shifted = encode(["ж" * 3 + " " + " ".join(vocab[:170])]).hashes[1:]
    assert np.array_equal(ascii_only, shifted)


def test_compiled_ascii_tokenizer_matches_the_numpy_reference(monkeypatch):
    assert normalize._kernels() is not None, "numba is a dependency: the compiled loops must load"
    rng = random.Random(11)
    alphabet = "abcXYZ019 .,!?\n\t-_'\"()" + "." * 3
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200))) for _ in range(300)]
    texts += ["x" * k for k in (1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 200)]  # word and blake2b bounds
    texts += ["3.14 is pi. Next!", "end.", ".", "", "A.B. c", "trailing token"]
    fast = encode(texts, spans=True)
    monkeypatch.setattr(normalize, "_KERNELS", False)
    ref = encode(texts, spans=True)
    for f in ("hashes", "doc", "seg", "doc_token_start", "starts", "ends"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f
    assert fast.texts == ref.texts


def test_compiled_spans_ngrams_and_partition_match_the_numpy_reference():
    from assay.decontam.index import _SUPER_BITS, _Runs

    rng = random.Random(5)
    texts = [" ".join(rng.choice("abcdefgh") for _ in range(rng.randint(0, 40)))
             for _ in range(200)]
    enc = encode(texts)
    fast, ref = SpanHasher(enc, compiled=True), SpanHasher(enc, compiled=False)
    for n in (1, 3, 13, 41):
        for a, b in zip(fast.ngrams(n, NGRAM_SALT), ref.ngrams(n, NGRAM_SALT)):
            assert np.array_equal(a, b), n
    for a, b in zip(fast.whole_texts(), ref.whole_texts()):
        assert np.array_equal(a, b)
    for a, b in zip(fast.segments(13), ref.segments(13)):
        assert np.array_equal(a, b)
    starts = np.array([rng.randrange(len(enc.hashes) - 50) for _ in range(500)])
    lengths = np.array([rng.randint(1, 50) for _ in range(500)])
    assert np.array_equal(fast.spans(starts, lengths, NGRAM_SALT),
                          ref.spans(starts, lengths, NGRAM_SALT))
    # the radix partition: stable by the top 8 bits, like the argsort it replaces
    keys = np.random.default_rng(1).integers(0, 2**64 - 1, 20_000, dtype=np.uint64)
    keys[::7] = keys[0]  # ties keep their order
    docs = np.arange(20_000, dtype=np.int64)
    got = _Runs.partition(keys, docs)
    with numpy_only():
        want = _Runs.partition(keys, docs)
    for a, b in zip(got, want):
        assert np.array_equal(a, b) and a.dtype == b.dtype
    assert len(got[2]) == (1 << _SUPER_BITS) + 1


def test_compiled_range_search_and_dense_text_match_the_reference():
    from assay.decontam import index as index_mod

    rng = np.random.default_rng(4)
    arr = np.sort(rng.integers(0, 50, 3000).astype(np.uint32))
    lo = rng.integers(0, 3000, 2000)
    hi = np.minimum(lo + rng.integers(0, 400, 2000), 3000)
    x = rng.integers(0, 52, 2000).astype(np.uint32)
    got = index_mod._bounds(arr, x, lo, hi)
    want = (index_mod._bsearch(arr, x, lo, hi, right=False),
            index_mod._bsearch(arr, x, lo, hi, right=True))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # one-letter tokens: more than one token per 4 bytes, past the first guess of the work arrays
    dense = ["a b c d e f g h " * 50, "x" * 3, "q w e r t y"]
    fast = encode(dense)
    with numpy_only():
        ref = encode(dense)
    assert np.array_equal(fast.hashes, ref.hashes) and np.array_equal(fast.seg, ref.seg)
    assert len(fast.hashes) == 400 + 1 + 6


def test_compiled_utf8_tokenizer_matches_the_numpy_reference():
    rng = random.Random(13)
    pieces = ["Привет", "мир", "κόσμε", "مرحبا", "नमस्ते", "你好", "世界。", "カタカナ", "café",
              "STRASSE", "straße", "ﬁne", "①", "𠀀𠀁", "😀x", "x.y", "3.14", "end.", "Ωmega", "a",
              "\ud800", "—", "“q”", "é" * 40, "ж" * 9, "\n", "!", "?", ". ", ",", "  ", "\t"]
    texts = ["".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(rng.randint(0, 40)))
             for _ in range(300)]
    texts += ["", "plain ascii in a mixed batch", "\U0001F9EA unseen astral"]
    fast = encode(texts)
    with numpy_only():
        ref = encode(texts)
    for f in ("hashes", "doc", "seg", "doc_token_start"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f
    # and the same tokens as the character-span path reports
    assert [len(encode([t], spans=True).token_strings(0)) for t in texts] == fast.lengths().tolist()


def test_island_normalization_equals_full_normalization():
    from assay.decontam.normalize import normalize_utf8

    rng = random.Random(17)
    tricky = ["e\u0301", "=\u0338", "A\u030a", "\u1100\u1161\u11a8", "ß", "ΟΔΟΣ", "\u212a", "ﬁ",
              "Ｈ", "\ud800",
              "\uab70", "ǅ", "İ", "ŉ", "ﬀ", "①", "²", "\u0345", "ᾳ", "К", "中", "😀", "\u0308", "é"]
    ascii_bits = ["a", "B", " ", "x" * 15, "y" * 16, "z" * 17, ".", "\n", "Q" * 40, "9"]

    texts = ["".join(rng.choice(tricky if rng.random() < 0.3 else ascii_bits)
                     for _ in range(rng.randint(0, 30)))
             for _ in range(3000)]
    texts.append(("CAFE\u0301 " + "x" * 20 + " ") * 40)  # more islands than the first guess of room
    for t in texts:
        assert normalize_utf8(t) == normalize_text(t).encode("utf-8", "surrogatepass"), repr(t)
    with numpy_only():  # the numpy island finder agrees too
        assert all(normalize_utf8(t) == normalize_text(t).encode("utf-8", "surrogatepass")
                   for t in texts)


def test_work_arrays_are_not_kept_for_a_huge_text(monkeypatch):
    from assay.decontam import kernels

    monkeypatch.setattr(kernels, "_SCRATCH_MAX", 1000)
    monkeypatch.setattr(kernels, "_scratch", __import__("threading").local())
    small = encode(["a b c"] * 10)
    kept = kernels._scratch.arrays
    big = encode(["word " * 5000])  # needs more than 1,000 entries: fresh arrays, not kept
    assert kernels._scratch.arrays is kept and len(big.hashes) == 5000 and len(small.hashes) == 30


def test_without_the_compiled_loops_numpy_gives_the_same_hashes_with_a_warning(monkeypatch):
    import sys

    import pytest


    texts = ["Hello wörld, 你好", "plain text. Next!"]
    want = encode(texts).hashes
    monkeypatch.setattr(normalize, "_KERNELS", None)
    import assay.decontam

    monkeypatch.setitem(sys.modules, "assay.decontam.kernels", None)  # the import fails
    monkeypatch.delattr(assay.decontam, "kernels", raising=False)
    with pytest.warns(RuntimeWarning, match="compiled loops are unavailable"):
        got = encode(texts).hashes
    assert np.array_equal(got, want)
