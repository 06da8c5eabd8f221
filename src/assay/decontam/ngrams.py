"""Token n-gram and span hashes over an encoded batch, vectorized with prefix sums modulo 2^64.

One prefix array per batch gives the hash of any token span in O(1), so n-grams, segments, whole
documents and MinHash shingles all come from the same pass.

The hash of tokens ``t[a:a+L]`` is ``sum_j t[a+j] * C^j`` (mod 2^64), computed as a difference of
prefix sums shifted by ``C^-a``, then mixed with the length and a salt (so an n-gram and an
exact-span hash never collide by construction) through the splitmix64 finalizer.

Example:
    >>> from assay.decontam.normalize import encode
    >>> e = encode(["a b c d", "x a b c"])
    >>> s = SpanHasher(e)
    >>> h, pos, doc = s.ngrams(3)
    >>> pos.tolist(), doc.tolist(), bool(h[0] == h[3])
    ([0, 1, 0, 1], [0, 0, 1, 1], True)
"""

from __future__ import annotations

import numpy as np

from assay.decontam.normalize import Encoded, _kernels, _powers, splitmix64

_C = 0xD6E8FEB86659FD93  # odd multiplier, invertible mod 2^64
_CINV = pow(_C, -1, 1 << 64)
_KLEN = np.uint64(0xC2B2AE3D27D4EB4F)

#: Salts keep the hash families apart.
NGRAM_SALT = np.uint64(0x6E6772616D000001)
EXACT_SALT = np.uint64(0x6578616374000002)
SHINGLE_SALT = np.uint64(0x7368696E67000003)
WHOLE_SALT = np.uint64(0x77686F6C65000004)


class SpanHasher:
    """Hashes of token spans of one encoded batch (see module docstring)."""

    def __init__(self, enc: Encoded, *, compiled: bool | None = None) -> None:
        self.enc = enc
        #: use the compiled loops of assay.decontam.kernels (None: when numba loads); the numpy
        #: prefix sums below are the reference they are tested against
        self.kernels = _kernels() if compiled is not False else None
        if compiled and self.kernels is None:
            raise ImportError("compiled=True needs numba (assay.decontam.kernels)")
        self._q_cache: np.ndarray | None = None

    @property
    def _q(self) -> np.ndarray:
        if self._q_cache is None:
            m = len(self.enc.hashes)
            # q[0] = 0 pads the prefix sums: a span's sum is q[end] - q[start], no edge case
            q = np.empty(m + 1, dtype=np.uint64)
            q[0] = 0
            np.multiply(self.enc.hashes, _powers(_C, m), out=q[1:])
            np.cumsum(q[1:], out=q[1:])
            self._q_cache = q
        return self._q_cache

    def spans(self, start: np.ndarray, length: np.ndarray, salt: np.uint64) -> np.ndarray:
        """Hash of tokens ``[start, start + length)`` for each pair (length >= 1)."""
        start = np.asarray(start, dtype=np.int64)
        length = np.asarray(length, dtype=np.int64)
        if len(start) == 0:
            return np.zeros(0, dtype=np.uint64)
        if self.kernels is not None:
            return self.kernels.span_hashes(self.enc.hashes, start, length, salt)
        q = self._q
        h = q[start + length]
        h -= q[start]
        h *= _powers(_CINV, len(q))[start]
        h += length.astype(np.uint64) * _KLEN
        h ^= salt
        return splitmix64(h)

    def ngrams(self, n: int, salt: np.uint64 = NGRAM_SALT,
               docs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hashes, start token offset within its text, text index) of every n-gram that does not
        cross a text boundary (only in the texts ``docs`` when given)."""
        enc = self.enc
        m = len(enc.hashes)
        if m < n:
            z = np.zeros(0, dtype=np.int64)
            return np.zeros(0, dtype=np.uint64), z, z
        if self.kernels is not None and docs is None:
            return self.kernels.ngram_hashes(enc.hashes, enc.doc_token_start, n, salt)
        doc = enc.doc
        first = np.flatnonzero(doc[: m - n + 1] == doc[n - 1:])
        if docs is not None:
            mask = np.zeros(enc.n_docs, dtype=bool)
            mask[docs] = True
            first = first[mask[doc[first]]]
        h = self.spans(first, np.full(len(first), n, dtype=np.int64), salt)
        d = doc[first]
        return h, first - enc.doc_token_start[d], d

    def whole_texts(self, salt: np.uint64 = WHOLE_SALT) -> tuple[np.ndarray, np.ndarray]:
        """(hash, text index) of every non-empty text's whole token sequence."""
        lens = self.enc.lengths()
        keep = np.flatnonzero(lens > 0)
        return self.spans(self.enc.doc_token_start[keep], lens[keep], salt), keep

    def segments(self, max_len: int, salt: np.uint64 = EXACT_SALT) -> tuple[np.ndarray, np.ndarray]:
        """(hash, text index) of every segment (sentence or line) shorter than ``max_len`` tokens
        that is not its whole text (whole texts come from :meth:`whole_texts`)."""
        enc = self.enc
        m = len(enc.hashes)
        if m == 0:
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
        seg = enc.seg
        new = np.empty(m, dtype=bool)
        new[0] = True
        new[1:] = (seg[1:] != seg[:-1]) | (enc.doc[1:] != enc.doc[:-1])
        starts = np.flatnonzero(new)
        lens = np.diff(np.append(starts, m))
        d = enc.doc[starts]
        keep = (lens < max_len) & (lens != enc.lengths()[d])
        starts, lens = starts[keep], lens[keep]
        return self.spans(starts, lens, salt), enc.doc[starts]
