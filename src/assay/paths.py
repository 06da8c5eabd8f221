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
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["Paths", "SpecPaths"]


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
