"""The eval-side question: which eval items occur in a training corpus, by which rule, how much.

``contamination(eval_rows, corpus)`` answers it per item against a :class:`ContaminationIndex`
(built once per corpus and reused from the store); the same matching core serves the train-side
filter in :mod:`assay.decontam.filtering`. With a store, the answer itself is saved under a ref
named by the index's ref (corpus checksum + index parameters), the eval items' content hash and
the matching parameters: a nightly rerun of an unchanged eval set against an unchanged corpus
reads it back (``report.corpus["result_cached"]``) instead of loading the index; any change to
the corpus, the items or a parameter misses that ref and matches again.

Rules, in order (the first that fires is the item's ``rule``):

1. ``exact``: the item's normalized token sequence is a whole corpus document; or, for an item
   shorter than ``n`` tokens, a whole sentence/line of one (segments found in more documents
   than the boilerplate cutoff are ignored).
2. ``ngram``: at least ``min_coverage`` of the item's tokens lie inside n-grams that occur in
   the corpus (coverage measured against the *item*, so a question quoted in a 5,000-word page
   has coverage 1.0). N-grams in more than the cutoff's number of documents (licence headers,
   "let's think step by step") are boilerplate: they neither count nor flag.
3. ``near_duplicate``: MinHash (``num_perm`` permutations over ``shingle``-token shingles) of
   the item against the corpus's short documents through datasketch's LSH, estimated Jaccard at
   least ``near_duplicate``.
4. ``semantic`` (only with ``semantic=True``): cosine of sentence embeddings at least
   ``similarity``; the report carries a calibration hint for the threshold.

Example:
    >>> corpus = ["Some page. " + "What is the boiling point of water at sea level in degrees "
    ...           "Celsius, answer with a number only please thanks. More text."]
    >>> evals = [{"prompt": "What is the boiling point of water at sea level in degrees Celsius, "
    ...           "answer with a number only please thanks"},
    ...          {"prompt": "Name a prime larger than 100."}]
    >>> r = contamination(evals, corpus, store=False)
    >>> [(i.contaminated, i.rule, i.coverage) for i in r.items]
    [(True, 'ngram', 1.0), (False, None, 0.0)]
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np

from assay.decontam.corpus import CorpusSource, Fields, utf8_bytes
from assay.decontam.index import (
    ContaminationIndex,
    IndexParams,
    StoreArg,
    index_params,
    index_ref_name,
    resolve_store,
)
from assay.decontam.ngrams import EXACT_SALT, SHINGLE_SALT, WHOLE_SALT, SpanHasher
from assay.decontam.normalize import encode
from assay.decontam.results import RULES, Contamination, ItemMatch
from assay.errors import RowsError, RowsTypeError
from assay.hashing import combine
from assay.intervals import wilson_interval
from assay.results import Estimate

if TYPE_CHECKING:
    from assay.decontam.semantic import Embedder
    from assay.rows import RowsLike
    from assay.store import Store

_DF_FLOOR = 10


def resolve_cutoff(max_df: float | int, n_docs: int) -> int:
    """Documents an n-gram may occur in before it counts as boilerplate.

    A float in (0, 1] is a fraction of the corpus, floored at 10 documents so small corpora keep
    a usable rule; an int is a count.

    Example:
        >>> resolve_cutoff(0.01, 100_000), resolve_cutoff(0.01, 200), resolve_cutoff(3, 200)
        (1000, 10, 3)
    """
    if isinstance(max_df, bool) or not isinstance(max_df, (int, float)):
        raise RowsError(f"max_df must be a fraction in (0, 1] or a document count, got {max_df!r}")
    if isinstance(max_df, int):
        if max_df < 1:
            raise RowsError(f"max_df as a count must be >= 1, got {max_df}")
        return max_df
    if not 0 < max_df <= 1 or math.isnan(max_df):
        raise RowsError(f"max_df as a fraction must be in (0, 1], got {max_df}")
    return max(_DF_FLOOR, math.ceil(max_df * n_docs))


def eval_items(eval_rows: RowsLike | Sequence[str], fields: Sequence[str] = ("prompt",)
               ) -> tuple[list[str], list[str]]:
    """(task ids, texts) of the distinct eval items: one per task id, first row wins; ``fields``
    are row columns joined with newlines. A list of strings is taken as prompts."""
    from assay.rows import as_table

    if (isinstance(eval_rows, (list, tuple)) and eval_rows
            and all(isinstance(x, str) for x in eval_rows)):
        eval_rows = [{"prompt": x} for x in eval_rows]
    if isinstance(fields, str):
        fields = (fields,)
    for f in fields:
        if f not in ("prompt", "final_text"):
            raise RowsError(f"fields: {f!r} is not a text column of eval rows; use 'prompt' "
                            "and/or 'final_text'")
    # a non-empty list of strings became rows above; as_table checks whatever else came
    table = as_table(cast("RowsLike", eval_rows), require=("prompt",), argument="eval_rows")
    tids = table.column("task_id").to_pylist()
    cols = [table.column(f).to_pylist() for f in fields]
    seen: dict[str, int] = {}
    out_t, out_x = [], []
    for i, t in enumerate(tids):
        if t in seen:
            continue
        seen[t] = i
        out_t.append(t)
        out_x.append("\n".join(c[i] for c in cols if c[i]))
    return out_t, out_x


class _SemanticCfg(TypedDict):
    """The semantic rule's settings: the embedder, the cosine threshold and the corpus's
    embedding batches (a callable, so each pass streams them again)."""

    embedder: Embedder
    similarity: float
    corpus_vectors: Callable[[], Iterator[np.ndarray]]


@dataclass
class _Pairs:
    """(item, corpus document) pairs behind each rule, with a score (coverage, Jaccard, cosine)."""

    item: np.ndarray
    doc: np.ndarray
    rule: np.ndarray  # index into RULES
    score: np.ndarray


def _interval_union(group_new: np.ndarray, pos: np.ndarray, n: int) -> np.ndarray:
    """Tokens covered by n-grams starting at sorted ``pos`` within each group, per element (sum
    these per group): the first n-gram of a group adds n, each next adds min(n, gap)."""
    add = np.full(len(pos), n, dtype=np.int64)
    if len(pos) > 1:
        gap = np.diff(pos)
        cont = ~group_new[1:]
        add[1:][cont] = np.minimum(gap[cont], n)
    return add


def match(task_ids: list[str], texts: list[str], index: ContaminationIndex, *,
          min_coverage: float = 0.5, max_df: float | int = 0.01, near_duplicate: float | None = 0.7,
          semantic: _SemanticCfg | None = None, max_doc_ids: int = 10,
          ) -> tuple[list[ItemMatch], _Pairs, dict[str, object]]:
    """The matching core: per-item verdicts, the (item, doc) pairs behind them, and facts for
    the report (cutoff, short items, calibration)."""
    n = index.n
    m = len(texts)
    cutoff = resolve_cutoff(max_df, index.n_docs)
    enc = encode(texts, spans=True)
    sh = SpanHasher(enc)
    lens = enc.lengths()
    pair_parts: list[tuple[np.ndarray, np.ndarray, int, np.ndarray]] = []

    # exact: whole documents (no cutoff), and short items against short segments (cutoff)
    wh, wi = sh.whole_texts(WHOLE_SALT)
    lo, hi = index.ranges(wh)
    wpi, wpd = _expand(index, wi, lo, hi)
    if index.whole_hashes is not None and len(wpi):
        # entries keep pbits + 32 bits of a hash: confirm whole-document matches on all 64
        wh_of = np.zeros(m, dtype=np.uint64)
        wh_of[wi] = wh
        ok = index.whole_hashes[wpd] == wh_of[wpi]
        wpi, wpd = wpi[ok], wpd[ok]
    exact_pairs: list[tuple[np.ndarray, ...]] = [(wpi, wpd)]
    short = np.flatnonzero((lens > 0) & (lens < n))
    if len(short):
        sh_h = sh.spans(enc.doc_token_start[short], lens[short], EXACT_SALT)
        lo, hi = index.ranges(sh_h)
        ok = (hi - lo) <= cutoff
        exact_pairs.append(_expand(index, short[ok], lo[ok], hi[ok]))
    ei = np.concatenate([p[0] for p in exact_pairs])
    ed = np.concatenate([p[1] for p in exact_pairs])
    if len(ei):
        u = np.unique(np.stack([ei, ed.astype(np.int64)]), axis=1)
        ei, ed = u[0], u[1]
    pair_parts.append((ei, ed, 0, np.ones(len(ei))))

    # n-gram coverage, measured against the item
    h, pos, it = sh.ngrams(n)
    lo, hi = index.ranges(h)
    df = hi - lo
    boiler = df > cutoff
    hit = (df > 0) & ~boiler
    n_boiler = np.bincount(it[boiler], minlength=m)
    mi, mp = it[hit], pos[hit]
    new = np.ones(len(mi), dtype=bool)
    new[1:] = mi[1:] != mi[:-1]
    covered = np.bincount(mi, weights=_interval_union(new, mp, n), minlength=m)
    coverage = np.divide(covered, lens, out=np.zeros(m), where=lens > 0)
    # per (item, doc) coverage: expand each matched n-gram to its documents
    pi, pd_, pp = _expand(index, mi, lo[hit], hi[hit], extra=mp)
    order = np.lexsort((pp, pd_, pi))
    pi, pd_, pp = pi[order], pd_[order], pp[order]
    gnew = np.ones(len(pi), dtype=bool)
    gnew[1:] = (pi[1:] != pi[:-1]) | (pd_[1:] != pd_[:-1])
    add = _interval_union(gnew, pp, n)
    starts = np.flatnonzero(gnew)
    pair_item = pi[starts]
    pair_doc = pd_[starts]
    pair_cov = np.add.reduceat(add, starts) / lens[pair_item] if len(starts) else np.zeros(0)
    pair_parts.append((pair_item, pair_doc, 1, pair_cov))

    # near-duplicates: MinHash LSH against the corpus's short documents
    k = index.params["shingle"]
    jacc_best = np.full(m, np.nan)
    if near_duplicate is not None and len(index.minhash_docs):
        from assay.decontam.neardup import lsh_candidates, signatures

        cand_items = np.flatnonzero(lens >= k)
        shh, _p, shd = sh.ngrams(k, SHINGLE_SALT, docs=cand_items)
        sigs = signatures(shh, shd, num_perm=index.params["num_perm"])
        owners = np.unique(shd)
        cands = lsh_candidates(np.asarray(index.minhash_sigs), sigs, threshold=near_duplicate)
        ni, nd, ns = [], [], []
        for row, (item, cs) in enumerate(zip(owners.tolist(), cands)):
            if not cs:
                continue
            est = (np.asarray(index.minhash_sigs)[cs] == sigs[row]).mean(axis=1)
            good = est >= near_duplicate
            if good.any():
                jacc_best[item] = est.max()
                ni.extend([item] * int(good.sum()))
                nd.extend(index.minhash_docs[np.asarray(cs)[good]].tolist())
                ns.extend(est[good].tolist())
            else:
                jacc_best[item] = est.max()
        pair_parts.append((np.asarray(ni, dtype=np.int64), np.asarray(nd, dtype=np.int64), 2,
                           np.asarray(ns, dtype=float)))

    facts: dict[str, object] = {"cutoff": cutoff, "short_items": int(len(short)),
                             "empty_items": int((lens == 0).sum()),
                             "boilerplate_ngrams": int(boiler.sum())}
    sim_best = np.full(m, np.nan)
    if semantic is not None:
        si, sd, ss, best, cal = _semantic(texts, semantic)
        pair_parts.append((si, sd, 3, ss))
        sim_best = best
        facts["calibration"] = cal

    pairs = _Pairs(
        item=np.concatenate([p[0] for p in pair_parts]).astype(np.int64),
        doc=np.concatenate([p[1] for p in pair_parts]).astype(np.int64),
        rule=np.concatenate([np.full(len(p[0]), p[2], dtype=np.int64) for p in pair_parts]),
        score=np.concatenate([np.asarray(p[3], dtype=float) for p in pair_parts]),
    )
    # per item: the first rule with a pair (ngram additionally needs item-level coverage)
    rule_of = np.full(m, -1, dtype=np.int64)
    for r in range(len(RULES)):
        if r == 1:  # coverage over the union of documents, measured against the item
            items_r = np.flatnonzero((coverage >= min_coverage) & (lens >= n))
        else:
            items_r = np.unique(pairs.item[pairs.rule == r])
        free = items_r[rule_of[items_r] == -1]
        rule_of[free] = r
    items = _items(task_ids, texts, enc, rule_of, coverage, lens, n_boiler, pairs, mi, mp, n,
                   jacc_best, sim_best, index, max_doc_ids)
    return items, pairs, facts


def _expand(index: ContaminationIndex, owner: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            extra: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Repeat each owner once per corpus entry in its [lo, hi) range: (owner, doc[, extra])."""
    cnt = (hi - lo).astype(np.int64)
    total = int(cnt.sum())
    if total == 0:
        z = np.zeros(0, dtype=np.int64)
        return (z, z.copy()) if extra is None else (z, z.copy(), z.copy())
    first = np.cumsum(cnt) - cnt
    idx = np.repeat(lo - first, cnt) + np.arange(total, dtype=np.int64)
    docs = index.docs[idx].astype(np.int64)
    own = np.repeat(np.asarray(owner, dtype=np.int64), cnt)
    if extra is None:
        return own, docs
    return own, docs, np.repeat(extra, cnt)


