"""No import cycles inside assay: every import (module level, in functions, lazy) points one way.

The graph is read from the source with ``ast``, so an import inside a function counts exactly
like one at the top of a module: it still ties the two modules together.

How edges are counted (the rules the fixes in assay follow):

* ``import assay.a.b`` / ``from assay.a import b`` (``b`` a submodule) -> an edge to ``assay.a.b``.
  The parent packages ``assay`` and ``assay.a`` are not edges: Python initialises them before the
  child anyway, and counting them would make every package ``__init__`` that imports its own
  submodules a "cycle".
* ``from assay.a import name`` (``name`` not a submodule) -> an edge to ``assay.a`` itself: a
  re-export read through a package ``__init__`` depends on that ``__init__``. A module inside
  ``assay.a`` should import ``name`` from the module that defines it instead.
* A package ``__init__`` that re-exports lazily (PEP 562: a ``_LAZY`` dict of name -> module, a
  ``_SUBMODULES`` set of submodule names) has an edge to each of those modules: the import is
  deferred, not absent.
* ``importlib.import_module("assay.x")`` with a literal name -> an edge to ``assay.x``.
* Imports under ``if TYPE_CHECKING:`` are edges too: a type-only cycle is still a knot in the
  design (spec kinds take the narrow ``assay.paths.Paths`` context, not the ``StudySpec`` that
  composes them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "src" / "assay"


def module_name(path: Path, root: Path = ROOT) -> str:
    """``assay/decontam/results.py`` -> ``assay.decontam.results``; ``__init__.py`` -> the
    package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_relative(current: str, is_package: bool, level: int, module: str | None) -> str:
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def import_edges(path: Path, modules: set[str], root: Path = ROOT) -> dict[str, int]:
    """The assay modules that ``path`` imports, each with the line of its first import."""
    current = module_name(path, root)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target in modules and target != current:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = (_resolve_relative(current, is_package, node.level, node.module)
                    if node.level else node.module or "")
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                # a submodule is an edge to itself; any other name is read from the package
                add(sub if sub in modules else base, node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            add(node.args[0].value, node.lineno)
        elif is_package and isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if "_LAZY" in names and isinstance(node.value, ast.Dict):
                for value in node.value.values:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        add(value.value, node.lineno)
            if "_SUBMODULES" in names and isinstance(node.value, ast.Set | ast.List | ast.Tuple):
                for elt in node.value.elts:
                    if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                        add(f"{current}.{elt.value}", node.lineno)
    return found


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported assay module: line} for every module under ``root``."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): import_edges(p, modules, root) for p in paths}


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), each as one cycle
    through it, so the failure names a concrete path to untangle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_one_cycle(graph, comp) for comp in components]


def _one_cycle(graph: dict[str, dict[str, int]], comp: list[str]) -> list[str]:
    """A shortest cycle through the first module of a strongly connected component (BFS)."""
    members = set(comp)
    start = comp[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {comp}")  # pragma: no cover


def describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    return (" -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
            + f" -> {cycle[-1]}")


def test_assay_has_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50 and "assay.grading" in graph  # the walk really saw the package
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in assay:\n" + "\n".join(describe(graph, c) for c in cycles)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "assay"


@pytest.mark.parametrize("files, expected", [
    # an import inside a function is an edge like any other
    ({"assay/__init__.py": "", "assay/a.py": "import assay.b\n",
      "assay/b.py": "def f():\n    from assay.a import x\n"}, [["assay.a", "assay.b", "assay.a"]]),
    # relative imports resolve; a three-module cycle is reported through every member
    ({"assay/__init__.py": "", "assay/p/__init__.py": "", "assay/p/a.py": "from . import b\n",
      "assay/p/b.py": "from .c import y\n", "assay/p/c.py": "from ..p.a import z\n"},
     [["assay.p.a", "assay.p.b", "assay.p.c", "assay.p.a"]]),
    # a submodule reading a re-export from its package __init__ that imports it: a cycle
    ({"assay/__init__.py": "", "assay/p/__init__.py": "from assay.p.a import x\n",
      "assay/p/a.py": "x = 1\n", "assay/p/b.py": "from assay.p import x\n",
      "assay/q.py": "import assay.p.b\n"}, []),
    ({"assay/__init__.py": "", "assay/p/__init__.py": "from assay.p.a import x\n",
      "assay/p/a.py": "def f():\n    from assay.p import y\n"},
     [["assay.p", "assay.p.a", "assay.p"]]),
    # lazy re-exports are edges; importing the defining module is not a cycle
    ({"assay/__init__.py": "_LAZY = {'Thing': 'assay.t'}\n",
      "assay/t.py": "from assay import other\n", "assay/other.py": ""}, []),
    ({"assay/__init__.py": "_LAZY = {'Thing': 'assay.t'}\n",
      "assay/t.py": "from assay import Thing2\n"},
     [["assay", "assay.t", "assay"]]),
    ({"assay/__init__.py": "_SUBMODULES = {'t'}\n",
      "assay/t.py": "import importlib\nm = importlib.import_module('assay')\n"},
     [["assay", "assay.t", "assay"]]),
    # imports that only type checkers read are edges too, as is the else branch of the test
    ({"assay/__init__.py": "", "assay/a.py": "import assay.b\n",
      "assay/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from assay.a import A\n"},
     [["assay.a", "assay.b", "assay.a"]]),
    ({"assay/__init__.py": "", "assay/a.py": "import assay.b\n",
      "assay/b.py": "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n"
                    "    import assay.a\n"},
     [["assay.a", "assay.b", "assay.a"]]),
    # a parent package is not an edge: the package importing its own submodules is fine
    ({"assay/__init__.py": "from assay.p import a\n",
      "assay/p/__init__.py": "from assay.p.a import x\n",
      "assay/p/a.py": "import assay.q\n", "assay/q.py": ""}, []),
])
def test_cycle_finder_on_known_graphs(tmp_path, files, expected):
    graph = import_graph(_write(tmp_path, files))
    assert find_cycles(graph) == expected
