"""Fields of source records: dotted paths into nested records, and reading JSONL/Parquet files.

Below :mod:`assay.sources.records` and :mod:`assay.sources.choices`, which both read records.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.errors import SpecError
from assay.jsonl import iter_jsonl

_MISSING = object()


def get_field(record: Mapping[str, object], path: str) -> Any:
    """The value at ``path`` in a record (``a.b`` walks nested dicts, ``a.0`` a list), or the
    module's ``_MISSING`` sentinel. A key spelled with the dot itself wins.

    Example:
        >>> get_field({"a": {"b": [1, {"c": 2}]}}, "a.b.1.c"), get_field({"a.b": 1}, "a.b")
        (2, 1)
    """
    if path in record:
        return record[path]
    value: object = record
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def has_field(record: Mapping[str, object], path: str) -> bool:
    """Whether ``path`` exists in the record (its value may be None)."""
    return get_field(record, path) is not _MISSING


def field_problem(record: Mapping[str, object], path: str) -> str | None:
    """Why ``path`` is not in the record (naming what is there), or None when it is."""
    if has_field(record, path):
        return None
    value: object = record
    walked = []
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
            walked.append(part)
            continue
        at = ".".join(walked) or "the record"
        have = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        return f"{path!r} is not a field: {at} has {have}"
    return f"{path!r} is not a field"


def read_records(path: str | Path, fmt: str) -> list[dict[str, object]]:
    """Every record of a JSONL or Parquet file; a bad line is a SpecError naming file and line."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return [rec for _, rec in iter_jsonl(path, error=SpecError)]
