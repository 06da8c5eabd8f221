"""The ``file`` source kind: prompts and completions you already have, as JSONL or Parquet,
or prompts alone with ``generate:`` (the generate stage then asks the model under test).

Relative paths resolve from the spec file's folder; the file's content hash (not its path) keys rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from assay.sources.records import RecordSourceSpec, read_records
from assay.sources.registry import SOURCES

if TYPE_CHECKING:
    from assay.rows import Rows
    from assay.spec import StudySpec


class FileSource(RecordSourceSpec):
    """Prompts and completions you already have, as JSONL or Parquet."""

    kind: Literal["file"]
    path: str = Field(description="JSONL or Parquet file; relative paths resolve from the spec file")
    format: Literal["jsonl", "parquet"] | None = Field(None, description="default: from the suffix")

    @model_validator(mode="after")
    def _format(self) -> FileSource:
        suffix = Path(self.path).suffix.lower()
        if self.format is None and suffix not in (".jsonl", ".parquet"):
            raise ValueError(f"path {self.path!r}: cannot tell the format from the suffix; "
                             "set format: jsonl or format: parquet")
        return self

    def _where(self, study: StudySpec) -> str:
        return f"source {self.name!r} ({study.resolve(self.path)})"

    def read_source_records(self, study: StudySpec) -> list[dict[str, Any]]:
        path = study.resolve(self.path)
        return read_records(path, self.format or path.suffix.lower().lstrip("."))

    def build_rows(self, study: StudySpec) -> Rows:
        return self.rows_from(study, self.read_source_records(study), self._where(study))

    def identity(self, study: StudySpec) -> dict[str, Any]:
        from assay.hashing import file_checksum

        return {**super().identity(study), "path": file_checksum(study.resolve(self.path))}

    def files(self, study: StudySpec) -> list[Path]:
        return [study.resolve(self.path), *super().files(study)]

    def check(self, study: StudySpec) -> tuple[list[str], list[str]]:
        from assay.errors import SpecError

        problems, warnings = super().check(study)
        if problems or not all(f.is_file() for f in self.files(study)):
            return problems, warnings  # a missing file is reported by check_files
        try:
            records = self.read_source_records(study)
        except SpecError as e:
            return [f"path: {e}"], warnings
        return self.check_records(records, study, self._where(study)), warnings

    def row_fields(self, study: StudySpec) -> set[str] | None:
        return self.row_fields_of(self.read_source_records(study), study, self._where(study))


SOURCES.register("file", spec=FileSource)(FileSource)
