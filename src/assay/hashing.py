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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from assay.errors import HashError, SpecError
from assay.jsontypes import JSONValue

HASH_SCHEMA = 1
DIGEST_HEX = 32  # 128 bits: collision-safe for any dataset size we will see, still readable


def _nfc(s: str) -> str:
    # is_normalized is a fast C check; most text is already NFC.
    return s if unicodedata.is_normalized("NFC", s) else unicodedata.normalize("NFC", s)


def canonicalize(obj: object, _path: str = "$") -> JSONValue:
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
        out: dict[str, JSONValue] = {}
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


def canonical_json(obj: object) -> bytes:
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


def digest_parts(parts: Iterable[bytes], prefix: str) -> str:
    """:func:`digest_bytes` of the concatenated ``parts``, hashed as they come: the same id,
    without holding the whole serialization in memory at once.

    Example:
        >>> digest_parts([b"ab", b"c"], "x") == digest_bytes(b"abc", "x")
        True
    """
    if not prefix or ":" in prefix:
        raise HashError(f"id prefix must be a non-empty word without ':', got {prefix!r}")
    h = hashlib.sha256()
    h.update(f"assay-hash-v{HASH_SCHEMA}\x00{prefix}\x00".encode())
    for part in parts:
        h.update(part)
    return f"{prefix}:{h.hexdigest()[:DIGEST_HEX]}"


def content_hash(obj: object, prefix: str) -> str:
    """Stable id ``prefix:<32 hex>`` of a JSON-like value.

    Example:
        >>> content_hash([1, 2], "x") == content_hash((1, 2), "x")
        True
        >>> content_hash([1, 2], "x") == content_hash([2, 1], "x")
        False
    """
    return digest_bytes(canonical_json(obj), prefix)


def combine(prefix: str, *parts: object) -> str:
    """Id of an ordered tuple of parts (ids, parameters): the cache-key chain uses this.

    Example:
        >>> combine("stage", "rows:ab", {"k": 1}) == combine("stage", "rows:ab", {"k": 1})
        True
    """
    return content_hash(list(parts), prefix)


# ------------------------------------------------------------------------------- files and code
# One identity rule for what a study reads besides its spec: a file is its bytes, a folder the
# bytes of its non-hidden files by relative name, user code its module's source file plus the
# helper modules that file imports from its own folder or the spec's (or a declared version).

#: (resolved path, size, mtime_ns) -> sha256 hex: each file is read once per process.
_SHA256: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 hex of a file's bytes, memoized on (path, size, mtime) for this process.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile(delete=False) as f:
        ...     _ = f.write(b"abc")
        >>> file_sha256(f.name)[:12]
        'ba7816bf8f01'
    """
    p = Path(path)
    st = p.stat()
    memo = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _SHA256:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _SHA256[memo] = h.hexdigest()
    return _SHA256[memo]


def file_checksum(path: str | os.PathLike[str]) -> str:
    """``file:<hex>`` of a file's bytes (memoized on path, size and mtime), or SpecError."""
    try:
        return f"file:{file_sha256(path)[:32]}"
    except FileNotFoundError:
        raise SpecError(f"file not found: {Path(path)} (relative paths resolve from the spec's "
                        "directory)") from None


def dir_digest(path: str | os.PathLike[str]) -> dict[str, str]:
    """``{relative file name: sha256}`` of every non-hidden file under a folder (a model's
    weights, tokenizer and templates, a saved dataset), whatever their names.

    Example:
        >>> import pathlib, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "w.bin").write_bytes(b"abc"); _ = (d / ".cache").write_bytes(b"x")
        >>> {k: v[:6] for k, v in dir_digest(d).items()}
        {'w.bin': 'ba7816'}
    """
    root = Path(path)
    out = {}
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if f.is_file() and not any(part.startswith(".") for part in rel.parts):
            out[rel.as_posix()] = file_sha256(f)
    return out


def code_checksum(module: str) -> str:
    """Checksum of a module's source file: a stage whose behaviour lives in code we do not
    version by hand (a verifier, the seeded policy) recomputes when that code changes."""
    import importlib

    path = importlib.import_module(module).__file__
    if path is None:
        raise SpecError(f"module {module!r} has no source file to checksum")
    return file_checksum(path)


def _not_user_code(path: Path) -> bool:
    """Installed packages, the standard library and assay itself: versioned by their install
    (and assay's stages by their own versions), not hashed as a user's helper."""
    import sys
    import sysconfig

    parts = set(path.parts)
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assay_pkg = Path(__file__).resolve().parent
    return (path.is_relative_to(stdlib) or path.is_relative_to(assay_pkg)
            or path.is_relative_to(Path(sys.base_prefix).resolve()))


def _module_files(root: Path, dotted: str) -> list[Path]:
    """Files ``import dotted`` (and its parent packages) would load from ``root``."""
    parts = [p for p in dotted.split(".") if p]
    out = []
    for i in range(1, len(parts) + 1):
        for cand in (root.joinpath(*parts[:i - 1], parts[i - 1] + ".py"),
                     root.joinpath(*parts[:i], "__init__.py")):
            if cand.is_file():
                out.append(cand)
    return out


