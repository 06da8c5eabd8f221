"""Compiled (numba) inner loops of decontamination: ASCII tokenizing and hashing in one pass.

The numpy tokenizer in :mod:`assay.decontam.normalize` makes ~20 passes over every character;
this loop makes one, releases the GIL (worker threads scale) and gives bit-identical results.

Why compiled code here: tokenizing is the per-character cost of indexing a training corpus
(100M tokens per 100,000 documents). Measured on the 2-core dev VM, 20,000 documents x 1,000
words: numpy 90 ns per token (tokenize + hash + segments), this loop ~15 ns; see
``benchmarks/decontaminate.py`` for the end-to-end effect. The numpy path stays as the reference
(tests compare the two on random text) and handles every non-ASCII batch.

Example:
    >>> import numpy as np
    >>> h, s, e, seg = ascii_tokens(b"Hi, WORLD. 3.14 x\\n")
    >>> s.tolist(), e.tolist(), seg.tolist()
    ([0, 4, 11, 13, 16], [2, 9, 12, 15, 17], [0, 0, 1, 1, 1])
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

# The constants and the word-by-word scheme of normalize.hash_spans (kept bit-identical; the tests
# compare both). They are repeated here, not imported: numba's on-disk cache (cache=True) is
# invalidated only by this file's changes, so a constant or function read from normalize.py
# could go stale in a cached compile.
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xBF58476D1CE4E5B9)
_K3 = np.uint64(0x94D049BB133111EB)
_LONG = 64


@njit(inline="always")
def _mix(x):  # splitmix64's finalizer
    x ^= x >> np.uint64(30)
    x *= _K2
    x ^= x >> np.uint64(27)
    x *= _K3
    x ^= x >> np.uint64(31)
    return x


def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cls = np.zeros(256, dtype=np.uint8)  # 0 separator, 1 word, 2 segment end, 3 "."
    for c in range(128):
        if chr(c).isalnum():  # ASCII letters and digits: Unicode's L and N categories in ASCII
            cls[c] = 1
    for c in b"\n!?":
        cls[c] = 2
    cls[ord(".")] = 3
    low = np.array([c + 32 if 65 <= c <= 90 else c for c in range(256)], dtype=np.uint64)
    masks = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
    return cls, low, masks


_CLS, _LOW, _MASKS = _tables()


@njit(inline="always")
def _token_hash(buf, low, masks, s, length):
    """hash_spans' hash of the token ``buf[s:s + length]`` (lower-cased through ``low``); a
    placeholder above 64 bytes, which the caller hashes with blake2b as hash_spans does."""
    h = np.uint64(length) * _K1
    if length > _LONG:
        return h
    at = 0
    while at < length:
        p = s + at
        # eight lower-cased bytes as a little-endian word, masked to the token's tail
        w = (low[buf[p]] | (low[buf[p + 1]] << np.uint64(8)) | (low[buf[p + 2]] << np.uint64(16))
             | (low[buf[p + 3]] << np.uint64(24)) | (low[buf[p + 4]] << np.uint64(32))
             | (low[buf[p + 5]] << np.uint64(40)) | (low[buf[p + 6]] << np.uint64(48))
             | (low[buf[p + 7]] << np.uint64(56)))
        h ^= w & masks[min(length - at, 8)]
        if at > 0:
            h += _K2
        h = _mix(h)
        at += 8
    return h


@njit(nogil=True, cache=True)
def _scan(buf, cls, low, masks, hashes, starts, ends, seg):
    # buf ends with 8 padding bytes (zeros: separators), so reads past a token stay inside it
    n = len(buf) - 8
    ntok = 0
    nseg = 0
    i = 0
    while i < n:
        t = cls[buf[i]]
        if t != 1:
            # segment ends: newline ! ? and "." not followed by a word character
            if t == 2 or (t == 3 and cls[buf[i + 1]] != 1):
                nseg += 1
            i += 1
            continue
        if ntok == len(hashes):
            return -1  # the work arrays are full: the caller gives more room
        s = i
        i += 1
        while cls[buf[i]] == 1:
            i += 1
        length = i - s
        hashes[ntok] = _token_hash(buf, low, masks, s, length)
        starts[ntok] = s
        ends[ntok] = i
        seg[ntok] = nseg
        ntok += 1
    return ntok


def ascii_tokens(buf: bytes, *, scratch: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(hashes, token starts, token ends, segment numbers) of ASCII bytes ``buf`` (not yet
    lower-cased). Tokens longer than 64 bytes come back with a placeholder hash: the caller
    hashes them as :func:`assay.decontam.normalize.hash_spans` does. ``scratch=True`` returns
    views of this thread's work arrays, valid until its next call (no copy)."""
    return _tokens(buf, scratch, lambda padded, work: _scan(padded, _CLS, _LOW, _MASKS, *work))


