"""JSON types: what assay's documents hold (records, identities, run.json, report.json, facts).

A value that is JSON and is walked is a ``JSONValue``; a document is a ``JSONObject``; a value
only passed through or written out is ``object`` (``Mapping[str, object]`` for a document read).
"""

from __future__ import annotations

from typing import TypeAlias

#: A JSON leaf as :mod:`json` reads it.
JSONScalar: TypeAlias = str | int | float | bool | None
#: Any JSON value: a leaf, a list of values or an object of values (recursive).
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
#: A JSON object (one document, one record).
JSONObject: TypeAlias = dict[str, JSONValue]

__all__ = ["JSONObject", "JSONScalar", "JSONValue"]
