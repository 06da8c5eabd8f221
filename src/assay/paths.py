"""What a spec kind may know of the study it belongs to: the spec's folder, and how a path
written in the spec resolves from it (kinds never see the whole ``StudySpec``).

Example:
    >>> SpecPaths("/data/study").resolve("pairs.jsonl").as_posix()
    '/data/study/pairs.jsonl'
    >>> SpecPaths(None).resolve("pairs.jsonl").as_posix()
    'pairs.jsonl'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["PREFECT_DIR", "STORE_DIR", "Paths", "SpecPaths", "find_upward", "user_cache_dir"]

#: A project's own store: the folder ``assay run`` finds by walking up from the spec's folder.
STORE_DIR = ".assay"

#: The embedded Prefect home kept beside a project's store.
PREFECT_DIR = ".prefect"


class Paths(Protocol):
    """The paths context a kind's methods take (``StudySpec.paths``; a ``StudySpec`` fits too)."""

    @property
    def base_dir(self) -> str | None: ...

    def resolve(self, path: str) -> Path: ...


@dataclass(frozen=True)
class SpecPaths:
    """A spec's folder (None: the working directory) and the rule for its relative paths."""

    base_dir: str | None = None

    def resolve(self, path: str) -> Path:
        """``path`` with ``~`` expanded, made absolute against the spec's folder if relative."""
        p = Path(os.path.expanduser(path))
        if not p.is_absolute() and self.base_dir:
            p = Path(self.base_dir) / p
        return p


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """This user's assay cache folder: ``$ASSAY_CACHE_DIR``, else ``$XDG_CACHE_HOME/assay``,
    else ``~/.cache/assay`` (the folder that already keeps the Prefect template database).

    Example:
        >>> user_cache_dir({"XDG_CACHE_HOME": "/c"}).as_posix()
        '/c/assay'
        >>> user_cache_dir({"ASSAY_CACHE_DIR": "/a", "XDG_CACHE_HOME": "/c"}).as_posix()
        '/a'
    """
    env = os.environ if environ is None else environ
    if env.get("ASSAY_CACHE_DIR"):
        return Path(os.path.expanduser(env["ASSAY_CACHE_DIR"])).resolve()
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).resolve() / "assay"


def find_upward(start: str | os.PathLike[str], name: str = STORE_DIR) -> Path | None:
    """The nearest folder called ``name`` in ``start`` or a folder above it (as git finds
    ``.git``); None when there is none up to the filesystem's root.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / ".assay").mkdir(); (root / "a" / "b").mkdir(parents=True)
        >>> find_upward(root / "a" / "b") == root.resolve() / ".assay"
        True
    """
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        if (folder / name).is_dir():
            return folder / name
    return None
