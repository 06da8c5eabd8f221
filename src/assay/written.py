"""What a folder of outputs already holds: a manifest of the checksums written into it, so an
output that is already the same file is not written again (a cached rerun rewrites nothing).

A manifest maps each output to the identity of what it was made from (content checksums, the
writer's version) and the sha256 of the bytes written. An output is kept only when both match:
its identity is unchanged and the file on disk still has those bytes; a missing or edited file,
or one made from other results, is written again. The manifest itself is written last.

Example:
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> m = Manifest.load(d)
    >>> m.kept("a.txt", ["rows:1"])
    False
    >>> m.write(d, "a.txt", b"hello", ["rows:1"])
    >>> m.save(d)
    >>> Manifest.load(d).kept("a.txt", ["rows:1"]), Manifest.load(d).kept("a.txt", ["rows:2"])
    (True, False)
    >>> (d / "a.txt").write_bytes(b"edited") and Manifest.load(d).kept("a.txt", ["rows:1"])
    False
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from assay.store_files import atomic_write

#: The manifest's file name in the folder it describes (hidden: not an output itself).
MANIFEST = ".written.json"

#: Bumped when what an identity covers changes: every output is then written once again.
VERSION = 1


def sha256_file(path: Path) -> str | None:
    """sha256 hex of a file's bytes, None when it is not a file. Read every time (no memo on
    mtime): an edit inside the clock's resolution must still be seen."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return h.hexdigest()


class Manifest:
    """The outputs of one folder: ``{relative name: {"identity": ..., "sha256": ...}}`` plus
    ``facts``, small derived values stored under the identity they were derived from."""

    def __init__(self, folder: Path, doc: dict[str, Any]) -> None:
        self.folder = folder
        self.files: dict[str, dict[str, object]] = dict(doc.get("files") or {})
        self.facts: dict[str, object] = dict(doc.get("facts") or {})
        self._read = json.dumps(self._doc(), sort_keys=True)

    @classmethod
    def load(cls, folder: Path) -> Manifest:
        """The folder's manifest; an empty one when it has none (or one of another version,
        or one that does not parse: then every output is written again)."""
        try:
            doc = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = {}
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            doc = {}
        return cls(folder, doc)

    def kept(self, name: str, identity: object) -> bool:
        """Whether ``name`` is already the output of ``identity``: recorded under that identity
        and the file still has the bytes recorded."""
        entry = self.files.get(name)
        if not entry or entry.get("identity") != _plain(identity):
            return False
        return sha256_file(self.folder / name) == entry.get("sha256")

    def write(self, folder: Path, name: str, data: bytes, identity: object) -> None:
        """Write ``name`` atomically unless it already holds ``data``; record it either way."""
        sha = hashlib.sha256(data).hexdigest()
        if sha256_file(folder / name) != sha:
            atomic_write(folder / name, data)
        self.files[name] = {"identity": _plain(identity), "sha256": sha}

    def fact(self, name: str, identity: object) -> Any | None:
        """A stored fact derived from ``identity``, or None when it was derived from another."""
        entry = self.facts.get(name)
        if isinstance(entry, dict) and entry.get("identity") == _plain(identity):
            return entry.get("value")
        return None

    def set_fact(self, name: str, identity: object, value: object) -> None:
        self.facts[name] = {"identity": _plain(identity), "value": value}

    def save(self, folder: Path) -> None:
        """Write the manifest when it changed (after the outputs it describes)."""
        doc = self._doc()
        if json.dumps(doc, sort_keys=True) != self._read or not (folder / MANIFEST).is_file():
            atomic_write(folder / MANIFEST,
                         (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
            self._read = json.dumps(doc, sort_keys=True)

    def _doc(self) -> dict[str, object]:
        return {"version": VERSION, "files": self.files, "facts": self.facts}


def _plain(identity: object) -> str:
    """The identity (any JSON value: lists of checksums, versions) as a sha256 of its JSON: a
    manifest of a 1,500-shard source stays small, and tuples compare equal to lists."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
