"""``perplexity:`` of a file or hf_dataset source: documents scored whole by a model, in rolling
windows as lm-eval's ``loglikelihood_rolling`` (word and byte perplexity, bits per byte).

One prompt row per record holds the document in ``prompt``; the score-documents stage
(:mod:`assay.stages.score_documents`) adds its log-likelihood and its word, byte and token
counts as markers, and the ``perplexity`` measurement aggregates them over documents.

``template`` renders the scored document from the record (Jinja2, with ``regex_replace``), and
``count_field`` names the field whose words and bytes are counted when that is not the scored
text: lm-eval's wikitext scores the detokenized page but counts words and bytes of the raw one.

Example:
    >>> p = PerplexitySpec.model_validate({"model": {"kind": "hf", "path": "m"}})
    >>> p.field, count_words("one  two\\nthree"), count_bytes("été")
    ('text', 3, 5)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Protocol

from pydantic import Field, field_validator

from assay.errors import SpecError
from assay.models.specs import _BackendEntry, backend_spec
from assay.specbase import QuietSpecModel

if TYPE_CHECKING:
    from assay.rows import Rows
    from assay.sources.fieldmap import FieldMap


class RecordSourceSpec(Protocol):
    """What :func:`document_rows` reads of a record source (:class:`assay.sources.records.
    RecordSourceSpec`, which imports this module)."""

    @property
    def name(self) -> str: ...
    @property
    def perplexity(self) -> PerplexitySpec | None: ...
    @property
    def fields(self) -> FieldMap: ...


class PerplexitySpec(QuietSpecModel):
    """Perplexity of ``model`` on each record's document."""

    QUIET: ClassVar[dict[str, object]] = {"template": None, "count_field": None}

    model: Annotated[Any, _BackendEntry()]
    field: str = Field("text", description="the record field holding the document")
    template: str | None = Field(
        None, description="the scored document rendered from the record instead of field "
        "(Jinja2 with regex_replace: lm-eval's wikitext detokenizer)")
    count_field: str | None = Field(
        None, description="the record field whose words and bytes word/byte perplexity and bits "
        "per byte count (default: the scored document; lm-eval's wikitext: page)")

    @field_validator("model", mode="before")
    @classmethod
    def _backend(cls, v: object) -> object:
        from assay.models.loglik import rolling_problem

        spec: Any = backend_spec(v)
        why = rolling_problem(spec.kind)
        if why is not None:
            raise ValueError(f"model kind {spec.kind!r} cannot score perplexity: {why}")
        return spec

    @field_validator("template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is not None:
            from assay.sources.templates import PromptTemplate

            try:
                PromptTemplate(v, "jinja2", "perplexity.template").check()
            except SpecError as e:
                raise ValueError(str(e)) from None
        return v


def count_words(doc: str) -> int:
    """Words as lm-eval counts them for word perplexity: pieces between whitespace runs."""
    return len(re.split(r"\s+", doc))


def count_bytes(doc: str) -> int:
    """UTF-8 bytes of the document (byte perplexity, bits per byte)."""
    return len(doc.encode("utf-8"))


def document_rows(source: RecordSourceSpec, records: Sequence[Mapping[str, object]], where: str,
                  start: int = 0) -> Rows:
    """One prompt row per record: the document in ``prompt``, the other fields in ``meta``."""
    from assay.builder import rows
    from assay.sources.fieldpath import _MISSING, get_field

    spec = source.perplexity
    if spec is None:  # the callers read perplexity-mode sources only
        raise SpecError(f"source {source.name!r} has no perplexity: entry")
    fields = source.fields
    if not records:
        raise SpecError(f"{where}: no records")
    from assay.sources.templates import PromptTemplate

    tmpl = (None if spec.template is None else
            PromptTemplate(spec.template, "jinja2", "perplexity.template"))
    docs, tids, metas, markers = [], [], [], []
    for i, rec in enumerate(records):
        at = f"{where} record {start + i + 1}"
        v = (get_field(rec, spec.field) if tmpl is None else
             tmpl.render(rec, where=at))
        if v is _MISSING or not isinstance(v, str) or not v:
            what = "perplexity.template renders" if tmpl is not None else (
                f"field {spec.field!r} (perplexity.field) must be")
            raise SpecError(f"{at}: {what} "
                            f"non-empty text, got {'nothing' if v is _MISSING else repr(v)[:40]}; "
                            f"the record has {sorted(rec)}")
        docs.append(v)
        if spec.count_field is not None:
            c = get_field(rec, spec.count_field)
            if c is _MISSING or not isinstance(c, str):
                raise SpecError(f"{at}: field {spec.count_field!r} (perplexity.count_field) "
                                f"must be text, got {'nothing' if c is _MISSING else repr(c)[:40]}"
                                f"; the record has {sorted(rec)}")
            markers.append({"words": float(count_words(c)), "bytes": float(count_bytes(c))})
        t = str(i) if fields.task_id is None else get_field(rec, fields.task_id)
        if t is _MISSING or t is None:
            raise SpecError(f"{at}: task id field {fields.task_id!r} is missing")
        tids.append(str(t))
        keep = fields.meta
        scored = {spec.field if tmpl is None else None, fields.task_id}
        meta = ({p: get_field(rec, p) for p in keep} if keep is not None else
                {k: x for k, x in rec.items() if k not in scored})
        metas.append(meta or None)
    return rows(docs, [""] * len(docs), None, task_ids=tids, meta=metas,
                markers=markers or None, record_names=lambda i: f"record {start + i + 1}")
