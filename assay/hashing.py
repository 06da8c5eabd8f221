"""Canonical content hashing: one function turns any JSON-like value into a stable id.

Used by rows, data views, specs and caches, so the same content always gets the same id.

Canonical form (schema ``HASH_SCHEMA``):
- JSON with sorted keys, compact separators, UTF-8 (``ensure_ascii=False``).
- Every string (values and keys) is Unicode NFC-normalized, so composed and decomposed
  spellings of the same text hash the same.
- NaN and +/-inf are rejected with an error naming the path of the bad value.
- numpy scalars become Python numbers; numpy arrays become (nested) lists.
- Tuples and lists both encode as JSON arrays and hash the same (documented choice: content,
  not container type, is what is hashed). Sets, bytes and other objects are rejected.
- Integral floats stay floats (``1.0`` and ``1`` hash differently, as JSON keeps them apart);
  bools are not numbers (``True`` != ``1``).
- The schema version and the id's prefix are inside the hashed bytes, so a change of the
  canonical form or a reuse of a digest under another prefix can never collide.

Example:
    >>> from assay.hashing import content_hash
    >>> content_hash({"b": 1, "a": [1, 2]}, "spec") == content_hash({"a": (1, 2), "b": 1}, "spec")
    True
    >>> content_hash("x", "ds")[:3]
    'ds:'
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.errors import HashError, SpecError

HASH_SCHEMA = 1
DIGEST_HEX = 32  # 128 bits: collision-safe for any dataset size we will see, still readable


def _nfc(s: str) -> str:
    # is_normalized is a fast C check; most text is already NFC.
    return s if unicodedata.is_normalized("NFC", s) else unicodedata.normalize("NFC", s)


def canonicalize(obj: Any, _path: str = "$") -> Any:
    """Return a plain-JSON equivalent of ``obj`` in canonical form, or raise HashError.

    Example:
        >>> canonicalize({"x": (1, 2.5)})
        {'x': [1, 2.5]}
    """
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return _nfc(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise HashError(
                f"cannot hash {obj!r} at {_path}: NaN and infinities have no canonical form; "
                "replace it with None or a finite number"
            )
        return float(obj)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise HashError(
                    f"cannot hash mapping key {k!r} at {_path}: keys must be strings; "
                    "convert the key with str() yourself so the choice is explicit"
                )
            nk = _nfc(k)
            if nk in out:
                raise HashError(f"two keys at {_path} are the same text after NFC: {k!r}")
            out[nk] = canonicalize(v, f"{_path}.{k}")
        return out
    if isinstance(obj, (list, tuple)):
        return [canonicalize(v, f"{_path}[{i}]") for i, v in enumerate(obj)]
    mod = type(obj).__module__
    if mod == "numpy":
        import numpy as np

        if isinstance(obj, np.ndarray):
            return canonicalize(obj.tolist(), _path)
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, np.integer):
            return int(obj)
        if isinstance(obj, np.floating):
            return canonicalize(float(obj), _path)
        if isinstance(obj, np.str_):
            return _nfc(str(obj))
    if hasattr(obj, "__assay_content__"):
        return canonicalize(obj.__assay_content__(), _path)
    raise HashError(
        f"cannot hash a value of type {type(obj).__name__} at {_path}: supported are None, bool, "
        "int, finite float, str, lists/tuples, string-keyed mappings and numpy scalars/arrays"
    )


def canonical_json(obj: Any) -> bytes:
    """The canonical UTF-8 JSON bytes of ``obj`` (see module docstring).

    Example:
        >>> canonical_json({"b": 1, "a": "é"})
        b'{"a":"\\xc3\\xa9","b":1}'
    """
    return json.dumps(
        canonicalize(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")


def digest_bytes(data: bytes, prefix: str) -> str:
    """``prefix:hex`` id of raw bytes, with schema version and prefix mixed in."""
    if not prefix or ":" in prefix:
        raise HashError(f"id prefix must be a non-empty word without ':', got {prefix!r}")
    h = hashlib.sha256()
    h.update(f"assay-hash-v{HASH_SCHEMA}\x00{prefix}\x00".encode())
    h.update(data)
    return f"{prefix}:{h.hexdigest()[:DIGEST_HEX]}"


def content_hash(obj: Any, prefix: str) -> str:
    """Stable id ``prefix:<32 hex>`` of a JSON-like value.

    Example:
        >>> content_hash([1, 2], "x") == content_hash((1, 2), "x")
        True
        >>> content_hash([1, 2], "x") == content_hash([2, 1], "x")
        False
    """
    return digest_bytes(canonical_json(obj), prefix)


def combine(prefix: str, *parts: Any) -> str:
    """Id of an ordered tuple of parts (ids, parameters): the cache-key chain uses this.

    Example:
        >>> combine("stage", "rows:ab", {"k": 1}) == combine("stage", "rows:ab", {"k": 1})
        True
    """
    return content_hash(list(parts), prefix)


_FILE_HASH_CACHE: dict[tuple[str, int, int], str] = {}


def file_checksum(path: str | os.PathLike[str]) -> str:
    """``file:<hex>`` of a file's bytes (memoized on path, size and mtime), or SpecError."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SpecError(f"file not found: {p} (relative paths resolve from the spec's directory)") from None
    memo = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if memo in _FILE_HASH_CACHE:
        return _FILE_HASH_CACHE[memo]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    out = f"file:{h.hexdigest()[:32]}"
    _FILE_HASH_CACHE[memo] = out
    return out


def code_checksum(module: str) -> str:
    """Checksum of a module's source file: a stage whose behaviour lives in code we do not
    version by hand (a verifier, the seeded policy) recomputes when that code changes."""
    import importlib

    return file_checksum(importlib.import_module(module).__file__)
