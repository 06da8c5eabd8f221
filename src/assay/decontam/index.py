"""ContaminationIndex: the corpus side as sorted n-gram fingerprints, built once, kept in the store.

Built in one streaming pass in bounded memory, saved under a ref named by the corpus checksum and
the parameters, and loaded (not rebuilt) on later runs against the same corpus.

Why the corpus side: the training corpus is the large, slow-changing side; eval sets come and go
(a new benchmark, a new split, a nightly eval of new items). Indexing the corpus once turns every
later question "which of these eval items occur in the corpus?" into a lookup of the eval items'
few n-grams: no pass over the corpus, however many eval sets are checked.

Layout (fixed size per entry, numpy arrays, no Python objects per n-gram):

- One entry per distinct (n-gram, document) pair, plus one per whole document and one per
  (short segment, document) pair, each family hashed with its own salt (the exact rule; segments
  are sentences or lines shorter than n tokens, for items shorter than n tokens).
- A 64-bit span hash is cut into a partition number (its top ``pbits`` bits, chosen so a
  partition holds ~8k entries) and a 32-bit fingerprint (the next 32 bits). Entries are sorted by
  (partition, fingerprint, document); ``offsets`` gives each partition's range. A lookup is a
  vectorized binary search inside each query's partition. The identity of an n-gram is its top
  ``pbits + 32`` bits, so a random lookup collides with a given corpus n-gram with probability
  2^-(pbits+32): about 2e-6 per lookup in the whole index (documented false-match rate). The
  exact rule's whole-document matches are confirmed against each document's full 64-bit
  whole-text hash (``whole_hashes``, 8 bytes per document), since that rule fires on a single
  lookup (10,000 items against 20,000 documents hit one such collision before).
- The document frequency of an n-gram is the length of its range (entries are deduplicated per
  document), which is what the boilerplate cutoff reads.
- MinHash signatures of the short documents (``near_dup_max_tokens`` or fewer tokens) for the
  near-duplicate rule: a longer document cannot reach a Jaccard threshold against an eval item a
  fraction of its size, and its copies of eval items are what the coverage rule finds.

Costs: a build tokenizes every document once (compiled loops, in worker threads) and sorts ~one
entry per corpus token (radix-split into 256 groups, each sorted on its own in worker threads,
spilled to disk past ``memory_limit``); the index takes ~8 bytes per corpus token in the store
(100,000 documents of 1,000 words: 7 s end to end on 2 cores, see benchmarks/decontaminate.py).
A reuse reads and verifies (sha256) those bytes and hashes the corpus to check it is unchanged
(for files, the checksum is memoized by path, size and mtime); a lookup is a binary search per
eval n-gram.
So the index pays for itself from the second eval set (or nightly run) against a corpus; a
one-off check of one eval set costs about what a single streaming scan would. (A rerun of the
same eval set with the same settings does not even load the index: ``contamination`` keeps its
whole answer in the store, see :mod:`assay.decontam.evalside`.)

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> store = Store(tempfile.mkdtemp())
    >>> docs = ["the quick brown fox jumps over the lazy dog", "lorem ipsum dolor sit amet"]
    >>> idx = ContaminationIndex.build(docs, n=3, store=store)
    >>> again = ContaminationIndex.build(docs, n=3, store=store)
    >>> idx.built, again.built, again.n_docs
    (True, False, 2)
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from assay.decontam.corpus import CorpusSource, Fields, ordered_map
from assay.decontam.neardup import signatures
from assay.decontam.ngrams import EXACT_SALT, NGRAM_SALT, SHINGLE_SALT, WHOLE_SALT, SpanHasher
from assay.decontam.normalize import _kernels, encode
from assay.errors import RowsError, StoreError
from assay.hashing import combine

if TYPE_CHECKING:
    from assay.store import Store

#: The ``store=`` argument: a Store, a path to one, None (the default store) or False (none).
StoreArg: TypeAlias = "Store | str | os.PathLike[str] | bool | None"

INDEX_VERSION = 4
FP_BITS = 32
_TARGET_PER_PARTITION = 1 << 13
_SUPER_BITS = 8  # build-time radix partitions (256), each sorted on its own
_SHARD_BYTES = 64 << 20
_ENCODE_CHUNK = 64  # documents tokenized together inside one build batch
_M32 = np.uint64(0xFFFFFFFF)


def resolve_store(store: StoreArg) -> Store | None:
    """``None`` -> the default store, ``False`` -> no store, a path -> a Store there."""
    from assay.store import Store

    if store is False:
        return None
    if store is None:
        return Store()
    if isinstance(store, (str, os.PathLike)):
        return Store(store)
    if isinstance(store, Store):
        return store
    raise StoreError("store: expected an assay.Store, a path, None (default store) or False, "
                     f"got {type(store).__name__}")


class IndexParams(TypedDict):
    """The parameters that name a saved index (what :func:`index_params` returns)."""

    n: int
    text_field: str | list[str]
    id_field: str | None
    near_dup_max_tokens: int
    shingle: int
    num_perm: int
    version: int


class _ShardRef(TypedDict):
    """One stored blob of sorted entries: ``count`` fingerprints, then as many documents."""

    count: int
    key: str


class _MinhashChunk(TypedDict):
    """One stored chunk of MinHash signatures: document positions and their signatures."""

    count: int
    docs: str
    sigs: str


_Arrays: TypeAlias = tuple[np.ndarray, np.ndarray]
#: what one build thread returns for a chunk of documents: its token count, its (key, doc)
#: entries, its short documents' MinHash (positions, signatures) and its whole-text hashes
_Chunk: TypeAlias = tuple[int, np.ndarray, np.ndarray, _Arrays | None, _Arrays]
#: a batch of chunks: the token count, the entries radix-split (keys, docs, group bounds), the
#: MinHash and the whole-text hashes
_Batch: TypeAlias = tuple[int, np.ndarray, np.ndarray, np.ndarray, _Arrays | None, _Arrays]


def index_params(*, n: int = 13, text_field: Fields = "text", id_field: str | None = "id",
                 near_dup_max_tokens: int = 512, shingle: int = 3,
                 num_perm: int = 128) -> IndexParams:
    """The parameters that name a saved index (validated), as :meth:`ContaminationIndex.build`
    keys it in the store."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise RowsError(f"n must be a positive integer (n-gram length in tokens), got {n!r}")
    if not isinstance(shingle, int) or isinstance(shingle, bool) or shingle < 1:
        raise RowsError("shingle must be a positive integer (tokens per MinHash shingle), got "
                        f"{shingle!r}")
    return {
        "n": n, "text_field": list(text_field) if isinstance(text_field, tuple) else text_field,
        "id_field": id_field, "near_dup_max_tokens": int(near_dup_max_tokens),
        "shingle": shingle, "num_perm": int(num_perm), "version": INDEX_VERSION,
    }


