"""``ast.parse`` for code that runs on several threads: one process-wide lock around it.

CPython 3.11 keeps the AST constructor's recursion counter in interpreter state shared by all
threads, so a thread switch inside ``ast.parse`` (a finalizer run by the garbage collector is
enough) leaves the other parse with ``SystemError: AST constructor recursion depth mismatch``
(cpython gh-106905; seen in CI when two sources built their rows at once under the graph).
Every ``ast.parse`` in assay goes through :func:`parse`; tests/test_pyast.py enforces it.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time.

    >>> parse("x = 1").body[0].targets[0].id
    'x'
    """
    with _LOCK:
        return ast.parse(source, filename=filename)
