"""The ``file`` source kind: prompts and completions you already have, as JSONL or Parquet,
or prompts alone with ``generate:`` (the generate stage then asks the model under test).

Relative paths resolve from the spec file's folder; the file's content hash (not its path) keys rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from assay.models.entry import GenerateSpec
from assay.sources.base import SourceSpec
from assay.sources.records import FieldMap, read_records, rows_from_records
from assay.sources.registry import SOURCES

if TYPE_CHECKING:
    from assay.rows import Rows
    from assay.spec import StudySpec


class FileSource(SourceSpec):
    """Prompts and completions you already have, as JSONL or Parquet."""

    kind: Literal["file"]
    path: str = Field(description="JSONL or Parquet file; relative paths resolve from the spec file")
    format: Literal["jsonl", "parquet"] | None = Field(None, description="default: from the suffix")
    fields: FieldMap = Field(default_factory=FieldMap)
    generate: GenerateSpec | None = Field(
        None, description="sample completions from a model (then records need only prompts)")

    @model_validator(mode="after")
    def _needs_scores(self) -> FileSource:
        if self.generate is not None:
            if self.verifier is None or self.fields.reward is not None:
                raise ValueError("generate: completions made here need a verifier to grade them "
                                 "(fields.reward cannot hold scores of completions not yet made)")
        elif self.verifier is None and self.fields.reward is None:
            raise ValueError(
                "give a verifier to grade the completions, or fields.reward naming the field "
                "that already holds each completion's score"
            )
        suffix = Path(self.path).suffix.lower()
        if self.format is None and suffix not in (".jsonl", ".parquet"):
            raise ValueError(f"path {self.path!r}: cannot tell the format from the suffix; "
                             "set format: jsonl or format: parquet")
        return self

    def build_rows(self, study: StudySpec) -> Rows:
        path = study.resolve(self.path)
        fmt = self.format or path.suffix.lower().lstrip(".")
        return rows_from_records(read_records(path, fmt), self.fields,
                                 where=f"source {self.name!r} ({path})",
                                 prompts_only=self.generate is not None)

    def identity(self, study: StudySpec) -> dict[str, Any]:
        from assay.hashing import file_checksum

        return {**super().identity(study), "path": file_checksum(study.resolve(self.path))}

    def files(self, study: StudySpec) -> list[Path]:
        return [study.resolve(self.path)]


SOURCES.register("file", spec=FileSource)(FileSource)
