"""assay's own top-level ``flows`` and ``tasks`` packages bound by location, so a user's
``tasks.py`` or ``flows/`` (beside their spec, or in the working directory) never replaces them.

A spec's folder goes first on ``sys.path`` (a grader next to the spec imports without
PYTHONPATH), and ``python -m`` or Prefect put the working directory there too; a lookup of
``tasks`` by name could then find the user's file. Binding ours by path first avoids that: their
submodules resolve inside our folders, never through ``sys.path``. (A user module named ``tasks``
or ``flows`` is still shadowed by ours inside an assay run: name it otherwise to import it.)

Example:
    >>> bind_own_packages()
    >>> import sys
    >>> sorted(n for n in ("flows", "tasks") if n in sys.modules) == sorted(own_packages())
    True
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["bind_own_packages", "own_packages"]

_NAMES = ("flows", "tasks")


def own_packages() -> dict[str, Path]:
    """``{name: __init__.py}`` of the orchestration packages installed beside ``assay``."""
    root = Path(__file__).resolve().parent.parent
    return {n: root / n / "__init__.py" for n in _NAMES if (root / n / "__init__.py").is_file()}


def bind_own_packages() -> None:
    """Import ``flows`` and ``tasks`` from beside ``assay`` (not by a ``sys.path`` search);
    another module already bound to one of those names is unbound first (it keeps working
    through the references its importer holds)."""
    for name, init in own_packages().items():
        mod = sys.modules.get(name)
        where = getattr(mod, "__file__", None)
        if mod is not None and where and Path(where).resolve() == init:
            continue
        for k in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[k]
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