def _tokens(buf: bytes, scratch: bool, scan: Callable[[np.ndarray, tuple[np.ndarray, ...]], int],
            on_unknown: Any = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run a token scan over ``buf`` (padded with 8 zero bytes) into this thread's work arrays.

    Prose has at most one token per 4 bytes, so the arrays are sized for that first; denser text
    ("a b c") stops the scan when they fill (-1) and is scanned again with room for the worst
    case, a token and a separator in every two bytes. -2: ``on_unknown()`` learned a character
    class, scan again.
    """
    padded = np.frombuffer(buf + bytes(8), dtype=np.uint8)
    cap = len(buf) // 4 + 16
    while True:
        work = getattr(_scratch, "arrays", None)
        if work is None or len(work[0]) < cap:
            # per-thread work arrays, reused: fresh ones would be page-faulted in on every call;
            # kept only up to _SCRATCH_MAX entries (32 bytes each), so one huge text does not
            # leave gigabytes behind
            work = (np.empty(cap, dtype=np.uint64), np.empty(cap, dtype=np.int64),
                    np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64))
            if cap <= _SCRATCH_MAX:
                _scratch.arrays = work
        k = scan(padded, work)
        if k == -1:
            cap = len(buf) // 2 + 1
        elif k == -2:
            on_unknown()
        else:
            break
    h, s, e, g = work
    if scratch:
        return h[:k], s[:k], e[:k], g[:k]
    return h[:k].copy(), s[:k].copy(), e[:k].copy(), g[:k].copy()


_scratch = threading.local()
_SCRATCH_MAX = 1 << 21  # entries: 64 MB of work arrays per thread at most


# -- token spans (the scheme of assay.decontam.ngrams.SpanHasher, bit-identical) ---------------
_C = np.uint64(0xD6E8FEB86659FD93)
_CINV = np.uint64(pow(0xD6E8FEB86659FD93, -1, 1 << 64))
_KLEN = np.uint64(0xC2B2AE3D27D4EB4F)


@njit(nogil=True, cache=True)
def _spans(t, starts, lengths, salt, out):
    for i in range(len(starts)):
        a = starts[i]
        s = np.uint64(0)
        p = np.uint64(1)
        for j in range(lengths[i]):
            s += t[a + j] * p
            p *= _C
        s += np.uint64(lengths[i]) * _KLEN
        out[i] = _mix(s ^ salt)


def span_hashes(t: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                salt: np.uint64) -> np.ndarray:
    """Hash of tokens ``t[start:start + length]`` for each span, as ``SpanHasher.spans``."""
    out = np.empty(len(starts), dtype=np.uint64)
    _spans(t, np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64),
           np.uint64(salt), out)
    return out


@njit(nogil=True, cache=True)
def _ngrams(t, doc_token_start, n, salt, top, h, pos, doc):
    k = 0
    for d in range(len(doc_token_start) - 1):
        a, b = doc_token_start[d], doc_token_start[d + 1]
        if b - a < n:
            continue
        s = np.uint64(0)
        p = np.uint64(1)
        for j in range(n):
            s += t[a + j] * p
            p *= _C
        nk = np.uint64(n) * _KLEN
        for i in range(a, b - n + 1):
            if i > a:  # slide: drop t[i-1], shift down one power, add t[i+n-1] at the top
                s = (s - t[i - 1]) * _CINV + t[i + n - 1] * top
            h[k] = _mix((s + nk) ^ salt)
            pos[k] = i - a
            doc[k] = d
            k += 1
    return k


def ngram_hashes(t: np.ndarray, doc_token_start: np.ndarray, n: int,
                 salt: np.uint64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hashes, start offset within the text, text index) of every n-gram inside one text, as
    ``SpanHasher.ngrams`` (a rolling sum: one multiply-add per token instead of prefix sums)."""
    cap = max(len(t) - n + 1, 0)
    h = np.empty(cap, dtype=np.uint64)
    pos = np.empty(cap, dtype=np.int64)
    doc = np.empty(cap, dtype=np.int64)
    top = np.uint64(pow(0xD6E8FEB86659FD93, n - 1, 1 << 64))
    k = _ngrams(t, np.asarray(doc_token_start, dtype=np.int64), n, np.uint64(salt), top, h, pos,
                doc)
    return h[:k], pos[:k], doc[:k]


@njit(nogil=True, cache=True)
def _radix(keys, docs, shift, bounds, out_keys, out_docs):
    counts = np.zeros(len(bounds) - 1, dtype=np.int64)
    for i in range(len(keys)):
        counts[keys[i] >> shift] += 1
    bounds[0] = 0
    for g in range(len(counts)):
        bounds[g + 1] = bounds[g] + counts[g]
    at = bounds[:-1].copy()
    for i in range(len(keys)):
        g = keys[i] >> shift
        out_keys[at[g]] = keys[i]
        out_docs[at[g]] = docs[i]
        at[g] += 1


def radix_partition(keys: np.ndarray, docs: np.ndarray, bits: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable counting sort of (key, doc) pairs by the key's top ``bits`` bits: (keys, docs as
    uint32, group bounds), as ``_Runs.partition``'s argsort does, in one pass each way."""
    out_keys = np.empty(len(keys), dtype=np.uint64)
    out_docs = np.empty(len(keys), dtype=np.uint32)
    bounds = np.empty((1 << bits) + 1, dtype=np.int64)
    _radix(keys, docs, np.uint64(64 - bits), bounds, out_keys, out_docs)
    return out_keys, out_docs, bounds


@njit(nogil=True, cache=True)
def _bounds(arr, x, lo, hi, out_lo, out_hi):
    for i in range(len(x)):
        v = x[i]
        a, b = lo[i], hi[i]
        while a < b:  # lower bound
            m = (a + b) >> 1
            if arr[m] < v:
                a = m + 1
            else:
                b = m
        out_lo[i] = a
        b = hi[i]
        while a < b:  # upper bound, from the lower one
            m = (a + b) >> 1
            if arr[m] <= v:
                a = m + 1
            else:
                b = m
        out_hi[i] = a


def bounds(arr: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bound of each ``x[i]`` in the sorted slice ``arr[lo[i]:hi[i]]``."""
    out_lo = np.empty(len(x), dtype=np.int64)
    out_hi = np.empty(len(x), dtype=np.int64)
    _bounds(arr, x, np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64), out_lo, out_hi)
    return out_lo, out_hi


# -- any UTF-8 text (already NFKC + casefolded), as normalize.encode's numpy path -------------
_SEP, _WORD, _CHAR, _END, _UNKNOWN = 0, 1, 3, 4, 255


@njit(inline="always")
def _decode(buf, i):
    """(code point, byte length) of the UTF-8 sequence at ``buf[i]`` (surrogates included)."""
    b0 = np.int64(buf[i])
    if b0 < 0x80:
        return b0, 1
    if b0 < 0xE0:
        return ((b0 & 0x1F) << 6) | (np.int64(buf[i + 1]) & 0x3F), 2
    if b0 < 0xF0:
        return (((b0 & 0x0F) << 12) | ((np.int64(buf[i + 1]) & 0x3F) << 6)
                | (np.int64(buf[i + 2]) & 0x3F)), 3
    return (((b0 & 0x07) << 18) | ((np.int64(buf[i + 1]) & 0x3F) << 12)
            | ((np.int64(buf[i + 2]) & 0x3F) << 6) | (np.int64(buf[i + 3]) & 0x3F)), 4


@njit(nogil=True, cache=True)
def _scan_utf8(buf, table, low, masks, hashes, starts, ends, seg, unknown):
    # buf ends with 8 padding bytes (zeros: separators); table maps a code point to its class
    n = len(buf) - 8
    ntok = 0
    nseg = 0
    i = 0
    while i < n:
        cp, nb = _decode(buf, i)
        c = table[cp]
        if c == _UNKNOWN:
            unknown[0] = cp
            return -2  # the caller classifies this code point and scans again
        if c != _WORD and c != _CHAR:
            if c == _END:
                nseg += 1
            elif cp == 46:  # "." not followed by a word character ends a segment
                nxt, _nb = _decode(buf, i + 1)
                if table[nxt] != _WORD:
                    nseg += 1
            i += nb
            continue
        if ntok == len(hashes):
            return -1  # the work arrays are full: the caller gives more room
        s = i
        i += nb
        if c == _WORD:
            while True:
                cp, nb = _decode(buf, i)
                if table[cp] != _WORD:
                    break
                i += nb
        length = i - s
        hashes[ntok] = _token_hash(buf, low, masks, s, length)
        starts[ntok] = s
        ends[ntok] = i
        seg[ntok] = nseg
        ntok += 1
    return ntok


def utf8_tokens(buf: bytes, table: np.ndarray, classify: Callable[[int], object], *,
                scratch: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """As :func:`ascii_tokens` for the UTF-8 bytes of normalized text (NFKC + casefold done):
    token bounds are byte offsets. ``table`` maps code points to classes (SEP, WORD, CHAR, END,
    or unknown: ``classify(cp)`` fills such an entry, then the scan starts again)."""
    unknown = np.zeros(1, dtype=np.int64)

    def scan(padded: np.ndarray, work: tuple[np.ndarray, ...]) -> int:
        hashes, starts, ends, seg = work
        return _scan_utf8(padded, table, _LOW, _MASKS, hashes, starts, ends, seg, unknown)

    return _tokens(buf, scratch, scan, lambda: classify(int(unknown[0])))


@njit(nogil=True, cache=True)
def _islands(buf, gap, out):
    k = 0
    n = len(buf)
    i = 0
    while i < n:
        if buf[i] < 0x80:
            i += 1
            continue
        a = i
        last = i
        i += 1
        while i < n and i - last <= gap:
            if buf[i] >= 0x80:
                last = i
            i += 1
        if k == len(out):
            return -1  # no room: the caller gives more
        out[k, 0] = a
        out[k, 1] = last + 1
        k += 1
        i = last + 1
    return k


def islands(buf: bytes, gap: int) -> np.ndarray:
    """[start, end) byte ranges of the runs of non-ASCII bytes in ``buf``, runs closer than
    ``gap`` bytes merged (as normalize.normalize_utf8 reads them). Without the GIL.

    Example:
        >>> islands("a é b ü".encode() + b" " * 20 + "ß".encode(), 2).tolist()
        [[2, 4], [7, 9], [29, 31]]
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    out = np.empty((16, 2), dtype=np.int64)  # prose has few islands; room for all on a retry
    k = _islands(arr, gap, out)
    if k < 0:
        out = np.empty((len(buf) // 2 + 1, 2), dtype=np.int64)
        k = _islands(arr, gap, out)
    return out[:k]
