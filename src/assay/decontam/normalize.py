"""Text normalization and tokenization for decontamination: NFKC + casefold, Unicode-aware tokens.

Vectorized over a batch of texts, no Python loop per token: ASCII batches go through a compiled
loop (:mod:`assay.decontam.kernels`), everything else through numpy; a token's 64-bit hash is a
function of its normalized UTF-8 bytes only, so both paths (and both sides) always agree.

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

import hashlib
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

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
        table[:0x10000] = np.fromiter((_class_of(i) for i in range(0x10000)), dtype=np.uint8,
                                      count=0x10000)
        _TABLE = table
    return _TABLE


def _learn_class(cp: int) -> None:
    """Fill the class table's entry for one astral code point (first seen by the compiled scan)."""
    char_classes()[cp] = _class_of(cp)


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


def normalize_text(text: str) -> str:
    """NFKC + casefold (then NFKC again, as Unicode's NFKC_Casefold does).

    Example:
        >>> normalize_text("ＳTRAẞE ﬁne")
        'strasse fine'
    """
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


#: non-ASCII runs closer than this many bytes are normalized as one island
_ISLAND_GAP = 16
#: island bytes -> normalized bytes (short islands only, at most 65,536 of them)
_ISLANDS: dict[bytes, bytes] = {}