def _items(task_ids, texts, enc, rule_of, coverage, lens, n_boiler, pairs, mi, mp, n,
           jacc_best, sim_best, index, max_doc_ids) -> list[ItemMatch]:
    m = len(texts)
    # strongest documents per (item, rule)
    order = np.lexsort((-pairs.score, pairs.rule, pairs.item))
    pit, pru, pdo = pairs.item[order], pairs.rule[order], pairs.doc[order]
    docs_for: dict[int, list[int]] = {}
    ndocs_for: dict[int, int] = {}
    contaminated = np.flatnonzero(rule_of >= 0)
    sel = np.isin(pit, contaminated)
    pit, pru, pdo = pit[sel], pru[sel], pdo[sel]
    keep = pru == rule_of[pit]
    pit, pdo = pit[keep], pdo[keep]
    if len(pit):
        starts = np.flatnonzero(np.r_[True, pit[1:] != pit[:-1]])
        ends = np.r_[starts[1:], len(pit)]
        for a, b in zip(starts.tolist(), ends.tolist()):
            seen = list(dict.fromkeys(pdo[a:b].tolist()))
            docs_for[int(pit[a])] = seen[:max_doc_ids]
            ndocs_for[int(pit[a])] = len(seen)
    wanted = sorted({d for v in docs_for.values() for d in v})
    names = dict(zip(wanted, index.doc_ids(wanted))) if wanted else {}
    # matched n-gram text for contaminated items: first, middle and last matched n-gram
    ng_for: dict[int, tuple[str, ...]] = {}
    if len(mi):
        starts = np.flatnonzero(np.r_[True, mi[1:] != mi[:-1]])
        ends = np.r_[starts[1:], len(mi)]
        for a, b in zip(starts.tolist(), ends.tolist()):
            item = int(mi[a])
            if rule_of[item] < 0:
                continue
            toks = enc.token_strings(item)
            picks = list(dict.fromkeys([a, (a + b - 1) // 2, b - 1]))
            ng_for[item] = tuple(" ".join(toks[p:p + n]) for p in mp[picks].tolist())
    out = []
    for i in range(m):
        r = int(rule_of[i])
        docs = docs_for.get(i, [])
        out.append(ItemMatch(
            index=i, task_id=task_ids[i], contaminated=r >= 0, rule=RULES[r] if r >= 0 else None,
            coverage=round(float(coverage[i]), 6), n_tokens=int(lens[i]),
            matched_ngrams=ng_for.get(i, ()), doc_ids=tuple(names[d] for d in docs),
            n_docs=ndocs_for.get(i, 0),
            jaccard=None if math.isnan(jacc_best[i]) else round(float(jacc_best[i]), 4),
            similarity=None if math.isnan(sim_best[i]) else round(float(sim_best[i]), 4),
            n_boilerplate=int(n_boiler[i]), prompt=texts[i],
        ))
    return out


def _semantic(texts: list[str], cfg: _SemanticCfg):
    """Semantic pairs (item, doc, cosine) at or above the threshold, best cosine per item, and
    the calibration hint."""
    from assay.decontam.semantic import calibration, embed

    embedder = cfg["embedder"]
    threshold = cfg["similarity"]
    q = embed(embedder, texts)
    best = np.full(len(texts), -np.inf, dtype=np.float32)
    si, sd, ss = [], [], []
    base = 0
    for c in cfg["corpus_vectors"]():
        if len(c) == 0:
            continue
        sims = q @ c.T
        np.maximum(best, sims.max(axis=1), out=best)
        a, b = np.nonzero(sims >= threshold)
        si.append(a)
        sd.append(b + base)
        ss.append(sims[a, b])
        base += len(c)
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt))
    best = np.where(np.isfinite(best), best, np.nan)
    return cat(si, np.int64), cat(sd, np.int64), cat(ss, float), best, calibration(q)


def corpus_vectors(source: CorpusSource, embedder: Embedder, store: Store | None,
                   checksum: str | None, model: str, batch_size: int = 256
                   ) -> Callable[[], Iterator[np.ndarray]]:
    """A callable yielding corpus embedding batches, cached in the store per (corpus, model)."""
    from assay.decontam.semantic import embed
    from assay.hashing import combine

    def gen():
        ref_name = None
        if store is not None and checksum is not None:
            ref_name = "decontam-embeddings:" + combine("decontam-embeddings", checksum, model)
            ref = store.get_ref(ref_name)
            if ref is not None:
                blob = store.get_bytes(ref["blob"])
                if blob is not None:
                    dim = int(ref["meta"]["dim"])
                    yield np.frombuffer(blob, dtype="<f4").reshape(-1, dim)
                    return
        parts = []
        for _ids, texts in source.batches(batch_size):
            v = embed(embedder, texts)
            parts.append(v)
            yield v
        if ref_name is not None and parts:
            allv = np.concatenate(parts).astype("<f4")
            store.set_ref(ref_name, store.put_bytes(allv.tobytes()),
                          {"dim": int(allv.shape[1]), "model": model})

    return gen


def contamination(eval_rows: RowsLike | Sequence[str], corpus: object = None, *,
                  index: ContaminationIndex | None = None,
                  n: int = 13, fields: Sequence[str] = ("prompt",), min_coverage: float = 0.5,
                  max_df: float | int = 0.01, near_duplicate: float | None = 0.7, shingle: int = 3,
                  num_perm: int = 128, semantic: bool = False,
                  embedder: Embedder | None = None,
                  similarity: float = 0.9, text_field: Fields = "text", id_field: str | None = "id",
                  store: StoreArg = None, reuse: bool = True,
                  max_doc_ids: int = 10) -> Contamination:
    """Which eval items occur in ``corpus`` (see the module docstring for the rules).

    ``eval_rows``: rows with a ``prompt`` (``assay.rows`` contract; a list of strings is taken
    as prompts); one item per task id. ``corpus``: texts, rows with ``text_field``, or paths to
    JSONL/Parquet files; or pass a prebuilt ``index=``. The index is saved in ``store`` (default
    store; ``False`` for none) and reused when the corpus is unchanged.

    Returns a :class:`Contamination`: per-item rows (contaminated, rule, coverage, matched
    n-grams, corpus doc ids), the rate over items with a Wilson interval, the thresholds, and
    ``rescore(rows)`` for pass@1 on the full and the clean subset.

    Example:
        >>> text = "Count the vowels in the word banana and return the count as an integer."
        >>> r = contamination([text], [text], store=False)
        >>> r.items[0].rule, r.n_contaminated, r.rate.interval.method
        ('exact', 1, 'wilson')
    """
    t0 = time.perf_counter()
    if not 0 < float(min_coverage) <= 1:
        raise RowsError(f"min_coverage must be in (0, 1], got {min_coverage!r}")
    if near_duplicate is not None and not 0 < float(near_duplicate) <= 1:
        raise RowsError(f"near_duplicate must be a Jaccard threshold in (0, 1] or None, got "
                        f"{near_duplicate!r}")
    if semantic and not -1 <= float(similarity) <= 1:
        raise RowsError(f"similarity must be a cosine threshold in [-1, 1], got {similarity!r}")
    task_ids, texts = eval_items(eval_rows, fields)
    st = resolve_store(store)
    source = None
    result_ref = None
    if index is None:
        if corpus is None:
            raise RowsTypeError("contamination() needs a corpus (texts, rows or file paths) or "
                                "index=")
        corpus = CorpusSource(corpus, text_field=text_field, id_field=id_field)
        if st is not None and not semantic and corpus.reiterable:
            # The whole answer is a function of (corpus, eval items, parameters): a rerun against
            # an unchanged corpus reads it back instead of loading the index and matching again.
            params = index_params(n=n, text_field=text_field, id_field=id_field, shingle=shingle,
                                  num_perm=num_perm)
            index_ref = index_ref_name(corpus.checksum(st), params)
            result_ref = "decontam-result:" + combine(
                "decontam-result", RESULT_VERSION, index_ref, _items_checksum(task_ids, texts),
                {"min_coverage": float(min_coverage), "max_df": max_df,
                 "near_duplicate": near_duplicate, "max_doc_ids": max_doc_ids})
            if reuse:
                cached = _load_result(st, result_ref, index_ref, task_ids, texts)
                if cached is not None:
                    items, facts, info = cached
                    t_index = time.perf_counter() - t0
                    return _report(items, facts, info, n_items=len(texts),
                                   min_coverage=min_coverage, max_df=max_df,
                                   near_duplicate=near_duplicate, semantic=False,
                                   similarity=similarity, model=None, result_cached=True,
                                   seconds={"index": t_index, "total": t_index})
        index = ContaminationIndex.build(corpus, n=n, text_field=text_field, id_field=id_field,
                                         store=st if st is not None else False, reuse=reuse,
                                         shingle=shingle, num_perm=num_perm)
    elif not isinstance(index, ContaminationIndex):
        raise RowsTypeError(f"index must be a ContaminationIndex, got {type(index).__name__}")
    t_index = time.perf_counter() - t0
    sem_cfg: _SemanticCfg | None = None
    model = None
    if semantic:
        if corpus is None:
            raise RowsError("the semantic rule embeds corpus documents: pass corpus= as well as "
                            "index=")
        from assay.decontam.semantic import MiniLM
        source = corpus if isinstance(corpus, CorpusSource) else CorpusSource(
            corpus, text_field=text_field, id_field=id_field)
        emb = embedder if embedder is not None else MiniLM()
        model = getattr(emb, "name", None) or repr(emb)
        sem_cfg = {"embedder": emb, "similarity": float(similarity),
                   "corpus_vectors": corpus_vectors(source, emb, st if embedder is None else None,
                                                     index.corpus_checksum, model)}
    items, _pairs, facts = match(task_ids, texts, index, min_coverage=min_coverage, max_df=max_df,
                                 near_duplicate=near_duplicate, semantic=sem_cfg,
                                 max_doc_ids=max_doc_ids)
    if st is not None and result_ref is not None and index.ref_name is not None:
        _save_result(st, result_ref, items, facts, index)
    return _report(items, facts, index, n_items=len(texts), min_coverage=min_coverage,
                   max_df=max_df, near_duplicate=near_duplicate, semantic=semantic,
                   similarity=similarity, model=model,
                   seconds={"index": t_index, "total": time.perf_counter() - t0})


RESULT_VERSION = 2


@dataclass(frozen=True)
class _IndexInfo:
    """What a report says about the index behind a cached result (the index itself unloaded)."""

    n: int
    n_docs: int
    params: IndexParams
    corpus_checksum: str | None
    ref_name: str | None
    built: bool = False


# ItemMatch fields saved per item; index, task_id and prompt come from the eval items themselves
_SAVED = ("contaminated", "rule", "coverage", "n_tokens", "matched_ngrams", "doc_ids", "n_docs",
          "jaccard", "similarity", "n_boilerplate")


def _items_checksum(task_ids: list[str], texts: list[str]) -> str:
    """sha256 over the eval items' UTF-8 bytes, framed by their byte lengths."""
    h = hashlib.sha256(b"assay-eval-items-v1")
    for part in (task_ids, texts):
        raw = [utf8_bytes(t) for t in part]
        h.update(np.fromiter(map(len, raw), dtype="<i8", count=len(raw)).tobytes())
        h.update(b"".join(raw))
    return "evals:" + h.hexdigest()[:32]


def _save_result(store: Store, ref_name: str, items: list[ItemMatch], facts: dict[str, object],
                 index: ContaminationIndex) -> None:
    # columns (one list per field) read back several times faster than one dict per item
    doc = {"kind": "assay.decontam.result", "version": RESULT_VERSION, "n_items": len(items),
           "columns": {f: [getattr(i, f) for i in items] for f in _SAVED},
           "facts": {k: facts[k]
                     for k in ("cutoff", "short_items", "empty_items", "boilerplate_ngrams")},
           "index": {"n": index.n, "n_docs": index.n_docs, "params": index.params,
                     "corpus_checksum": index.corpus_checksum, "ref_name": index.ref_name}}
    store.set_ref(ref_name, store.put_json(doc), {"index": index.ref_name})


def _load_result(store: Store, ref_name: str, index_ref: str, task_ids: list[str],
                 texts: list[str]):
    """(items, facts, index info) saved for this exact question, or None. The index it was
    computed from must still be saved under ``index_ref`` (same corpus checksum and params)."""
    ref = store.get_ref(ref_name)
    if ref is None or store.get_ref(index_ref) is None:
        return None
    doc = store.get_json(ref["blob"])
    if (not doc or doc.get("kind") != "assay.decontam.result"
            or doc.get("version") != RESULT_VERSION):
        return None
    if doc["index"]["ref_name"] != index_ref or doc["n_items"] != len(task_ids):
        return None
    c = doc["columns"]
    items = []
    for i, row in enumerate(zip(*(c[f] for f in _SAVED))):
        saved = dict(zip(_SAVED, row))
        saved["matched_ngrams"] = tuple(saved["matched_ngrams"])
        saved["doc_ids"] = tuple(saved["doc_ids"])
        items.append(ItemMatch(i, task_ids[i], prompt=texts[i], **saved))
    return items, doc["facts"], _IndexInfo(**doc["index"])


def _report(items, facts, index, *, n_items, min_coverage, max_df, near_duplicate, semantic,
            similarity, model, seconds, result_cached: bool = False) -> Contamination:
    k = sum(1 for i in items if i.contaminated)
    by_rule = {r: sum(1 for i in items if i.rule == r)
               for r in RULES if r != "semantic" or semantic}
    if near_duplicate is None:
        by_rule.pop("near_duplicate", None)
    rate = Estimate("contamination", k / n_items if n_items else math.nan,
                    wilson_interval(k, n_items), n=n_items, unit="items")
    thresholds: dict[str, object] = {
        "n": index.n, "min_coverage": min_coverage, "max_df": max_df,
        "boilerplate_cutoff_docs": facts["cutoff"], "near_duplicate": near_duplicate,
        "shingle": index.params["shingle"], "num_perm": index.params["num_perm"],
        "near_dup_max_tokens": index.params["near_dup_max_tokens"],
    }
    if semantic:
        thresholds["similarity"] = similarity
        thresholds["embedder"] = model
    warnings = []
    if facts["empty_items"]:
        warnings.append(f"{facts['empty_items']} eval items have no tokens after "
                        "normalization; they cannot match")
    if facts["short_items"]:
        warnings.append(
            f"{facts['short_items']} eval items are shorter than n={index.n} tokens: checked "
            "by exact match "
            "only (a whole corpus document, or one sentence/line of one)"
        )
    if facts["boilerplate_ngrams"]:
        warnings.append(
            f"{facts['boilerplate_ngrams']} eval n-grams occur in more than {facts['cutoff']} "
            "corpus documents "
            "and were ignored as boilerplate (max_df)"
        )
    cal = facts.get("calibration")
    if semantic and cal and similarity <= cal["distinct_item_similarity"]:
        warnings.append(
            f"similarity={similarity} is at or below how alike distinct eval items read "
            f"({cal['distinct_item_similarity']:.3f}); semantic flags include items that only "
            "share a domain"
        )
    if not semantic:
        warnings.append("the text rules catch exact and lightly edited copies, not paraphrases; "
                        "semantic=True adds the embedding rule")
    if n_items == 0:
        warnings.append("no eval items: the rate is undefined")
    corpus = {"checksum": index.corpus_checksum, "docs": index.n_docs,
              "index_reused": not index.built,
              "ref": index.ref_name, "result_cached": result_cached}
    return Contamination(rate=rate, n_items=n_items, n_contaminated=k, by_rule=by_rule,
                         thresholds=thresholds, items=tuple(items), corpus=corpus,
                         calibration=cal, warnings=tuple(warnings), seconds=seconds)
