"""``perplexity:`` of a file or hf_dataset source: documents scored whole by a model, in rolling
windows as lm-eval's ``loglikelihood_rolling`` (word and byte perplexity, bits per byte).

One prompt row per record holds the document in ``prompt``; the score-documents stage
(:mod:`assay.stages.score_documents`) adds its log-likelihood and its word, byte and token
counts as markers, and the ``perplexity`` measurement aggregates them over documents.

Example:
    >>> p = PerplexitySpec.model_validate({"model": {"kind": "hf", "path": "m"}})
    >>> p.field, count_words("one  two\\nthree"), count_bytes("été")
    ('text', 3, 5)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, field_validator

from assay.errors import SpecError
from assay.models.specs import _BackendEntry, backend_spec
from assay.specbase import SpecModel

if TYPE_CHECKING:
    from assay.rows import Rows


class PerplexitySpec(SpecModel):
    """Perplexity of ``model`` on each record's document."""

    model: Annotated[Any, _BackendEntry()]
    field: str = Field("text", description="the record field holding the document")

    @field_validator("model", mode="before")
    @classmethod
    def _backend(cls, v: Any) -> Any:
        from assay.models.loglik import rolling_problem

        spec: Any = backend_spec(v)
        why = rolling_problem(spec.kind)
        if why is not None:
            raise ValueError(f"model kind {spec.kind!r} cannot score perplexity: {why}")
        return spec


def count_words(doc: str) -> int:
    """Words as lm-eval counts them for word perplexity: pieces between whitespace runs."""
    return len(re.split(r"\s+", doc))


def count_bytes(doc: str) -> int:
    """UTF-8 bytes of the document (byte perplexity, bits per byte)."""
    return len(doc.encode("utf-8"))


def document_rows(source: Any, records: Sequence[Mapping[str, Any]], where: str,
                  start: int = 0) -> Rows:
    """One prompt row per record: the document in ``prompt``, the other fields in ``meta``."""
    from assay.builder import rows
    from assay.sources.fieldpath import _MISSING, get_field

    spec: PerplexitySpec = source.perplexity
    fields = source.fields
    if not records:
        raise SpecError(f"{where}: no records")
    docs, tids, metas = [], [], []
    for i, rec in enumerate(records):
        v = get_field(rec, spec.field)
        if v is _MISSING or not isinstance(v, str) or not v:
            raise SpecError(f"{where} record {start + i + 1}: field {spec.field!r} "
                            "(perplexity.field) must be "
                            f"non-empty text, got {'nothing' if v is _MISSING else repr(v)[:40]}; "
                            f"the record has {sorted(rec)}")
        docs.append(v)
        t = str(i) if fields.task_id is None else get_field(rec, fields.task_id)
        if t is _MISSING or t is None:
            raise SpecError(f"{where} record {start + i + 1}: task id field "
                            f"{fields.task_id!r} is missing")
        tids.append(str(t))
        keep = fields.meta
        meta = ({p: get_field(rec, p) for p in keep} if keep is not None else
                {k: x for k, x in rec.items() if k not in (spec.field, fields.task_id)})
        metas.append(meta or None)
    return rows(docs, [""] * len(docs), None, task_ids=tids, meta=metas,
                record_names=lambda i: f"record {start + i + 1}")