def normalize_utf8(text: str) -> bytes:
    """``normalize_text(text)`` as UTF-8 bytes, for text that is mostly ASCII, fast.

    Python's case mapping costs ~15 ns per character on any non-ASCII string; a web document
    with one curly quote would pay it on every character. Here the ASCII bytes are lower-cased
    in one C pass and only the *islands* of non-ASCII characters go through NFKC + casefold,
    each with the ASCII character before it (the base a combining mark composes with; no
    composition ever involves the character after). Islands closer than 16 bytes are merged,
    so text in another script is normalized in long pieces. Tested equal to ``normalize_text``.

    Example:
        >>> normalize_utf8("A ﬁne CAFE\u0301 costs 3€").decode()
        'a fine café costs 3€'
    """
    raw = text.encode("utf-8", "surrogatepass").lower()
    kernels = _kernels()
    if kernels is not None:  # one GIL-free call (numpy's small calls here stalled the threads)
        spans = kernels.islands(raw, _ISLAND_GAP)
        starts, ends = spans[:, 0].tolist(), spans[:, 1].tolist()
    else:
        high = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) >= 0x80)
        cut = np.flatnonzero(np.diff(high) > _ISLAND_GAP)
        starts = high[:1].tolist() + high[cut + 1].tolist()
        ends = (high[cut] + 1).tolist() + (high[-1:] + 1).tolist()
    if not starts:
        return raw
    out = []
    pos = 0
    cache = _ISLANDS
    for a, b in zip(starts, ends):
        a = max(a - 1, pos)  # the ASCII character a leading combining mark attaches to
        out.append(raw[pos:a])
        piece = raw[a:b]
        # short islands repeat (quotes, dashes, accented names): normalized once per process
        new = cache.get(piece)
        if new is None:
            new = normalize_text(piece.decode("utf-8", "surrogatepass")).encode(
                "utf-8", "surrogatepass")
            if len(piece) <= 64:
                if len(cache) >= 1 << 16:
                    cache.clear()
                cache[piece] = new
        out.append(new)
        pos = b
    out.append(raw[pos:])
    return b"".join(out)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, vectorized (in place on a uint64 array it owns)."""
    x ^= x >> np.uint64(30)
    x *= _K2
    x ^= x >> np.uint64(27)
    x *= _K3
    x ^= x >> np.uint64(31)
    return x


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


#: MASKS[k] keeps the low k bytes of a little-endian word
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
#: spans longer than this many bytes are hashed one by one (blake2b), not word by word
_LONG = 64


def hash_spans(buf: bytes, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """64-bit hash of each byte span ``buf[start:start + length]`` (a token's UTF-8 bytes).

    Works on 8-byte words, not characters: each span reads its bytes as little-endian uint64
    words through an overlapping (stride 1) view of the buffer, masks the tail, and feeds them
    word by word through the splitmix64 finalizer, starting from the length. A typical token is
    one or two words, so the cost is per token, not per character (3x faster than prefix sums
    over every character). Spans longer than 64 bytes (URLs, base64 blobs: rare) are hashed one
    by one with blake2b.

    Example:
        >>> buf = b"cat dog cat"
        >>> h = hash_spans(buf, np.array([0, 4, 8]), np.array([3, 3, 3]))
        >>> bool(h[0] == h[2]), bool(h[0] == h[1])
        (True, False)
    """
    start = np.asarray(start, dtype=np.int64)
    length = np.asarray(length, dtype=np.int64)
    m = len(buf)
    # 8 zero bytes of padding: the word at any start is readable
    words = np.ndarray(shape=(m + 1,), dtype="<u8", buffer=buf + bytes(8), strides=(1,))
    h = length.astype(np.uint64)
    h *= _K1
    h ^= words[start] & _MASKS[np.minimum(length, 8)]
    splitmix64(h)
    sel = np.flatnonzero(length > 8)
    at = 8
    while len(sel) and at < _LONG:
        hs = h[sel]
        hs ^= words[start[sel] + at] & _MASKS[np.minimum(length[sel] - at, 8)]
        hs += _K2
        h[sel] = splitmix64(hs)
        at += 8
        sel = sel[length[sel] > at]
    if len(sel):
        _hash_long(buf, start, length, sel, h)
    return h


def _hash_long(buf: bytes, start: np.ndarray, length: np.ndarray, sel: np.ndarray,
               h: np.ndarray) -> None:
    """Hash spans ``sel`` (longer than 64 bytes) one by one with blake2b, into ``h``."""
    for i in sel.tolist():
        a = int(start[i])
        digest = hashlib.blake2b(buf[a:a + int(length[i])], digest_size=8).digest()
        h[i] = np.uint64(int.from_bytes(digest, "little"))
    h[sel] ^= _K3


#: the compiled loops (module assay.decontam.kernels), loaded on first use; False: numpy only
_KERNELS: ModuleType | Literal[False] | None = None


def _kernels() -> ModuleType | None:
    """assay.decontam.kernels, or None where numba does not load (the numpy paths give the same
    hashes: they are the reference the compiled loops are tested against)."""
    global _KERNELS
    if _KERNELS is None:
        try:
            from assay.decontam import kernels
        except Exception as e:  # numba missing, or unable to compile/cache on this platform
            warnings.warn("assay.decontam: the compiled loops are unavailable "
                          f"({type(e).__name__}: {e}); tokenizing with numpy instead (same "
                          "results, 2-5x slower)", RuntimeWarning, stacklevel=2)
            _KERNELS = False
        else:
            _KERNELS = kernels
    return _KERNELS or None


def _ascii_bounds(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word mask, token starts, token ends) of lower-cased ASCII bytes: a word character is a
    letter or a digit (Unicode's L/N categories restricted to ASCII)."""
    w = np.subtract(a, ord("a"), dtype=np.uint8) < 26
    w |= np.subtract(a, ord("0"), dtype=np.uint8) < 10
    # the text ends with a separator, so run edges alternate start, end, start, end, ...
    edges = np.flatnonzero(w[1:] != w[:-1]) + 1
    if len(w) and w[0]:
        edges = np.concatenate([np.zeros(1, dtype=edges.dtype), edges])
    return w, edges[0::2], edges[1::2]


def encode(texts: Sequence[str], *, spans: bool = False, scratch: bool = False) -> Encoded:
    """Tokenize and hash a batch of texts in one vectorized pass.

    ``scratch=True`` may return arrays that share this thread's work buffers: valid until the
    thread's next ``encode(..., scratch=True)`` (the index build consumes each batch at once).

    Example:
        >>> e = encode(["Hello, world", "HELLO   world!"])
        >>> bool((e.hashes[:2] == e.hashes[2:]).all()), e.lengths().tolist()
        (True, [2, 2])
    """
    n_docs = len(texts)
    # "\n" between texts is a separator and a segment end, so no token or segment crosses texts.
    joined = "\n".join(texts) + "\n"
    is_ascii = joined.isascii()
    kernels = _kernels()
    doc_lens = None
    seg = None
    if is_ascii:
        # ASCII: NFKC is the identity and casefold is lower(); one byte per character, so
        # character offsets are byte offsets and lower-casing is the whole normalization
        norm = list(texts) if not spans else [t.lower() for t in texts]
        raw = joined.encode("ascii")
    if is_ascii and kernels is not None:
        h, tok_start, tok_end, seg = kernels.ascii_tokens(raw, scratch=scratch)
        long = np.flatnonzero(tok_end - tok_start > _LONG)
        if len(long):
            _hash_long(raw.lower(), tok_start, tok_end - tok_start, long, h)
    elif kernels is not None and not spans:
        # Every other text: normalized per document, then one compiled pass over its UTF-8 bytes
        # (token bounds are byte offsets; the caller asked for no character spans)
        parts = [normalize_utf8(t) for t in texts]
        raw = b"\n".join(parts) + b"\n"
        doc_lens = [len(p) for p in parts]
        h, tok_start, tok_end, seg = kernels.utf8_tokens(raw, char_classes(), _learn_class,
                                                         scratch=scratch)
        long = np.flatnonzero(tok_end - tok_start > _LONG)
        if len(long):
            _hash_long(raw, tok_start, tok_end - tok_start, long, h)
    elif is_ascii:
        buf = raw.lower()
        cp = np.frombuffer(buf, dtype=np.uint8)
        w, tok_start, tok_end = _ascii_bounds(cp)
        ends_mask = cp == ord("\n")
        ends_mask |= cp == ord("!")
        ends_mask |= cp == ord("?")
        byte_start, byte_len = tok_start, tok_end - tok_start
    else:
        norm = [normalize_text(t) for t in texts]
        joined = "\n".join(norm) + "\n"
        cp = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        cls = _classify(cp)
        w = cls == WORD
        c = cls == CHAR
        not_w = ~w
        start_mask = c.copy()
        start_mask[0] |= w[0]
        start_mask[1:] |= w[1:] & not_w[:-1]
        end_mask = c  # c is not used again
        end_mask[-1] |= w[-1]
        end_mask[:-1] |= w[:-1] & not_w[1:]
        tok_start = np.flatnonzero(start_mask)
        tok_end = np.flatnonzero(end_mask) + 1
        ends_mask = cls == END
        # the hash reads UTF-8 bytes, so a token hashes the same in ASCII and non-ASCII texts
        buf = joined.encode("utf-8", "surrogatepass")
        nbytes = 1 + (cp >= 0x80).astype(np.uint8)
        nbytes += cp >= 0x800
        nbytes += cp >= 0x10000
        boff = np.zeros(len(cp) + 1, dtype=np.int64)
        np.cumsum(nbytes, out=boff[1:])
        byte_start = boff[tok_start]
        byte_len = boff[tok_end] - byte_start
    if seg is None:
        h = hash_spans(buf, byte_start, byte_len)
        # Segment ends: newline, ! ? 。, and "." not followed by a word character ("3.14" stays).
        dots = cp[:-1] == ord(".")
        dots &= ~w[1:]
        ends_mask[:-1] |= dots
        # a token's segment is the number of segment ends before it: place each end before its
        # next token and count (searching the few ends among the tokens, not the reverse)
        next_token = np.searchsorted(tok_start, np.flatnonzero(ends_mask))
        seg = np.cumsum(np.bincount(next_token, minlength=len(tok_start) + 1)[: len(tok_start)])
    lens = np.fromiter(doc_lens if doc_lens is not None else (len(s) for s in norm),
                       dtype=np.int64, count=n_docs)
    doc_char_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lens + 1, out=doc_char_start[1:])
    doc_token_start = np.searchsorted(tok_start, doc_char_start).astype(np.int64)
    doc = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(doc_token_start))
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
