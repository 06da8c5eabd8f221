"""Reading JSON Lines files: one object per line, errors naming the file and line.

Shared by the diagnostic-set loader and the study spec's file sources.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any


def iter_jsonl(path: str | os.PathLike[str], *, error: type[Exception] = ValueError,
               where: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line; ``error`` names ``where:line``.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = p.write_text('{"x": 1}\\n\\n{"x": 2}\\n')
        >>> [(n, o["x"]) for n, o in iter_jsonl(p)]
        [(1, 1), (3, 2)]
    """
    where = where or str(path)
    with open(path, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise error(f"{where}:{no}: not valid JSON ({e.msg}); one object per line") from None
            if not isinstance(obj, dict):
                raise error(f"{where}:{no}: each line must be a JSON object, got {type(obj).__name__}")
            yield no, obj
