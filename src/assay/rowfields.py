"""One field of rows by name: a column, ``markers.<name>``, ``meta.<path>`` or ``privileged.<key>``.

Row steps (``where``) and per-category results (``by:``) read fields through :func:`field_values`.

A bare name that is not a column is looked up in ``meta`` (the source record's own fields), then
in ``markers``, so ``by: subject`` reads ``meta.subject``. A field no row has is an error naming
what the rows do have.

Example:
    >>> import assay
    >>> r = assay.rows(["a", "b"], ["x", "y"], [1, 0],
    ...                meta=[{"subject": "alg", "x": {"level": 2}}, None])
    >>> field_values(r.to_arrow(), "subject"), field_values(r.to_arrow(), "meta.x.level")
    (['alg', None], [2, None])
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from assay.errors import RowsError
from assay.jsontypes import JSONValue

#: Columns whose values are dicts: a field inside them is named ``column.key``.
NESTED = ("markers", "privileged", "meta", "judge_meta")


def _dig(value: object, path: list[str]) -> object:
    for part in path:
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
        if value is None:
            return None
    return value


def _nested(table: pa.Table, column: str) -> list[JSONValue]:
    vals = table.column(column).to_pylist()
    if column == "markers":
        return [dict(m) if m is not None else {} for m in vals]
    return [None if v is None else json.loads(v) for v in vals]


def available_fields(table: pa.Table, limit: int = 1000) -> dict[str, list[str]]:
    """What a field name can refer to in these rows: ``columns``, and the ``meta`` and
    ``markers`` names seen in the first ``limit`` rows."""
    head = table.slice(0, limit)
    out = {"columns": [c for c in table.column_names if c not in NESTED], "meta": [], "markers": []}
    for col in ("meta", "markers"):
        if col in table.column_names:
            names: set[str] = set()
            for v in _nested(head, col):
                if isinstance(v, Mapping):
                    names.update(v)
            out[col] = sorted(names)
    return out


def field_values(table: pa.Table, field: str, *, where: str = "field") -> list[Any]:
    """The value of ``field`` in every row (None where a row lacks it); RowsError when no row
    can have it."""
    if field in table.column_names and field not in NESTED:
        return table.column(field).to_pylist()
    head, _, tail = field.partition(".")
    if head in NESTED and tail and head in table.column_names:
        path = tail.split(".") if head != "markers" else [tail]
        return [_dig(v, path) for v in _nested(table, head)]
    have = available_fields(table)
    for col in ("meta", "markers"):
        if field in have[col] or (col == "meta" and head in have["meta"]):
            return field_values(table, f"{col}.{field}", where=where)
    raise RowsError(
        f"{where} {field!r}: the rows have no such field; they have columns {have['columns']}, "
        f"meta fields {have['meta']} (meta.<name>) and markers {have['markers']} (markers.<name>)")
