"""Dotted ``PATH=VALUE`` overrides of a spec document, applied before validation (``--set``).

A scheduler passes tonight's checkpoint (``--model``, ``--revision``, ``--set``), spec unedited.

``PATH`` is dotted with ``[i]`` list indexes; ``sources.NAME`` picks a source by name; a path
that starts with ``generate.`` applies to every source that generates (the model under test).
``VALUE`` is read as YAML (``4`` an int, ``[a, b]`` a list, ``null``), so it is typed as the
spec file would type it. Missing mappings on the way are created; validation then names any
misspelled field as usual.

Example:
    >>> doc = {"sources": [{"name": "a", "generate": {"model": {"kind": "openai", "model": "c1"}}},
    ...                    {"name": "b"}]}
    >>> out = apply_overrides(doc, ["generate.model.model=c2", "sources.b.steps=[]"])
    >>> out["sources"][0]["generate"]["model"]["model"], out["sources"][1]["steps"]
    ('c2', [])
    >>> out = apply_overrides(doc, checkpoint_overrides("/ckpts/step-9", None))
    >>> out["sources"][0]["generate"]["model"]["model"]
    '/ckpts/step-9'
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

import yaml

from assay.errors import SpecError

#: The pseudo field ``--model`` sets: the served name (openai) or the directory / hub id (hf).
CHECKPOINT = "@checkpoint"
_CHECKPOINT_FIELD = {"openai": "model", "hf": "path"}
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def checkpoint_overrides(model: str | None, revision: str | None) -> list[str]:
    """The overrides of ``--model`` and ``--revision``: every generating source's checkpoint
    (``model`` of an openai entry, ``path`` of an hf entry) and its ``revision``."""
    out = []
    if model is not None:
        out.append(f"generate.model.{CHECKPOINT}={model}")
    if revision is not None:
        out.append(f"generate.model.revision={revision}")
    return out


def _split(path: str, item: str) -> list[str | int]:
    parts: list[str | int] = []
    pos = 0
    for m in _PART.finditer(path):
        if m.start() != pos and path[pos:m.start()] != ".":
            raise SpecError(f"{item}: cannot read the path {path!r} (dotted names and [i])")
        parts.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    if not parts or pos != len(path):
        raise SpecError(f"{item}: cannot read the path {path!r} (dotted names and [i])")
    return parts


def _put(node: object, parts: list[str | int], value: object, item: str, where: str) -> None:
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                raise SpecError(f"{item}: {where} has no item [{part}]")
            if last:
                node[part] = value
                return
            node = node[part]
            where += f"[{part}]"
            continue
        if not isinstance(node, dict):
            raise SpecError(f"{item}: {where} is not a mapping, so it has no field {part!r}")
        if part == CHECKPOINT:
            kind = node.get("kind")
            if kind not in _CHECKPOINT_FIELD:
                raise SpecError(f"{item}: {where} is a {kind!r} backend, which has no checkpoint "
                                "name to set; use --set with its own field")
            part = _CHECKPOINT_FIELD[kind]
        if last:
            node[part] = value
            return
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        where = f"{where}.{part}" if where else part


def apply_overrides(doc: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of spec document ``doc`` with each ``PATH=VALUE`` applied in order."""
    out = copy.deepcopy(doc)
    for entry in overrides:
        path, eq, raw = entry.partition("=")
        # errors name the flag the user typed
        item = f"--model {raw!r}" if CHECKPOINT in path else f"--set {entry!r}"
        if not eq or not path.strip():
            raise SpecError(f"{item}: give PATH=VALUE, e.g. "
                            "generate.model.base_url=http://h:8000/v1")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError as e:
            raise SpecError(f"{item}: the value is not valid YAML ({e})") from None
        if isinstance(value, dt.date):  # a night date stays the text it was (baseline=2026-12-01)
            value = raw.strip()
        parts = _split(path.strip(), item)
        raw_sources = out.get("sources")
        sources: list[object] = raw_sources if isinstance(raw_sources, list) else []
        if parts[0] == "generate":
            targets = [s for s in sources
                       if isinstance(s, dict) and isinstance(s.get("generate"), dict)]
            if not targets:
                raise SpecError(f"{item}: no source of this spec has a generate: section")
            for s in targets:
                _put(s, parts, value, item, f"sources.{s.get('name')}")
            continue
        if parts[0] == "sources" and len(parts) > 1 and isinstance(parts[1], str):
            named = [s for s in sources if isinstance(s, dict) and s.get("name") == parts[1]]
            if not named:
                raise SpecError(f"{item}: no source named {parts[1]!r}; sources are "
                                f"{[s.get('name') for s in sources if isinstance(s, dict)]}")
            if len(parts) == 2:
                raise SpecError(f"{item}: name a field of source {parts[1]!r}")
            _put(named[0], parts[2:], value, item, f"sources.{parts[1]}")
            continue
        _put(out, parts, value, item, "")
    return out