def _imported_files(path: Path, roots: list[Path]) -> list[Path]:
    """Source files under ``roots`` (or beside ``path``, for relative imports) that ``path``
    imports, read with ``ast`` (an import inside a function counts too)."""
    import ast

    from assay import pyast

    try:
        tree = pyast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []
    found: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                for root in roots:
                    found += _module_files(root, alias.name)
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module}.{a.name}" if node.module else a.name for a in node.names]
            if node.level:
                base = path.parent.joinpath(*[".."] * (node.level - 1)).resolve()
                found += [f for n in names for f in _module_files(base, n)]
            else:
                found += [f for root in roots for n in names for f in _module_files(root, n)]
    return found


def helper_files(path: str | os.PathLike[str],
                 roots: list[str | os.PathLike[str]]) -> dict[str, str]:
    """``{name relative to its root: file checksum}`` of the modules a user's code file imports
    from ``roots`` (its own folder, the spec's folder), transitively; installed packages, the
    standard library and assay are not followed.

    Example:
        >>> import pathlib, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "grade.py").write_text("import json\\nfrom helpers import SLACK\\n")
        >>> _ = (d / "helpers.py").write_text("SLACK = 1\\n")
        >>> list(helper_files(d / "grade.py", [d]))
        ['helpers.py']
    """
    bases = [Path(r).resolve() for r in roots]
    out: dict[str, str] = {}
    for f in _helper_paths(Path(path).resolve(), bases):
        base = next((b for b in bases if f.is_relative_to(b)), None)
        out[f.relative_to(base).as_posix() if base is not None else f.name] = file_checksum(f)
    return dict(sorted(out.items()))


def _helper_paths(entry: Path, bases: list[Path]) -> list[Path]:
    seen: set[Path] = {entry}
    todo = [entry]
    found: list[Path] = []
    while todo:
        for f in _imported_files(todo.pop(), bases):
            f = f.resolve()
            if f in seen or _not_user_code(f):
                continue
            seen.add(f)
            todo.append(f)
            found.append(f)
    return found


def _code_file(module: str) -> Path | None:
    import sys

    path = getattr(sys.modules.get(module), "__file__", None)
    return Path(path) if isinstance(path, str) and path.endswith(".py") else None


def _code_roots(module: str, path: Path,
                base_dir: str | os.PathLike[str] | None) -> list[str | os.PathLike[str]]:
    """Where a user module's absolute imports of its own helpers resolve: its folder, the
    spec's folder, and for ``pkg.mod`` the folder holding ``pkg``."""
    roots: list[str | os.PathLike[str]] = [path.parent]
    if base_dir is not None:
        roots.append(base_dir)
    depth = module.count(".")
    if depth and path.name != "__init__.py":
        roots.append(path.parents[depth])
    return roots


def user_code_files(module: str, base_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """An imported module's source file, then the helper files it imports (see
    :func:`helper_files`), each resolved; ``[]`` when the module has no ``.py`` file.

    Example:
        >>> [p.name for p in user_code_files("assay.hashing")]
        ['hashing.py']
    """
    path = _code_file(module)
    if path is None or not path.is_file():
        return []
    roots = [Path(r).resolve() for r in _code_roots(module, path, base_dir)]
    return [path.resolve(), *_helper_paths(path.resolve(), roots)]


def code_identity(obj: Any, *, version: str | None = None,
                  base_dir: str | os.PathLike[str] | None = None,
                  what: str = "function") -> dict[str, object]:
    """What keys results computed by user code ``obj`` (a function or class): ``{"version"}``
    when one is declared; else ``{"code"}``, the checksum of its module's source file, with
    ``"helpers"`` (see :func:`helper_files`) when that file imports modules from its own folder
    or the spec's folder ``base_dir``; a function without a module file (a notebook cell) is
    keyed on its own source. No source at all: a SpecError asking for ``version``.

    Example:
        >>> import json
        >>> code_identity(json.dumps, version="2")
        {'version': '2'}
        >>> sorted(code_identity(content_hash))
        ['code']
    """
    import inspect

    if version is not None:
        return {"version": version}
    module = getattr(obj, "__module__", None) or ""
    path = _code_file(module)
    if path is not None and path.is_file():
        out: dict[str, object] = {"code": file_checksum(path)}
        helpers = helper_files(path, _code_roots(module, path, base_dir))
        if helpers:
            out["helpers"] = helpers
        return out
    try:
        src = inspect.getsource(obj)
    except (OSError, TypeError):
        raise SpecError(f"{what} {getattr(obj, '__qualname__', obj)!r}: its source is not "
                        "available to fingerprint it; declare version: and change it whenever "
                        "its behaviour changes") from None
    return {"source": digest_bytes(src.encode("utf-8", "surrogatepass"), "src")}
