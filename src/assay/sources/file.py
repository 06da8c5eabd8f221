"""The ``file`` source kind: prompts and completions you already have, as JSONL or Parquet,
or prompts alone with ``generate:`` (the generate stage then asks the model under test).

Relative paths resolve from the spec file's folder; the file's content hash (not its path) keys
rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from assay.paths import Paths
from assay.sources.records import RecordSourceSpec, read_records
from assay.sources.registry import SOURCES

if TYPE_CHECKING:
    from assay.rows import Rows


@SOURCES.register("file")
class FileSource(RecordSourceSpec):
    """Prompts and completions you already have, as JSONL or Parquet."""

    kind: Literal["file"]
    path: str = Field(description="JSONL or Parquet file; relative paths resolve from the spec "
                      "file")
    format: Literal["jsonl", "parquet"] | None = Field(None, description="default: from the suffix")

    @model_validator(mode="after")
    def _format(self) -> FileSource:
        suffix = Path(self.path).suffix.lower()
        if self.format is None and suffix not in (".jsonl", ".parquet"):
            raise ValueError(f"path {self.path!r}: cannot tell the format from the suffix; "
                             "set format: jsonl or format: parquet")
        return self

    def _where(self, paths: Paths) -> str:
        return f"source {self.name!r} ({paths.resolve(self.path)})"

    def read_source_records(self, paths: Paths) -> list[dict[str, Any]]:
        path = paths.resolve(self.path)
        return read_records(path, self.format or path.suffix.lower().lstrip("."))

    def build_rows(self, paths: Paths) -> Rows:
        return self.rows_from(paths, self.read_source_records(paths), self._where(paths))

    def identity(self, paths: Paths) -> dict[str, Any]:
        from assay.hashing import file_checksum

        return {**super().identity(paths), "path": file_checksum(paths.resolve(self.path))}

    def files(self, paths: Paths) -> list[Path]:
        return [paths.resolve(self.path), *super().files(paths)]

    def check(self, paths: Paths) -> tuple[list[str], list[str]]:
        from assay.errors import SpecError

        problems, warnings = super().check(paths)
        if problems or not all(f.is_file() for f in self.files(paths)):
            return problems, warnings  # a missing file is reported by check_files
        try:
            records = self.read_source_records(paths)
        except SpecError as e:
            return [f"path: {e}"], warnings
        return self.check_records(records, paths, self._where(paths)), warnings

    def row_fields(self, paths: Paths) -> set[str] | None:
        return self.row_fields_of(self.read_source_records(paths), paths, self._where(paths))