def index_ref_name(corpus_checksum: str, params: IndexParams) -> str:
    """The store ref under which the index of that corpus and those parameters is saved."""
    return "decontam-index:" + combine("decontam-index", corpus_checksum, params)


class _Runs:
    """(key, doc) pairs radix-split by their top 8 bits; spilled to disk past a memory limit."""

    def __init__(self, memory_limit: int) -> None:
        self.memory_limit = memory_limit
        self.mem: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(1 << _SUPER_BITS)]
        self.nbytes = 0
        self.total = 0
        self.tmp: Path | None = None
        self.spilled = np.zeros(1 << _SUPER_BITS, dtype=np.int64)

    @staticmethod
    def partition(keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Group (key, doc) pairs by the key's top 8 bits, keeping their order inside a group
        (a stable radix sort); thread-safe, so worker threads do it."""
        kernels = _kernels()
        if kernels is not None:
            return kernels.radix_partition(keys, docs, _SUPER_BITS)
        sp = (keys >> np.uint64(64 - _SUPER_BITS)).astype(np.uint8)
        order = np.argsort(sp, kind="stable")  # radix sort on uint8
        bounds = np.zeros((1 << _SUPER_BITS) + 1, dtype=np.int64)
        np.cumsum(np.bincount(sp, minlength=1 << _SUPER_BITS), out=bounds[1:])
        return keys[order], docs.astype(np.uint32)[order], bounds

    def add(self, keys: np.ndarray, docs: np.ndarray, bounds: np.ndarray | None = None) -> None:
        if len(keys) == 0:
            return
        if bounds is None:
            keys, docs, bounds = self.partition(keys, docs)
        for s in np.flatnonzero(np.diff(bounds)):
            a, b = bounds[s], bounds[s + 1]
            self.mem[s].append((keys[a:b], docs[a:b]))
        self.nbytes += 12 * len(keys)
        self.total += len(keys)
        if self.nbytes > self.memory_limit:
            self.spill()

    def spill(self) -> None:
        if self.tmp is None:
            self.tmp = Path(tempfile.mkdtemp(prefix="assay-decontam-"))
        for s, parts in enumerate(self.mem):
            if not parts:
                continue
            k = np.concatenate([p[0] for p in parts])
            d = np.concatenate([p[1] for p in parts])
            with open(self.tmp / f"{s}.k", "ab") as fk:
                k.tofile(fk)
            with open(self.tmp / f"{s}.d", "ab") as fd:
                d.tofile(fd)
            self.spilled[s] += len(k)
            parts.clear()
        self.nbytes = 0

    def take(self, s: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The pieces of radix group ``s`` (keys, docs), spilled ones first; the group is
        emptied."""
        ks = [p[0] for p in self.mem[s]]
        ds = [p[1] for p in self.mem[s]]
        if self.spilled[s]:
            assert self.tmp is not None
            ks.insert(0, np.fromfile(self.tmp / f"{s}.k", dtype=np.uint64))
            ds.insert(0, np.fromfile(self.tmp / f"{s}.d", dtype=np.uint32))
        self.mem[s] = []
        return ks, ds

    def close(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _partition_bits(total: int) -> int:
    return int(min(30, max(_SUPER_BITS,
                           math.ceil(math.log2(max(total, 1) / _TARGET_PER_PARTITION)))))


class _Scratch:
    """Work buffers reused from one radix group to the next (one set per thread): fresh arrays
    of a few MB each cost page faults on every group, which measured slower than the sort."""

    def __init__(self) -> None:
        self.size = 0

    def get(self, n: int) -> _Scratch:
        if n > self.size:
            self.size = max(n, int(self.size * 1.25))
            self.packed = np.empty(self.size, dtype=np.uint64)
            self.perm = np.empty(self.size, dtype=np.int64)
            self.docs = np.empty(self.size, dtype=np.uint32)
            self.sorted_docs = np.empty(self.size, dtype=np.uint32)
            self.keep = np.empty(self.size, dtype=bool)
            self.tmp = np.empty(self.size, dtype=bool)
            self.out_fps = np.empty(self.size, dtype=np.uint32)
            self.out_docs = np.empty(self.size, dtype=np.uint32)
            self.arange = np.arange(self.size, dtype=np.uint64)
        return self


def _sort_super(key_parts: list[np.ndarray], doc_parts: list[np.ndarray], pbits: int, n_docs: int,
                scratch: _Scratch, *, in_scratch: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort one radix group by (identity, doc) and drop repeated pairs; returns (entries per
    partition of the group, fingerprints, docs), the last two freshly allocated, or with
    ``in_scratch`` views of the scratch buffers (valid until its next use: to be written out)."""
    ident_bits = pbits + FP_BITS
    local_bits = ident_bits - _SUPER_BITS
    sub = 1 << (pbits - _SUPER_BITS)
    m = sum(len(k) for k in key_parts)
    sc = scratch.get(m)
    local = sc.packed[:m]
    a = 0
    for k in key_parts:  # the identity bits below the group's 8, one piece at a time
        np.left_shift(k, np.uint64(_SUPER_BITS), out=local[a:a + len(k)])
        a += len(k)
    local >>= np.uint64(64 - local_bits)
    docs = np.concatenate(doc_parts, out=sc.docs[:m]) if doc_parts else sc.docs[:0]
    idx_bits = 64 - local_bits
    sorted_docs = sc.sorted_docs[:m]
    if n_docs <= (1 << idx_bits):
        # Pack (identity, document) into one uint64: a plain sort orders by both, and the
        # documents come back out of the low bits (no gather through a permutation).
        local <<= np.uint64(idx_bits)
        local |= docs
        local.sort()
        np.bitwise_and(local, np.uint64((1 << idx_bits) - 1), out=sorted_docs, casting="unsafe")
        local >>= np.uint64(idx_bits)
    elif m < (1 << idx_bits):
        # (identity, position): ties keep input order, which is document order
        local <<= np.uint64(idx_bits)
        local |= sc.arange[:m]
        local.sort()
        perm = np.bitwise_and(local, np.uint64((1 << idx_bits) - 1),
                              out=sc.perm[:m].view(np.uint64)).view(np.int64)
        local >>= np.uint64(idx_bits)
        np.take(docs, perm, out=sorted_docs)
    else:
        perm = np.argsort(local, kind="stable")
        local[...] = local[perm]
        np.take(docs, perm, out=sorted_docs)
    keep = sc.keep[:m]
    if m:
        keep[0] = True
        np.not_equal(local[1:], local[:-1], out=keep[1:])
        keep[1:] |= np.not_equal(sorted_docs[1:], sorted_docs[:-1], out=sc.tmp[: m - 1])
    if keep.all():
        kept = local
        dd = sorted_docs if in_scratch else sorted_docs.copy()
    else:
        kept = local[keep]
        dd = (np.compress(keep, sorted_docs, out=sc.out_docs[:len(kept)]) if in_scratch
              else sorted_docs[keep])
    fp = sc.out_fps[:len(kept)] if in_scratch else np.empty(len(kept), dtype=np.uint32)
    fp[...] = kept  # the low 32 bits: the fingerprint
    kept >>= np.uint64(FP_BITS)  # the partition within the group (kept is scratch or a copy)
    counts = np.bincount(kept.view(np.int64), minlength=sub)
    return counts, fp, dd


class _Sharded:
    """Several uint32 arrays read as one: the sorted groups of a build, or zero-copy views of
    the store's shard blobs. A partition never straddles two of them."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = parts
        self.start = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=self.start[1:])

    def __len__(self) -> int:
        return int(self.start[-1])

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None
                  ) -> np.ndarray:
        arr = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.uint32)
        return arr if dtype is None else arr.astype(dtype)

    def shard_of(self, idx: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(self.start, idx, side="right") - 1, 0,
                       max(len(self.parts) - 1, 0))

    def groups(self, idx: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """(shard, positions in ``idx`` of the indices that fall in it), for each shard hit."""
        s = self.shard_of(idx)
        order = np.argsort(s, kind="stable")
        bounds = np.searchsorted(s[order], np.arange(len(self.parts) + 1))
        for k in np.flatnonzero(np.diff(bounds)).tolist():
            yield k, order[bounds[k]:bounds[k + 1]]

    def __getitem__(self, idx: slice | npt.ArrayLike) -> np.ndarray:
        if isinstance(idx, slice):
            return np.asarray(self)[idx]
        idx = np.asarray(idx, dtype=np.int64)
        flat = idx.ravel()
        out = np.empty(flat.shape, dtype=np.uint32)
        for k, sel in self.groups(flat):
            out[sel] = self.parts[k][flat[sel] - self.start[k]]
        return out.reshape(idx.shape)


@dataclass
class BuildStats:
    """What a build did (or that it was loaded)."""

    seconds: float = 0.0
    docs: int = 0
    tokens: int = 0
    entries: int = 0
    short_docs: int = 0
    spilled: bool = False
    loaded: bool = False
    load_seconds: float = 0.0
    #: of ``seconds``: reading and hashing the corpus, then sorting and writing the entries
    hash_seconds: float = 0.0
    sort_seconds: float = 0.0


@dataclass
class ContaminationIndex:
    """The corpus-side index (see the module docstring). Build with :meth:`build`."""

    n: int
    n_docs: int
    pbits: int
    offsets: np.ndarray
    fps: np.ndarray | _Sharded  # _Sharded when built in groups or loaded from the store
    docs: np.ndarray | _Sharded
    minhash_docs: np.ndarray
    minhash_sigs: np.ndarray
    params: IndexParams
    corpus_checksum: str | None
    ref_name: str | None = None
    built: bool = True
    stats: BuildStats = field(default_factory=BuildStats)
    _doc_ids: pa.Array | None = None
    _doc_ids_key: str | None = None
    _store: Store | None = None
    _shards: list[_ShardRef] | None = None
    _stream_checksum: str | None = None
    _mh_chunks: list[_MinhashChunk] | None = None
    #: full 64-bit hash of each document's whole token sequence (0: no tokens), so the exact
    #: rule confirms a whole-document match on all 64 bits, not the entries' pbits + 32
    whole_hashes: np.ndarray | None = None
    materialized: bool = True

    # -- public --------------------------------------------------------------------------------
    @classmethod
    def build(cls, corpus: object, *, n: int = 13, text_field: Fields = "text",
              id_field: str | None = "id",
              store: StoreArg = None, reuse: bool = True, batch_size: int = 256,
              near_dup_max_tokens: int = 512, shingle: int = 3, num_perm: int = 128,
              memory_limit: int = 2 << 30, materialize: bool = True,
              workers: int | None = None) -> ContaminationIndex:
        """Build the index of ``corpus`` (texts, rows or JSONL/Parquet paths), or load the one
        already saved for the same corpus checksum and parameters.

        ``store``: an ``assay.Store`` or a path (``None``: the default store, ``$ASSAY_STORE`` or
        ``./.assay``; ``False``: keep it in memory only). ``reuse=False`` rebuilds and overwrites.
        ``memory_limit`` (bytes) bounds the build's buffered entries; beyond it they spill to a
        temporary directory. ``materialize=False`` (with a store) writes the index to the store
        without keeping its arrays in memory: memory stays bounded for any corpus size, and a
        later ``build`` of the same corpus loads it. ``workers`` threads hash batches and sort
        groups (default: one more than the CPUs, at most 8: the compiled loops and numpy release
        the GIL, and the extra thread covers the parts that hold it).

        Example:
            >>> idx = ContaminationIndex.build(["a b c d e"], n=2, store=False)
            >>> idx.n_docs, idx.doc_ids()
            (1, ['0'])
        """
        params = index_params(n=n, text_field=text_field, id_field=id_field,
                              near_dup_max_tokens=near_dup_max_tokens, shingle=shingle,
                              num_perm=num_perm)
        src = corpus if isinstance(corpus, CorpusSource) else CorpusSource(
            corpus, text_field=text_field, id_field=id_field)
        st = resolve_store(store)
        checksum = ref_name = None
        if st is not None and src.reiterable:
            t0 = time.perf_counter()
            checksum = src.checksum(st)
            ref_name = index_ref_name(checksum, params)
            if reuse:
                loaded = cls._load(st, ref_name)
                if loaded is not None:
                    loaded.stats.load_seconds = time.perf_counter() - t0
                    return loaded
        if not materialize and st is None:
            raise StoreError("materialize=False keeps the index only in the store: pass store=")
        idx = cls._build(src, params, batch_size=batch_size, memory_limit=memory_limit,
                         store=st, materialize=materialize,
                         workers=(workers if workers is not None
                                  else min(8, (os.cpu_count() or 1) + 1)))
        idx.corpus_checksum = checksum
        if st is not None:
            if ref_name is None:  # a one-shot iterator: its checksum is known only now
                checksum = idx._stream_checksum
                assert checksum is not None  # _build hashes a one-shot source as it reads it
                idx.corpus_checksum = checksum
                ref_name = index_ref_name(checksum, params)
            idx._save(st, ref_name)
        return idx

    def doc_ids(self, which: Sequence[int] | np.ndarray | None = None) -> list[str]:
        """Corpus document ids (all, or those at the given positions)."""
        if self._doc_ids is None:
            if self._store is None or self._doc_ids_key is None:
                raise StoreError("this index's document ids are not available (its store entry "
                                 "is gone)")
            t = self._store.get_table(self._doc_ids_key)
            if t is None:
                raise StoreError(f"document ids {self._doc_ids_key} are missing or corrupt in "
                                 f"{self._store}")
            self._doc_ids = t.column("id").combine_chunks()
        if which is None:
            return self._doc_ids.to_pylist()
        return self._doc_ids.take(pa.array(np.asarray(which, dtype=np.int64))).to_pylist()

    def ranges(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each 64-bit span hash, the [lo, hi) range of its entries in ``docs`` (hi - lo is
        the number of corpus documents holding it)."""
        if not self.materialized:
            raise StoreError("this index was built with materialize=False; load it with "
                             "ContaminationIndex.build(corpus, store=...) to query it")
        q = np.asarray(hashes, dtype=np.uint64)
        if len(q) == 0 or len(self.fps) == 0:
            z = np.zeros(len(q), dtype=np.int64)
            return z, z.copy()
        ident = q >> np.uint64(64 - self.pbits - FP_BITS)
        part = (ident >> np.uint64(FP_BITS)).astype(np.int64)
        f = (ident & _M32).astype(np.uint32)
        lo0 = self.offsets[part]
        hi0 = self.offsets[part + 1]
        fps = self.fps
        if not isinstance(fps, _Sharded):
            return _bounds(fps, f, lo0, hi0)
        # a partition never straddles two shards: search each shard's queries in that shard
        lo, hi = lo0.copy(), hi0.copy()
        for k, sel in fps.groups(lo0):
            base = fps.start[k]
            a, b, fk = lo0[sel] - base, hi0[sel] - base, f[sel]
            part_lo, part_hi = _bounds(fps.parts[k], fk, a, b)
            lo[sel] = part_lo + base
            hi[sel] = part_hi + base
        return lo, hi

    def doc_frequency(self, hashes: np.ndarray) -> np.ndarray:
        """Number of corpus documents holding each span hash."""
        lo, hi = self.ranges(hashes)
        return hi - lo

    def __repr__(self) -> str:
        return (f"ContaminationIndex(n={self.n}, docs={self.n_docs}, entries={len(self.fps)}, "
                f"short_docs={len(self.minhash_docs)}, built={self.built})")

    # -- build ---------------------------------------------------------------------------------
    @classmethod
    def _build(cls, src: CorpusSource, params: IndexParams, *, batch_size: int,
               memory_limit: int, store: Store | None = None, materialize: bool = True,
               workers: int = 2) -> ContaminationIndex:
        t0 = time.perf_counter()
        stream_hash = None if src.reiterable else hashlib.sha256()
        n = params["n"]
        k = params["shingle"]
        maxlen = params["near_dup_max_tokens"]
        runs = _Runs(memory_limit)
        ids: list[str] = []
        mh_docs: list[np.ndarray] = []
        mh_sigs: list[np.ndarray] = []
        mh_chunks: list[_MinhashChunk] = []  # written to the store as they fill (bounded memory)
        n_short = 0
        tokens = 0
        whole_parts: list[tuple[np.ndarray, np.ndarray]] = []
        def hash_chunk(texts: list[str], base: int) -> _Chunk:
            enc = encode(texts, scratch=True)  # used up before this thread's next encode
            sh = SpanHasher(enc)
            h, _pos, d = sh.ngrams(n, NGRAM_SALT)
            eh, ed = sh.whole_texts(WHOLE_SALT)
            sgh, sgd = sh.segments(n, EXACT_SALT)
            lens = enc.lengths()
            short = (lens >= k) & (lens <= maxlen)
            mh = None
            if short.any():
                shh, _p, shd = sh.ngrams(k, SHINGLE_SALT, docs=np.flatnonzero(short))
                # datasketch's legacy values are below 2^32: 4 bytes each
                sig = signatures(shh, shd, num_perm=params["num_perm"]).astype(np.uint32)
                mh = (np.unique(shd).astype(np.uint32) + np.uint32(base), sig)
            # n-grams first, then exact spans: within a radix group, entries stay in document order
            # per hash family, which the deduplication after sorting relies on
            keys = np.concatenate([h, eh, sgh])
            docs = np.concatenate([d, ed, sgd])
            docs += base
            return len(enc.hashes), keys, docs, mh, (eh, ed + base)

        def work(texts: list[str], base: int) -> _Batch:
            # Tokenized in chunks of a few MB: their temporaries stay in cache and in reused heap
            # memory (one large batch pays page faults for fresh pages; measured ~1.5x slower).
            parts = [hash_chunk(texts[a:a + _ENCODE_CHUNK], base + a)
                     for a in range(0, len(texts), _ENCODE_CHUNK)]
            mhs = [p[3] for p in parts if p[3] is not None]
            mh = ((np.concatenate([m[0] for m in mhs]), np.concatenate([m[1] for m in mhs]))
                  if mhs else None)
            keys = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
            docs = parts[0][2] if len(parts) == 1 else np.concatenate([p[2] for p in parts])
            whole = (np.concatenate([p[4][0] for p in parts]),
                     np.concatenate([p[4][1] for p in parts]))
            return (sum(p[0] for p in parts), *_Runs.partition(keys, docs), mh, whole)

        def batches() -> Iterator[tuple[list[str], int]]:
            for batch_ids, texts in src.batches(batch_size):
                if stream_hash is not None:
                    stream_hash.update(("\x1f".join(batch_ids) + "\x1d" + "\x1e".join(texts)
                                        + "\x1c").encode("utf-8", "surrogatepass"))
                base = len(ids)
                ids.extend(batch_ids)
                yield texts, base

        try:
            # Batches are hashed in worker threads (the compiled loops and numpy release the
            # GIL), in order, with a bounded number in flight so memory stays bounded on any corpus.
            for ntok, keys, docs, bounds, mh, whole in ordered_map(lambda b: work(*b), batches(),
                                                                   workers=workers):
                whole_parts.append(whole)
                tokens += ntok
                runs.add(keys, docs, bounds)
                if mh is not None:
                    mh_docs.append(mh[0])
                    mh_sigs.append(mh[1])
                    n_short += len(mh[0])
                    if (not materialize and store is not None
                            and sum(x.nbytes for x in mh_sigs) >= _SHARD_BYTES):
                        mh_chunks.append(_put_minhash(store, mh_docs, mh_sigs))
                        mh_docs, mh_sigs = [], []
            t_hashed = time.perf_counter()
            pbits = _partition_bits(runs.total)
            sub = 1 << (pbits - _SUPER_BITS)
            counts = np.zeros(1 << pbits, dtype=np.int64)
            fps_parts: list[np.ndarray] = []
            doc_parts: list[np.ndarray] = []
            per_thread = threading.local()

            def sort_group(kp: list[np.ndarray], dp: list[np.ndarray]) -> tuple[Any, ...]:
                if not hasattr(per_thread, "scratch"):
                    per_thread.scratch = _Scratch()
                group_counts, fp, dd = _sort_super(kp, dp, pbits, len(ids), per_thread.scratch,
                                                   in_scratch=store is not None)
                if store is None:
                    return group_counts, fp, dd, None
                # Written straight from the scratch buffers, one blob per group (fingerprints,
                # then documents): no fresh copy of the index is faulted into memory (on this VM
                # ~1 ms per MB). Not fsynced (hundreds of MB: seconds): a blob lost to a crash
                # fails its checksum on load, and the index is rebuilt.
                return group_counts, None, None, {
                    "count": len(fp), "key": store.put_parts([fp, dd], durable=False)}

            # Groups are sorted (and written) in worker threads, in order, a few at a time:
            # numpy's sort and sha256 release the GIL.
            shards: list[_ShardRef] = []
            with ThreadPoolExecutor(max(1, workers)) as ex:
                sorting: deque[tuple[int, Any]] = deque()

                def collect() -> None:
                    s, fut = sorting.popleft()
                    group_counts, fp, dd, shard = fut.result()
                    counts[s * sub:(s + 1) * sub] = group_counts
                    if shard is not None:
                        shards.append(shard)
                    elif materialize:
                        fps_parts.append(fp)
                        doc_parts.append(dd)

                for s in range(1 << _SUPER_BITS):
                    kp, dp = runs.take(s)
                    if sum(len(k) for k in kp) == 0:
                        continue
                    sorting.append((s, ex.submit(sort_group, kp, dp)))
                    del kp, dp
                    while len(sorting) > max(1, workers):
                        collect()
                while sorting:
                    collect()
            if store is not None and materialize:
                # the blobs just written, mapped read-only: the page cache holds them already
                for sh in shards:
                    view = store.map_fresh(sh["key"])
                    fps_parts.append(np.frombuffer(view, dtype="<u4", count=sh["count"]))
                    doc_parts.append(np.frombuffer(view, dtype="<u4", count=sh["count"],
                                                   offset=4 * sh["count"]))
            spilled = runs.tmp is not None
        finally:
            runs.close()
        offsets = np.zeros((1 << pbits) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # the sorted groups as they are (a partition never straddles two), not one joined copy
        fps = _Sharded(fps_parts) if fps_parts else np.zeros(0, dtype=np.uint32)
        doc_arr = _Sharded(doc_parts) if doc_parts else np.zeros(0, dtype=np.uint32)
        whole_hashes = np.zeros(len(ids), dtype=np.uint64)
        for wh, wd in whole_parts:
            whole_hashes[wd] = wh
        t_sorted = time.perf_counter()
        stats = BuildStats(seconds=t_sorted - t0, hash_seconds=t_hashed - t0,
                           sort_seconds=t_sorted - t_hashed,
                           docs=len(ids), tokens=tokens,
                           entries=int(offsets[-1]), short_docs=n_short, spilled=spilled)
        if store is not None and not materialize and mh_docs:
            mh_chunks.append(_put_minhash(store, mh_docs, mh_sigs))
            mh_docs, mh_sigs = [], []
        return cls(
            n=n, n_docs=len(ids), pbits=pbits, offsets=offsets, fps=fps, docs=doc_arr,
            minhash_docs=np.concatenate(mh_docs) if mh_docs else np.zeros(0, dtype=np.uint32),
            minhash_sigs=(np.concatenate(mh_sigs) if mh_sigs
                          else np.zeros((0, params["num_perm"]), dtype=np.uint32)),
            params=params, corpus_checksum=None, built=True, stats=stats, whole_hashes=whole_hashes,
            _doc_ids=pa.array(ids, type=pa.string()), _shards=shards if store is not None else None,
            _stream_checksum=(None if stream_hash is None
                              else "corpus:" + stream_hash.hexdigest()[:32]),
            _mh_chunks=mh_chunks if (store is not None and not materialize) else None,
            materialized=materialize,
        )

    # -- store ---------------------------------------------------------------------------------
    def _save(self, store: Store, ref_name: str) -> None:
        t0 = time.perf_counter()
        shards = self._shards
        if shards is None:
            shards = []
            fparts = self.fps.parts if isinstance(self.fps, _Sharded) else [self.fps]
            dparts = self.docs.parts if isinstance(self.docs, _Sharded) else [self.docs]
            for fp, dd in zip(fparts, dparts):
                if len(fp):
                    shards.append({"count": len(fp),
                                   "key": store.put_parts([fp, dd], durable=False)})
        manifest: dict[str, Any] = {
            "kind": "assay.decontam.index", "version": INDEX_VERSION, "params": self.params,
            "n_docs": self.n_docs, "pbits": self.pbits, "corpus": self.corpus_checksum,
            "offsets": store.put_bytes(self.offsets.astype("<i8").tobytes()),
            "whole": store.put_bytes(np.asarray(self.whole_hashes, dtype="<u8").tobytes()),
            "shards": shards,
            "doc_ids": store.put_table(pa.table({"id": self._doc_ids})),
            "minhash": (self._mh_chunks if self._mh_chunks is not None else
                        ([_put_minhash(store, [self.minhash_docs], [self.minhash_sigs])]
                         if len(self.minhash_docs) else [])),
            "stats": {"seconds": self.stats.seconds, "docs": self.stats.docs,
                      "tokens": self.stats.tokens,
                      "entries": self.stats.entries, "short_docs": self.stats.short_docs},
        }
        key = store.put_json(manifest)
        store.set_ref(ref_name, key, {"corpus": self.corpus_checksum, "n": self.n})
        self.ref_name = ref_name
        self._doc_ids_key = manifest["doc_ids"]
        self._store = store
        self.stats.seconds += time.perf_counter() - t0

    @classmethod
    def _load(cls, store: Store, ref_name: str) -> ContaminationIndex | None:
        ref = store.get_ref(ref_name)
        if ref is None:
            return None
        m = store.get_json(ref["blob"])
        if not m or m.get("kind") != "assay.decontam.index" or m.get("version") != INDEX_VERSION:
            return None
        keys = ([s["key"] for s in m["shards"]] + [m["offsets"], m["whole"]]
                + [k for c in m["minhash"] for k in (c["docs"], c["sigs"])])
        # Verified reads (sha256) of the shards run in threads: hashlib releases the GIL.
        with ThreadPoolExecutor(2) as ex:
            read = list(ex.map(store.get_bytes, keys))
        blobs = [b for b in read if b is not None]
        if len(blobs) != len(read):
            return None  # a missing or corrupt piece: rebuild rather than trust it
        shard_blobs = blobs[: len(m["shards"])]
        # zero-copy views of the verified bytes: a reuse never copies the index
        fps = _Sharded([np.frombuffer(b, dtype="<u4", count=s["count"])
                        for s, b in zip(m["shards"], shard_blobs)])
        docs = _Sharded([np.frombuffer(b, dtype="<u4", count=s["count"], offset=4 * s["count"])
                         for s, b in zip(m["shards"], shard_blobs)])
        offsets = blobs[len(m["shards"])]
        whole = np.frombuffer(blobs[len(m["shards"]) + 1], dtype="<u8")
        mh = blobs[len(m["shards"]) + 2:]
        num_perm = m["params"]["num_perm"]
        mh_docs = (np.concatenate([np.frombuffer(b, dtype="<u4") for b in mh[0::2]]) if mh
                   else np.zeros(0, dtype=np.uint32))
        mh_sigs = (np.concatenate([np.frombuffer(b, dtype="<u4").reshape(-1, num_perm)
                                   for b in mh[1::2]]) if mh
                   else np.zeros((0, num_perm), dtype=np.uint32))
        stats = BuildStats(loaded=True, docs=m["n_docs"], entries=len(fps),
                           short_docs=len(mh_docs), tokens=m["stats"]["tokens"])
        return cls(
            n=m["params"]["n"], n_docs=m["n_docs"], pbits=m["pbits"],
            offsets=np.frombuffer(offsets, dtype="<i8"), fps=fps, docs=docs,
            minhash_docs=mh_docs,
            minhash_sigs=mh_sigs,
            params=m["params"], corpus_checksum=m["corpus"], ref_name=ref_name, built=False,
            stats=stats, _doc_ids_key=m["doc_ids"], _store=store, whole_hashes=whole,
        )


def _put_minhash(store: Store, docs: list[np.ndarray], sigs: list[np.ndarray]
                 ) -> _MinhashChunk:
    d = np.concatenate(docs).astype("<u4")
    s = np.concatenate(sigs).astype("<u4")
    return {"count": len(d), "docs": store.put_bytes(d.tobytes()),
            "sigs": store.put_bytes(s.tobytes())}


def _bounds(arr: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bound of each ``x[i]`` in the sorted slice ``arr[lo[i]:hi[i]]``: the
    compiled loop, or the vectorized numpy search it is tested against."""
    kernels = _kernels()
    if kernels is not None:
        return kernels.bounds(arr, x, lo, hi)
    return _bsearch(arr, x, lo, hi, right=False), _bsearch(arr, x, lo, hi, right=True)


def _bsearch(arr: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, *,
             right: bool) -> np.ndarray:
    """Vectorized lower (or upper) bound of ``x[i]`` in ``arr[lo[i]:hi[i]]`` (sorted slices)."""
    lo = lo.copy()
    hi = hi.copy()
    last = len(arr) - 1
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) >> 1
        v = arr[np.minimum(mid, last)]
        go = (v <= x) if right else (v < x)
        go &= active
        lo = np.where(go, mid + 1, lo)
        hi = np.where(active & ~go, mid, hi)
