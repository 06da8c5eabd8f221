"""Reading JSON Lines files: one object per line, errors naming the file and line.

Shared by the diagnostic-set loader and the study spec's file sources.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

#: A file's bad lines listed in one error, at most.
MAX_BAD_LINES = 20


def iter_jsonl(path: str | os.PathLike[str], *, error: type[Exception] = ValueError,
               where: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line (lines count from 1); bad lines
    raise ``error`` naming ``where:line`` for each of them (up to :data:`MAX_BAD_LINES`), after
    the good lines before the first bad one were yielded.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = p.write_text('{"x": 1}\\n\\n{"x": 2}\\n')
        >>> [(n, o["x"]) for n, o in iter_jsonl(p)]
        [(1, 1), (3, 2)]
    """
    where = where or str(path)
    bad: list[str] = []
    # utf-8-sig: a BOM (Windows editors, Excel exports) is read past, not refused as JSON
    with open(path, encoding="utf-8-sig") as fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                bad.append(f"{where}:{no}: not valid JSON at column {e.colno}: {e.msg}; one object "
                           "per line")
            else:
                if isinstance(obj, dict):
                    if not bad:
                        yield no, obj
                    continue
                bad.append(f"{where}:{no}: each line must be a JSON object, got "
                           f"{type(obj).__name__}")
            if len(bad) == MAX_BAD_LINES:
                break
    if bad:  # every bad line (up to MAX_BAD_LINES) in one error, one per line
        more = f"\n(stopped after {MAX_BAD_LINES} bad lines)" if len(bad) == MAX_BAD_LINES else ""
        raise error("\n".join(bad) + more)
