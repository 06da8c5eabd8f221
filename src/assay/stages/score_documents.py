"""The score-documents stage: a perplexity source's documents get their log-likelihood under the
model (rolling windows, as lm-eval) and their word, byte and token counts; cached per shard.

Keyed on the shard's document rows and the scorer's identity (the model files' checksum); every
document's answer is journalled, so a killed run resumes and a new checkpoint recomputes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from assay.rows import Rows
from assay.sources.base import PerplexitySource
from assay.stages.cache import ShardRows, StageResult, cached_stage
from assay.stages.declare import RunContext, Shard, Stage, declare
from assay.stages.seams import Computed
from assay.stages.slots import device_of, scoring_model_slots

if TYPE_CHECKING:
    from assay.store import Store

STAGE = "score-documents"  # declared at the end


def score_document_rows(rows: Rows, model: Any, *, store: Store | None = None,
                        on_done: Callable[[int], None] | None = None) -> Rows:
    """Rows with markers ``loglik``, ``tokens``, ``words`` and ``bytes`` per document."""
    from assay.models.loglik import rolling_loglikelihoods, shared_scorer
    from assay.sources.documents import count_bytes, count_words

    table = rows.to_arrow()
    docs = table.column("prompt").to_pylist()
    # counts the source already set (perplexity.count_field) stand; else the scored document's
    given = [dict(m or []) for m in table.column("markers").to_pylist()]
    got = rolling_loglikelihoods(docs, shared_scorer(model), store=store, on_done=on_done)
    markers = [[("loglik", a.logprob), ("tokens", float(a.tokens)),
                ("words", g.get("words", float(count_words(d)))),
                ("bytes", g.get("bytes", float(count_bytes(d))))]
               for a, d, g in zip(got, docs, given)]
    i = table.schema.get_field_index("markers")
    return Rows(table.set_column(i, "markers", pa.array(markers, table.schema.field(i).type)))


def run_score_documents(ctx: RunContext, filtered: StageResult, shard: Shard) -> StageResult:
    """Score the documents rows ``shard.bounds`` of perplexity source ``ctx.source``; cached
    per shard. ``ctx.device_slot`` as in :func:`assay.stages.score_choices.run_score_choices`."""
    from assay.models.loglik import shared_scorer

    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    device_slot = ctx.device_slot
    # the mode table (assay.stages.modes) runs this stage for sources in perplexity mode only
    source = spec.source(source_name)
    assert source.mode == "perplexity", source.mode
    ppl = cast(PerplexitySource, source).perplexity
    part = ShardRows(store, filtered, shard.bounds, shard.checksum)  # read if it computes
    scorer = shared_scorer(ppl.model)

    label = shard.label(source_name)

    def compute() -> Computed:
        from assay.progress import track

        slot = (device_slot(device_of(scorer)) if device_slot is not None
                else contextlib.nullcontext())
        with slot, track(STAGE, label, total=len(part.rows)) as unit:
            out = score_document_rows(part.rows, scorer, store=store, on_done=unit.advance)
        return {"rows": out}, {"rows": len(out)}

    return cached_stage(store, STAGE, inputs=[part.checksum()], params={},
                        fingerprint=scorer.identity(), compute=compute,
                        label=label, progress=ctx.progress)


declare(Stage(STAGE, 1, "shard", run_score_documents, reads=("filter-rows",),
              slots=scoring_model_slots, device=True, asks_model=True))
