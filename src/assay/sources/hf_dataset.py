"""The ``hf_dataset`` source kind: a benchmark read through the ``datasets`` library.

A local ``save_to_disk`` folder, a folder of Parquet/JSONL files, or a hub id (offline by default).

Records become rows through the same field map as file sources (dotted paths, markers, meta),
with ``prompt_template:`` and ``reference_regex:`` so a GSM8K-style set runs from its raw
records, and ``completions:`` when the model's answers live in their own file. Rows are keyed
on the data's content (a local folder's file digests) or on the hub id and its pinned
``revision``; the report prints the revision and the checksum of the records read.

The dataset's configuration is ``config:`` (``datasets``' ``name``): ``name:`` is the arm's name,
as in every source.

Example:
    >>> s = HFDatasetSource.model_validate({
    ...     "name": "gsm", "kind": "hf_dataset", "path": "openai/gsm8k", "config": "main",
    ...     "split": "test", "fields": {"prompt": "question", "reference": "answer"},
    ...     "reference_regex": "####\\\\s*(.+)$", "completions": {"path": "answers.jsonl"},
    ...     "verifier": {"kind": "numeric"}})
    >>> s.config, s.split, s.allow_download, s.revision
    ('main', 'test', False, None)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from assay.errors import SpecError
from assay.paths import Paths
from assay.sources.records import RecordSourceSpec
from assay.sources.registry import SOURCES

if TYPE_CHECKING:
    from assay.rows import Rows
    from assay.sources.hub import DatasetRecords


@SOURCES.register("hf_dataset")
class HFDatasetSource(RecordSourceSpec):
    """A benchmark through ``datasets``: a save_to_disk folder, Parquet/JSONL files, a hub id."""

    #: imported before the study's nodes run side by side (assay.libguard)
    WARM_IMPORTS: ClassVar[tuple[str, ...]] = ("datasets",)

    kind: Literal["hf_dataset"]
    path: str = Field(description="a hub id (org/name), a folder written by save_to_disk, or a "
                      "folder (or file) of Parquet/JSONL; relative folders resolve from the spec "
                      "file")
    config: str | None = Field(None, description="the dataset's configuration (datasets' "
                               "'name', e.g. 'main' for gsm8k)")
    split: str | None = Field(None, description="the split to read; required when the data has "
                              "more than one, refused when the data does not have it")
    revision: str | None = Field(None, description="a hub id's pinned commit (or tag): without it, "
                                 "results are not reproducible")
    allow_download: bool = Field(False, description="let a hub id download; by default only the "
                                 "local hub cache is read and the network is never touched")
    limit: int | None = Field(None, ge=1, description="read only the first N records of the split")

    def _local(self, paths: Paths) -> Path | None:
        p = paths.resolve(self.path)
        return p if p.exists() else None

    def _where(self, paths: Paths) -> str:
        return f"source {self.name!r} ({self._local(paths) or self.path})"

    def load(self, paths: Paths) -> tuple[DatasetRecords, set[str]]:
        """The split's records (the first ``limit``), with the checksum of what was kept, and
        the task ids of the records the limit cut (their completions are left out)."""
        from dataclasses import replace

        from assay.hashing import content_hash
        from assay.sources.hub import load_dataset_records

        got = load_dataset_records(self._local(paths) or self.path, name=self.config,
                                   split=self.split, revision=self.revision,
                                   allow_download=self.allow_download,
                                   where=self._where(paths))
        cut: set[str] = set()
        if self.limit is not None and self.limit < len(got.records):
            kept = got.records[:self.limit]
            if self.completions is not None:
                cut = set(self.join_ids(got.records[self.limit:], self._where(paths),
                                        start=self.limit))
            got = replace(got, records=kept, checksum=content_hash(kept, "data"))
        return got, cut

    def split_records(self, paths: Paths, split: str) -> list[dict[str, object]]:
        """The records of another split of this dataset (few-shot examples drawn from it)."""
        from assay.sources.hub import load_dataset_records

        return load_dataset_records(self._local(paths) or self.path, name=self.config,
                                    split=split, revision=self.revision,
                                    allow_download=self.allow_download,
                                    where=f"{self._where(paths)} split {split!r}").records

    def read_source_records(self, paths: Paths) -> list[dict[str, object]]:
        return self.load(paths)[0].records

    def rows_from(self, paths: Paths, records: list[dict[str, object]], where: str,
                  skip: frozenset[str] | set[str] = frozenset(), start: int = 0) -> Rows:
        if not skip and self.limit is not None and self.completions is not None:
            skip = self.load(paths)[1]  # validate's path: the limit's cut tasks
        return super().rows_from(paths, records, where, skip, start=start)

    def build_rows(self, paths: Paths) -> Rows:
        return self.build(paths)[0]

    def build(self, paths: Paths) -> tuple[Rows, dict[str, object]]:
        got, cut = self.load(paths)
        rows = self.rows_from(paths, got.records, self._where(paths), cut)
        info: dict[str, object] = {"dataset": self.path, "config": self.config, "split": got.split,
                "revision": self.revision if not got.local else "(local data)",
                "records": len(got.records), "checksum": got.checksum}
        if self.limit is not None:
            info["limit"] = self.limit
        return rows, info

    def identity(self, paths: Paths) -> dict[str, object]:
        from assay.hashing import dir_digest, file_checksum

        out = super().identity(paths)
        out.pop("allow_download")  # where the data may come from, not what it is
        local = self._local(paths)
        if local is not None:
            # the data's content, not where it lies: moving the folder changes nothing
            out["path"] = dir_digest(local) if local.is_dir() else file_checksum(local)
        return out

    def check(self, paths: Paths) -> tuple[list[str], list[str]]:
        problems, warnings = super().check(paths)
        local = self._local(paths)
        if local is None and self.revision is None:
            warnings.append(f"revision: not set for the hub id {self.path!r}: results are then not "
                            "reproducible (the hub copy can change); pin it with revision: "
                            "<commit sha>")
        if problems or not all(f.is_file() for f in self.files(paths)):
            return problems, warnings  # a missing completions file is reported by check_files
        try:
            records = self.read_source_records(paths)
        except SpecError as e:
            msg = str(e)
            key = ("split" if ": split" in msg else
                   "config" if "config" in msg.lower() else "path")
            return [f"{key}: {msg}"], warnings
        return self.check_records(records, paths, self._where(paths)), warnings

    def row_fields(self, paths: Paths) -> set[str] | None:
        return self.row_fields_of(self.read_source_records(paths), paths, self._where(paths))

