"""Text normalization and tokenization for decontamination: NFKC + casefold, Unicode-aware tokens.

Vectorized over a batch of texts: code points become token hashes (uint64) with numpy, no Python
loop per token, so a corpus of millions of documents tokenizes at numpy speed.

Rules (the same for eval items and corpus documents, so both sides always agree):

- Text is NFKC-normalized and casefolded (``normalize_text``): full-width letters, ligatures,
  compatibility digits and case differences vanish.
- A *word* is a maximal run of letters, digits and combining marks (Unicode categories L*, N*,
  M*): Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari and Hangul words are kept whole,
  marks included.
- Each character of a script written without spaces (Han, Hiragana, Katakana, Bopomofo, Thai,
  Lao, Khmer, Myanmar) is a token of its own, so a Chinese or Japanese question yields n-grams.
- Everything else (punctuation, symbols, whitespace, ``_``) separates tokens and is dropped.
- A newline, ``!``, ``?``, ``。`` or a ``.`` followed by a non-word character ends a *segment*
  (a line or sentence); segments serve the exact rule for items shorter than n tokens.

Example:
    >>> tokens("Ｈello, WORLD! Привет мир; 你好")
    ['hello', 'world', 'привет', 'мир', '你', '好']
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Scripts written without spaces between words: each character is one token.
_CHAR_TOKEN_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x31A0, 0x31FF),  # Bopomofo ext., Katakana ext.
    (0x3400, 0x4DBF),  # CJK ext. A
    (0x4E00, 0x9FFF),  # CJK unified
    (0xF900, 0xFAFF),  # CJK compatibility
    (0x20000, 0x3134F),  # CJK ext. B-G
)
_SENTENCE_ENDS = "\n!?\u3002"

# Bit 0 set: the character belongs to a token.
SEP, WORD, CHAR, END = 0, 1, 3, 4
_TABLE: np.ndarray | None = None

# Odd 64-bit constants (golden ratio and splitmix64 multipliers).
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xBF58476D1CE4E5B9)
_K3 = np.uint64(0x94D049BB133111EB)


_UNKNOWN = 255


def _class_of(i: int) -> int:
    if chr(i) in _SENTENCE_ENDS:
        return END
    if unicodedata.category(chr(i))[0] not in "LNM":
        return SEP
    return CHAR if any(lo <= i <= hi for lo, hi in _CHAR_TOKEN_RANGES) else WORD


def char_classes() -> np.ndarray:
    """The code point -> class table (SEP, WORD, CHAR, END). The Basic Multilingual Plane is
    filled once per process; astral code points are classified when first seen."""
    global _TABLE
    if _TABLE is None:
        table = np.full(0x110000, _UNKNOWN, dtype=np.uint8)
        table[:0x10000] = np.fromiter((_class_of(i) for i in range(0x10000)), dtype=np.uint8, count=0x10000)
        _TABLE = table
    return _TABLE


def _classify(cp: np.ndarray) -> np.ndarray:
    table = char_classes()
    if cp.dtype == np.uint8:
        return table[:256][cp]
    cls = table[cp]
    unknown = cls == _UNKNOWN
    if unknown.any():
        for i in np.unique(cp[unknown]).tolist():
            table[i] = _class_of(i)
        cls = table[cp]
    return cls


_ASCII: tuple[bytes, bytes] | None = None


def _ascii_tables() -> tuple[bytes, bytes]:
    """bytes.translate tables for ASCII text: byte -> class, and byte -> (byte + 1 if the byte
    belongs to a token else 0)."""
    global _ASCII
    if _ASCII is None:
        cls = char_classes()[:128]
        term = np.where(cls & 1, np.arange(1, 129), 0)
        pad = bytes(128)
        _ASCII = (cls.astype(np.uint8).tobytes() + pad, term.astype(np.uint8).tobytes() + pad)
    return _ASCII


def normalize_text(text: str) -> str:
    """NFKC + casefold (then NFKC again, as Unicode's NFKC_Casefold does).

    Example:
        >>> normalize_text("ＳTRAẞE ﬁne")
        'strasse fine'
    """
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, vectorized (in place on a uint64 array it owns)."""
    x ^= x >> np.uint64(30)
    x *= _K2
    x ^= x >> np.uint64(27)
    x *= _K3
    x ^= x >> np.uint64(31)
    return x


_B = 0x100000001B3  # odd: invertible modulo 2^64
_BINV = pow(_B, -1, 1 << 64)


_POWER_CACHE: dict[int, np.ndarray] = {}


def _powers(base: int, m: int) -> np.ndarray:
    """[1, base, base^2, ..., base^(m-1)] modulo 2^64 (cached, grown geometrically)."""
    have = _POWER_CACHE.get(base)
    if have is None or len(have) < m:
        size = max(m, 2 * len(have) if have is not None else 1 << 16)
        out = np.empty(size, dtype=np.uint64)
        out[0] = 1
        out[1:] = base
        np.cumprod(out, out=out)
        out.flags.writeable = False
        _POWER_CACHE[base] = have = out
    return have[:m]


@dataclass(frozen=True)
class Encoded:
    """A batch of texts as tokens: hashes, owning text, and (optionally) character spans.

    ``hashes[i]`` is token i's 64-bit hash, ``doc[i]`` the index of its text in the batch,
    ``seg[i]`` a batch-wide segment number (sentence/line). ``starts``/``ends`` are character
    offsets into ``texts[doc[i]]`` (the normalized text), present when asked for.
    """

    hashes: np.ndarray
    doc: np.ndarray
    seg: np.ndarray
    doc_token_start: np.ndarray  # len(texts) + 1 offsets into the token arrays
    texts: list[str] | None = None
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None

    @property
    def n_docs(self) -> int:
        return len(self.doc_token_start) - 1

    def lengths(self) -> np.ndarray:
        """Tokens per text."""
        return np.diff(self.doc_token_start)

    def token_strings(self, d: int) -> list[str]:
        """The normalized tokens of text ``d`` (needs ``spans=True``)."""
        if self.texts is None or self.starts is None or self.ends is None:
            raise ValueError("token_strings needs encode(..., spans=True)")
        a, b = self.doc_token_start[d], self.doc_token_start[d + 1]
        t = self.texts[d]
        return [t[s:e] for s, e in zip(self.starts[a:b].tolist(), self.ends[a:b].tolist())]


def encode(texts: Sequence[str], *, spans: bool = False) -> Encoded:
    """Tokenize and hash a batch of texts in one vectorized pass.

    Example:
        >>> e = encode(["Hello, world", "HELLO   world!"])
        >>> bool((e.hashes[:2] == e.hashes[2:]).all()), e.lengths().tolist()
        (True, [2, 2])
    """
    norm = [normalize_text(t) for t in texts]
    n_docs = len(norm)
    # "\n" between texts is a separator and a segment end, so no token or segment crosses texts.
    joined = "\n".join(norm) + "\n"
    if joined.isascii():  # one byte per character: a quarter of the memory traffic
        raw = joined.encode("ascii")
        cp = np.frombuffer(raw, dtype=np.uint8)
        # bytes.translate is a C loop over a 256-byte table: far cheaper than numpy's fancy
        # indexing, which widens every index to 8 bytes
        cls = np.frombuffer(raw.translate(_ascii_tables()[0]), dtype=np.uint8)
        # (code point + 1) inside tokens, 0 elsewhere: the hash's per-character term
        term = np.frombuffer(raw.translate(_ascii_tables()[1]), dtype=np.uint8)
    else:
        cp = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
        cls = _classify(cp)
        term = None
    lens = np.fromiter((len(s) for s in norm), dtype=np.int64, count=n_docs)
    doc_char_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lens + 1, out=doc_char_start[1:])
    w = cls == WORD
    not_w = ~w
    if term is not None:
        # ASCII has no per-character tokens: tokens are the runs of word characters, and the
        # text ends with a separator, so run edges alternate start, end, start, end, ...
        intok = None
        edges = np.flatnonzero(w[1:] != w[:-1]) + 1
        if w[0]:
            edges = np.concatenate([np.zeros(1, dtype=edges.dtype), edges])
        tok_start, tok_end = edges[0::2], edges[1::2]
    else:
        c = cls == CHAR
        intok = (cls & 1).view(np.bool_)
        start_mask = c.copy()
        start_mask[0] |= w[0]
        start_mask[1:] |= w[1:] & not_w[:-1]
        end_mask = c  # c is not used again
        end_mask[-1] |= w[-1]
        end_mask[:-1] |= w[:-1] & not_w[1:]
        tok_start = np.flatnonzero(start_mask)
        tok_end = np.flatnonzero(end_mask) + 1
    # Polynomial hash of each token's code points: prefix sums of cp * B^i, differenced at the
    # token bounds and shifted back by B^-start (B is odd, so invertible mod 2^64).
    m = len(cp)
    # csum[0] = 0 pads the prefix sums, so a token's sum is csum[end] - csum[start]
    csum = np.empty(m + 1, dtype=np.uint64)
    csum[0] = 0
    body = csum[1:]
    if term is not None:
        np.multiply(term, _powers(_B, m), out=body)
    else:
        np.add(cp, 1, out=body, casting="unsafe")
        np.multiply(body, _powers(_B, m), out=body)
        np.multiply(body, intok, out=body, casting="unsafe")
    np.cumsum(body, out=body)
    h = csum[tok_end]
    h -= csum[tok_start]
    h *= _powers(_BINV, m)[tok_start]
    h += (tok_end - tok_start).astype(np.uint64) * _K1
    splitmix64(h)
    doc_token_start = np.searchsorted(tok_start, doc_char_start).astype(np.int64)
    doc = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(doc_token_start))
    # Segment ends: newline, ! ? 。, and "." not followed by a word character (so "3.14" stays).
    ends_mask = cls == END
    dots = cp[:-1] == ord(".")
    dots &= not_w[1:]
    ends_mask[:-1] |= dots
    seg_end_pos = np.flatnonzero(ends_mask)
    seg = np.searchsorted(seg_end_pos, tok_start, side="left").astype(np.int64)
    if spans:
        rel = doc_char_start[doc]
        return Encoded(h, doc, seg, doc_token_start, norm, tok_start - rel, tok_end - rel)
    return Encoded(h, doc, seg, doc_token_start)


def tokens(text: str) -> list[str]:
    """The normalized tokens of one text, as strings (for display and tests).

    Example:
        >>> tokens("Don't panic: 3.14 ≠ π")
        ['don', 't', 'panic', '3', '14', 'π']
    """
    return encode([text], spans=True).token_strings(0)
