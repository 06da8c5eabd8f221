"""Normalization, tokenization and span hashing of assay.decontam against brute-force references."""

from __future__ import annotations

import random
import unicodedata

import numpy as np

from assay.decontam.ngrams import NGRAM_SALT, SpanHasher
from assay.decontam.normalize import encode, normalize_text, tokens


def test_unicode_tokens_scripts_and_normalization():
    assert tokens("Ｈello, WORLD!") == ["hello", "world"]  # NFKC full-width + case
    assert tokens("STRASSE straße Straße") == ["strasse"] * 3  # casefold ß -> ss
    assert tokens("ﬁne ①") == ["fine", "1"]  # compatibility ligature and circled digit
    assert tokens("Привет, МИР") == ["привет", "мир"]
    assert tokens("ΚΑΛΗΜΕΡΑ κόσμε") == ["καλημερα", "κόσμε"]
    assert tokens("مرحبا بالعالم") == ["مرحبا", "بالعالم"]
    assert tokens("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]  # combining vowel signs stay inside the word
    assert tokens("你好，世界。") == ["你", "好", "世", "界"]
    assert tokens("カタカナとひらがな") == list("カタカナとひらがな")
    assert tokens("snake_case x-y 3.14") == ["snake", "case", "x", "y", "3", "14"]
    assert tokens("") == [] and tokens("  ...  ") == []
    assert tokens("𠀀𠀁 abc 𝐀𝐁 😀x") == ["𠀀", "𠀁", "abc", "ab", "x"]  # astral: CJK ext. B, math bold, emoji
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
    assert len(by_hash) == len({unicodedata.normalize("NFC", s) for s in strings})  # equal -> equal hash


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
