"""The ``file`` source kind: prompts and completions you already have, as JSONL or Parquet,
or prompts alone with ``generate:`` (the generate stage then asks the model under test).

Relative paths resolve from the spec file's folder; the file's content hash (not its path) keys
rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from assay.errors import SpecError
from assay.paths import Paths
from assay.sources.records import RecordSourceSpec, read_records, record_batches
from assay.sources.registry import SOURCES

if TYPE_CHECKING:
    from assay.rows import ParquetRows, Rows


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

    def read_source_records(self, paths: Paths) -> list[dict[str, object]]:
        path = paths.resolve(self.path)
        return read_records(path, self.format or path.suffix.lower().lstrip("."))

    def _batches(self, paths: Paths, size: int | None = None) -> Iterator[list[dict[str, object]]]:
        path = paths.resolve(self.path)
        fmt = self.format or path.suffix.lower().lstrip(".")
        return record_batches(path, fmt) if size is None else record_batches(path, fmt, size)

    def build_rows(self, paths: Paths) -> Rows:
        where = self._where(paths)
        if self.builds_in_batches():  # a batch of records at a time: memory bounded (issue 50)
            try:
                rows = self.rows_in_batches(self._batches(paths), where)
                assert rows is not None
                return rows
            except SpecError:
                pass  # bad data: the whole build below says it exactly as it always did
        return self.rows_from(paths, self.read_source_records(paths), where)

    def build_stored(self, paths: Paths) -> tuple[Rows | ParquetRows, dict[str, object]]:
        if self.builds_in_batches():  # written as built: never every row at once (issue 50)
            try:
                return self.parquet_in_batches(self._batches(paths), self._where(paths)), {}
            except SpecError:
                pass  # bad data: the whole build says it exactly as it always did
        return self.build(paths)

    def identity(self, paths: Paths) -> dict[str, object]:
        from assay.hashing import file_checksum

        return {**super().identity(paths), "path": file_checksum(paths.resolve(self.path))}

    def files(self, paths: Paths) -> list[Path]:
        return [paths.resolve(self.path), *super().files(paths)]

    def check(self, paths: Paths) -> tuple[list[str], list[str]]:
        problems, warnings = super().check(paths)
        if problems or not all(f.is_file() for f in self.files(paths)):
            return problems, warnings  # a missing file is reported by check_files
        if self.builds_in_batches() and self._checks_in_batches(paths):
            return [], warnings
        try:
            records = self.read_source_records(paths)
        except SpecError as e:
            return [f"path: {e}"], warnings
        return self.check_records(records, paths, self._where(paths)), warnings

    def _checks_in_batches(self, paths: Paths) -> bool:
        """Whether the records pass :meth:`check_records`, found without holding them all (the
        check before every run reads the whole file): the first record's field checks, then
        every batch built and dropped. False: a problem, which the whole check then words
        exactly as it always did (and lists every bad record)."""
        where = self._where(paths)
        try:
            first: list[dict[str, object]] = next(self._batches(paths, 1), [])
            if not first or self.check_records(first, paths, where):
                return False
            self.rows_in_batches(self._batches(paths), where, keep=False)
        except SpecError:
            return False
        return True

    def row_fields(self, paths: Paths) -> set[str] | None:
        # row_fields_of reads 50 records unless completions are joined to every record
        records = (next(self._batches(paths, 50), []) if self.completions is None
                   else self.read_source_records(paths))
        return self.row_fields_of(records, paths, self._where(paths))

