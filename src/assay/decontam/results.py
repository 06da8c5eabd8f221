"""Result objects of the decontamination stage: per-item matches, the eval-side report, the filter
report, and the full-versus-clean rescoring.

All are frozen dataclasses with ``to_dict()``, a one-line ``str()`` carrying every estimate with
its interval and n, and ``report()`` with thresholds, examples and warnings.

The contamination rate is over eval *items* (distinct tasks), with a Wilson score interval
(E. B. Wilson, "Probable inference, the law of succession, and statistical inference", JASA 22
(1927) 209-212): it keeps nominal coverage for small n and never collapses to zero width at 0 or
n contaminated items; it is computed by :func:`assay.intervals.wilson_interval`.

Example:
    >>> from assay.intervals import wilson_interval  # the rate's interval: 0 of 50 items
    >>> wilson_interval(0, 50).low, round(wilson_interval(0, 50).high, 4)
    (0.0, 0.0713)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from assay.results import Estimate, Result, line_of, to_plain

if TYPE_CHECKING:
    import pyarrow as pa

    from assay.measure.passk import PassAt
    from assay.rows import RowsLike

RULES = ("exact", "ngram", "near_duplicate", "semantic")


@dataclass(frozen=True)
class ItemMatch:
    """One eval item's verdict.

    ``coverage`` is the fraction of the item's tokens inside n-grams found in the corpus (after
    the boilerplate cutoff), measured against the item: 1.0 for an item quoted whole inside a
    long document. ``rule`` is the first rule that fired, in the order exact, ngram,
    near_duplicate, semantic. ``doc_ids`` are corpus ids behind that rule, strongest first.
    """

    index: int
    task_id: str
    contaminated: bool
    rule: str | None
    coverage: float
    n_tokens: int
    matched_ngrams: tuple[str, ...] = ()
    doc_ids: tuple[str, ...] = ()
    n_docs: int = 0
    jaccard: float | None = None
    similarity: float | None = None
    n_boilerplate: int = 0
    prompt: str = ""

    def to_dict(self) -> dict[str, object]:
        return to_plain({f: getattr(self, f) for f in self.__dataclass_fields__})

    def __str__(self) -> str:
        what = self.rule if self.contaminated else "clean"
        extra = ""
        if self.jaccard is not None:
            extra += f" jaccard={self.jaccard:.2f}"
        if self.similarity is not None:
            extra += f" similarity={self.similarity:.3f}"
        docs = f" docs={list(self.doc_ids[:3])}" if self.doc_ids else ""
        return (f"[{self.index}] {self.task_id}: {what} coverage={self.coverage:.2f} "
                f"({self.n_tokens} tokens){extra}{docs}")


def _report_text(result: Contamination | Decontamination, body: list[str]) -> str:
    """A decontam report: the one-line summary, the thresholds, ``body``, then the warnings."""
    thresholds = "thresholds: " + ", ".join(f"{k}={v}" for k, v in result.thresholds.items())
    return "\n".join([line_of(result), thresholds, *body,
                      *(f"warning: {w}" for w in result.warnings)])


@dataclass(frozen=True)
class Contamination(Result):
    """Which eval items occur in the corpus, with the rate over items and its interval."""

    rate: Estimate
    n_items: int
    n_contaminated: int
    by_rule: dict[str, int]
    thresholds: dict[str, object]
    items: tuple[ItemMatch, ...]
    corpus: dict[str, object]
    calibration: dict[str, float] | None = None
    warnings: tuple[str, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)

    _headline_field = "rate"

    def __str__(self) -> str:
        rules = ", ".join(f"{r} {self.by_rule.get(r, 0)}" for r in RULES if r in self.by_rule)
        return f"{self.rate}; {self.n_contaminated} of {self.n_items} items contaminated ({rules})"

    # -- views ---------------------------------------------------------------------------------
    @property
    def contaminated(self) -> tuple[ItemMatch, ...]:
        """The contaminated items."""
        return tuple(i for i in self.items if i.contaminated)

    def contaminated_task_ids(self) -> list[str]:
        """Task ids of the contaminated items, in eval order."""
        return [i.task_id for i in self.items if i.contaminated]

    def clean_task_ids(self) -> list[str]:
        """Task ids of the clean items, in eval order."""
        return [i.task_id for i in self.items if not i.contaminated]

    def records(self) -> list[dict[str, object]]:
        """One dict per eval item (the per-item table at the API edge)."""
        return [i.to_dict() for i in self.items]

    def to_arrow(self) -> pa.Table:
        """The per-item table as Arrow."""
        import pyarrow as pa

        return pa.Table.from_pylist(self.records())

    def clean(self, rows: RowsLike) -> RowsLike:
        """``rows`` without the rows of contaminated tasks (same type as given: Rows, Arrow table,
        or a list of dict rows)."""
        from assay.rows import as_table, take_rows

        bad = set(self.contaminated_task_ids())
        table = as_table(rows, require=("prompt",), argument="rows")
        keep = [i for i, t in enumerate(table.column("task_id").to_pylist()) if t not in bad]
        return take_rows(rows, table, keep)

    def rescore(self, rows: RowsLike, *, k: int | None = None) -> CleanSplit:
        """pass@1 (and pass@k) on every task and on the clean tasks only, side by side, through
        ``assay.measure.pass_at``; ``rows`` are the graded eval rows (task ids as in the report).

        Example (needs graded rows with rewards): ``print(report.rescore(graded_rows))``.
        """
        return rescore(rows, self.contaminated_task_ids(), k=k)

    def report(self, examples: int = 5) -> str:
        t, c = self.thresholds, self.corpus
        lines = [f"corpus: {c.get('docs')} documents, checksum {c.get('checksum')}, index "
                 f"{'reused from the store' if c.get('index_reused') else 'built'}"]
        if self.calibration:
            cal = self.calibration
            lines.append(
                "semantic calibration: distinct eval items read up to "
                f"{cal['distinct_item_similarity']:.3f} alike ({cal['percentile']:g}th percentile "
                f"over {cal['pairs']} pairs); the threshold "
                f"similarity={t.get('similarity')} should sit above it"
            )
        shown = [i for i in self.items if i.contaminated][:examples]
        if shown:
            lines.append(f"examples ({len(shown)} of {self.n_contaminated}):")
            for it in shown:
                lines.append(f"  {it}")
                if it.matched_ngrams:
                    lines.append(f"    matched: {it.matched_ngrams[0]!r}")
                lines.append(f"    prompt: {it.prompt[:100]!r}")
        return _report_text(self, lines)


@dataclass(frozen=True)
class Decontamination(Result):
    """What ``decontaminate`` dropped from the training rows, and why."""

    n_rows: int
    n_dropped: int
    dropped: tuple[Mapping[str, object], ...]
    by_rule: dict[str, int]
    thresholds: dict[str, object]
    eval_items: int
    contaminated_eval_items: int
    mode: str
    warnings: tuple[str, ...] = ()

    def _headline(self) -> Estimate:
        """The rows dropped, out of the rows given."""
        return Estimate("rows dropped", float(self.n_dropped), None, self.n_rows, "rows")

    def __str__(self) -> str:
        rules = ", ".join(f"{r} {self.by_rule.get(r, 0)}" for r in RULES if r in self.by_rule)
        verb = "dropped" if self.mode == "drop" else "flagged"
        return (f"decontaminate: {verb} {self.n_dropped} of {self.n_rows} training rows ({rules}); "
                f"{self.contaminated_eval_items} of {self.eval_items} eval items found in them")

    def __getitem__(self, key: str) -> Any:  # dict-style access, as the seed's report is a dict
        return self.to_dict()[key]

    def report(self, examples: int = 5) -> str:
        return _report_text(self, [
            f"  row {d['index']}: {d['rule']} (eval item {d['eval_task_id']}, "
            f"score {d['score']:.2f})"
            for d in self.dropped[:examples]])


@dataclass(frozen=True)
class CleanSplit(Result):
    """pass@k on all tasks next to the clean subset (contaminated tasks removed)."""

    full: PassAt
    clean: PassAt
    n_removed: int
    method: str

    def _headline(self) -> Estimate:
        """pass@1 on the clean subset (contaminated tasks removed)."""
        return self.clean.estimate

    def __str__(self) -> str:
        return (f"full: {self.full} | clean: {self.clean} | {self.n_removed} contaminated tasks "
                "removed")


def rescore(rows: RowsLike, contaminated_task_ids: Sequence[str], *,
            k: int | None = None) -> CleanSplit:
    """``assay.measure.pass_at`` of ``rows`` on all tasks and without ``contaminated_task_ids``."""
    from assay.measure.passk import pass_at  # lazy: the measurement stage is a separate module
    from assay.rows import as_table, take_rows

    bad = set(contaminated_task_ids)
    table = as_table(rows, require=("prompt",), argument="rows")
    tids = table.column("task_id").to_pylist()
    keep = [i for i, t in enumerate(tids) if t not in bad]
    removed = len({t for t in tids if t in bad})
    full = pass_at(rows, k=k)
    clean = pass_at(take_rows(rows, table, keep), k=k)
    return CleanSplit(full=full, clean=clean, n_removed=removed, method="assay.measure.pass_at")
