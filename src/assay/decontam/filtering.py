"""The train-side filter: drop (or flag) training rows that hold an evaluation item.

``decontaminate(rows, against)`` keeps the seed's surface, ``(kept_rows, report)``, and uses the
eval-side matching core with the training rows as the corpus, so both directions apply the same
rules and thresholds.

A training row is dropped when, for some eval item: the row is the item (``exact``; for items
shorter than n tokens also a sentence/line of the row), or the item's n-grams found in *this row*
cover at least ``min_overlap`` of the item (``ngram``, measured against the eval item, so a long
row that quotes an eval question is caught), or the row is a MinHash near-duplicate of the item
(``near_duplicate``), or, with ``semantic=True``, their embeddings are at least ``similarity``
alike.

Example:
    >>> train = [{"prompt": "Where is order 4473?"}, {"prompt": "Cancel order 9911."}]
    >>> kept, report = decontaminate(train, against=[{"prompt": "Cancel order 9911."}])
    >>> len(kept), report.n_dropped, report.dropped[0]["rule"]
    (1, 1, 'exact')
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from assay.decontam.corpus import CorpusSource
from assay.decontam.evalside import corpus_vectors, eval_items, match
from assay.decontam.index import ContaminationIndex, StoreArg, resolve_store
from assay.decontam.results import RULES, Decontamination
from assay.errors import RowsError, RowsTypeError
from assay.rows import RowsLike, take_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from assay.decontam.evalside import _SemanticCfg
    from assay.decontam.semantic import Embedder

MODES = ("drop", "flag")


class _Dropped(TypedDict):
    """One dropped (or flagged) training row: its position, the rule, the eval item, the score."""

    index: int
    rule: str
    eval_task_id: str
    score: float


def _eval_sources(against: object) -> list[object]:
    """One or more eval sources: rows, a path to JSONL rows, or a list of those."""
    if isinstance(against, (str, os.PathLike)):
        return [against]
    if isinstance(against, (list, tuple)) and against and all(
        isinstance(a, (list, tuple, str, os.PathLike)) or hasattr(a, "num_rows")
        or hasattr(a, "iloc")
        for a in against
    ) and not all(isinstance(a, str) for a in against):
        return list(against)
    return [against]


def _load_eval(source: object) -> Any:
    if isinstance(source, (str, os.PathLike)):
        import json

        out = []
        # utf-8-sig, as every other data reader: a BOM from a Windows editor or an Excel export
        # is read past instead of failing the first line as invalid JSON
        with open(source, encoding="utf-8-sig") as fh:
            for lineno, line in enumerate(fh):
                if line.strip():
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise RowsError(f"against file {str(source)!r} line {lineno + 1}: "
                                        f"invalid JSON ({e.msg})") from None
        return out
    return source


def decontaminate(rows: RowsLike, against: object, *, n: int = 13,
                  fields: Sequence[str] = ("prompt",),
                  min_overlap: float = 0.5, mode: str = "drop", max_df: float | int = 0.01,
                  near_duplicate: float | None = 0.7, shingle: int = 3, semantic: bool = False,
                  embedder: Embedder | None = None, similarity: float = 0.9,
                  store: StoreArg = False) -> tuple[RowsLike, Decontamination]:
    """Drop (``mode="drop"``) or flag (``mode="flag"``: every row kept, ``markers["contaminated"]``
    set to 1.0 or 0.0) the training ``rows`` that hold an item of ``against``.

    ``rows``: training rows (list of dicts, ``assay.Rows``, Arrow table or DataFrame) whose
    ``fields`` (joined with newlines) are checked. ``against``: eval rows with a ``prompt``, a
    JSONL path of them, or a list of such sources. ``min_overlap``: the fraction of an eval
    item's tokens one training row must cover with shared n-grams. Other thresholds as in
    :func:`assay.decontam.contamination`. ``store``: where to keep the training-side index
    (default ``False``: in memory, as training rows change from run to run).

    Returns ``(rows_out, Decontamination)``; rows come back in the type they came in.
    """
    if mode not in MODES:
        raise RowsError(f"mode must be one of {MODES}, got {mode!r}")
    if isinstance(fields, str):
        fields = (fields,)
    if not fields:
        raise RowsError("fields: name at least one text field of the training rows, e.g. "
                        "('prompt',)")
    if not 0 < float(min_overlap) <= 1:
        raise RowsError(f"min_overlap must be in (0, 1], got {min_overlap!r}")
    if isinstance(rows, (str, bytes)) or isinstance(rows, dict):
        raise RowsTypeError("rows: expected training rows (a list of dicts, Rows, Arrow table "
                            f"or DataFrame), got {type(rows).__name__}")
    task_ids: list[str] = []
    texts: list[str] = []
    for src in _eval_sources(against):
        t, x = eval_items(_load_eval(src))
        task_ids.extend(t)
        texts.extend(x)
    source = CorpusSource(rows if not isinstance(rows, (list, tuple)) else list(rows),
                          text_field=tuple(fields), id_field=None, name="rows")
    if source.paths is not None or source.iterator is not None:
        raise RowsTypeError("rows: decontaminate filters in-memory training rows; for files use "
                            "contamination()")
    st = resolve_store(store)
    index = ContaminationIndex.build(source, n=n, text_field=tuple(fields), id_field=None,
                                     store=st if st is not None else False, shingle=shingle)
    sem: _SemanticCfg | None = None
    if semantic:
        from assay.decontam.semantic import MiniLM

        emb = embedder if embedder is not None else MiniLM()
        sem = {"embedder": emb, "similarity": float(similarity),
               "corpus_vectors": corpus_vectors(source, emb, None, None, "")}
    items, pairs, facts = match(task_ids, texts, index, min_coverage=min_overlap, max_df=max_df,
                                near_duplicate=near_duplicate, semantic=sem)
    strong = (pairs.rule != 1) | (pairs.score >= min_overlap)
    it, dc, ru, sc = pairs.item[strong], pairs.doc[strong], pairs.rule[strong], pairs.score[strong]
    # one reason per training row: the first rule (exact, ngram, ...), then the highest score
    order = np.lexsort((-sc, ru, dc))
    it, dc, ru, sc = it[order], dc[order], ru[order], sc[order]
    first = np.r_[True, dc[1:] != dc[:-1]] if len(dc) else np.zeros(0, dtype=bool)
    dropped: list[_Dropped] = [
        {"index": int(d), "rule": RULES[int(r)], "eval_task_id": task_ids[int(i)],
         "score": round(float(s), 4)}
        for d, r, i, s in zip(dc[first], ru[first], it[first], sc[first])
    ]
    bad = {d["index"] for d in dropped}
    by_rule = {r: sum(1 for d in dropped if d["rule"] == r)
               for r in RULES if r != "semantic" or semantic}
    n_rows = index.n_docs
    if mode == "drop":
        out = take_rows(rows, _rows_table(rows), [i for i in range(n_rows) if i not in bad])
    else:
        out = _flag_rows(rows, bad)
    warnings = []
    if facts["short_items"]:
        warnings.append(f"{facts['short_items']} eval items are shorter than n={n} tokens: "
                        "matched exactly only")
    if not semantic:
        warnings.append("paraphrases of eval items are not caught by the text rules; "
                        "semantic=True adds the embedding rule")
    report = Decontamination(
        n_rows=n_rows, n_dropped=len(bad), dropped=tuple(dropped), by_rule=by_rule,
        thresholds={"n": n, "min_overlap": min_overlap, "max_df": max_df,
                    "boilerplate_cutoff_docs": facts["cutoff"], "near_duplicate": near_duplicate,
                    "shingle": shingle, **({"similarity": similarity} if semantic else {})},
        eval_items=len(texts), contaminated_eval_items=sum(1 for i in items if i.contaminated),
        mode=mode, warnings=tuple(warnings),
    )
    return out, report


def _rows_table(rows: RowsLike) -> pa.Table | None:
    from assay.rows import Rows

    return rows.table if isinstance(rows, Rows) else None


def _flag_rows(rows: RowsLike, bad: set[int]) -> RowsLike:
    """Every row, with ``markers["contaminated"]`` 1.0 (dropped by a rule) or 0.0."""
    import pyarrow as pa

    from assay.rows import Rows, as_table

    if isinstance(rows, (Rows, pa.Table)) or hasattr(rows, "iloc"):
        recs = Rows(as_table(rows, require=("prompt",))) if not isinstance(rows, Rows) else rows
        out = []
        for i, r in enumerate(recs):
            r = dict(r)
            r["markers"] = {**(r.get("markers") or {}), "contaminated": 1.0 if i in bad else 0.0}
            out.append(r)
        t = as_table(out, require=("prompt",))
        return Rows(t) if isinstance(rows, Rows) else t
    out = []
    for i, r in enumerate(rows):
        r = dict(r)
        r["markers"] = {**(r.get("markers") or {}), "contaminated": 1.0 if i in bad else 0.0}
        out.append(r)
    return out
