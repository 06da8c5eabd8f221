"""The runner's policy reads what stages declare, never their names: no stage name is compared
against in the stage modules or the tasks, and a plugin stage gets a role by declaring it."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from pathlib import Path

from assay.progress import UnitState
from assay.spec import parse_spec
from assay.stages import STAGE_VERSIONS, STAGES, Stage, declare
from assay.stages.graph import Node
from assay.stages.plan import Preloader, _while_loading
from assay.stages.wiring import in_order

ROOT = Path(__file__).resolve().parents[2]

#: The declarations themselves: each mode's stages are listed by name in the modes table.
DECLARATIONS = {"src/assay/stages/modes.py"}


def _named(node: ast.AST, names: set[str]) -> set[str]:
    """The stage names ``node`` is (a string constant) or lists (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and node.value in names:
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
    return set()


def name_checks(text: str, names: set[str]) -> list[str]:
    """Where ``text`` (a module's source) uses a stage's name as control flow: compared with a
    stage or a run's results (``r.stage == "generate"``, ``"report" in run.results``), looked
    up in a run's results (``run.results["report"]``), or a table keyed by stage names (a
    dict whose keys all are: not a document that has a ``"report"`` field)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for i, side in enumerate(sides):
                hit = _named(side, names)
                others = " ".join(ast.unparse(s) for j, s in enumerate(sides) if j != i)
                if hit and ("stage" in others or "results" in others):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and "results" in ast.unparse(node.value) \
                and _named(node.slice, names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Dict) and node.keys and all(
                k is not None and _named(k, names) for k in node.keys):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_the_checker_finds_the_name_checks_it_is_for() -> None:
    names = {"generate", "report"}
    code = ('a = [r for r in run.results if r.stage == "generate"]\n'
            'b = state.stage != "generate"\n'
            'c = "report" not in run.results\n'
            'd = run.results["report"]\n'
            'e = {"generate": f}\n'
            'f = stage.name in ("report", "x")\n'
            'g = s.mode == "generate"\n'  # a mode, not a stage: allowed
            'h = {"kind": "x", "report": text}\n'  # a document's field: allowed
            'declare(Stage("report", 1, "study", f, reads=("generate",)))\n')
    assert sorted(int(f.split(":")[0]) for f in name_checks(code, names)) == [1, 2, 3, 4, 5, 6]


def test_no_stage_name_is_control_flow_outside_the_declarations() -> None:
    names = set(STAGES)
    files = sorted((ROOT / "src/assay/stages").glob("*.py")) + sorted(
        (ROOT / "tasks").glob("*.py"))
    found = {str(p.relative_to(ROOT)): name_checks(p.read_text(), names) for p in files
             if str(p.relative_to(ROOT)) not in DECLARATIONS}
    assert {p: f for p, f in found.items() if f} == {}


def _asks(ctx, rows, shard):  # pragma: no cover - never run: only its declaration is read
    raise AssertionError


def test_a_plugin_stage_that_makes_completions_starts_the_preload() -> None:
    spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
                      "fields: {prompt: q, completion: c, reward: r}}]}")
    declare(Stage("ask-plugin", 1, "shard", _asks, asks_model=True,
                  results_role="completions"))
    loader = Preloader(spec)
    started = threading.Event()
    loader._load = started.set  # type: ignore[method-assignment]  # no models: record the start
    try:
        def unit(stage: str) -> UnitState:
            return UnitState(stage, "a shard 1/1", 0, 4, {}, 0.0, 0.0, False)
        loader(unit("score-choices"))  # asks a model too, but makes no completions
        assert loader.thread is None
        loader(unit("ask-plugin"))
        assert loader.thread is not None
        loader.join()
        assert started.is_set()
    finally:
        STAGES.pop("ask-plugin")
        STAGE_VERSIONS.pop("ask-plugin")
        loader.close()


def test_a_plugin_stage_that_loads_models_waits_for_the_preload() -> None:
    declare(Stage("load-plugin", 1, "shard", _asks, loads_models=True))

    class Loading:
        def idle(self) -> bool:
            return False
    loader = Loading()
    try:
        on_add = _while_loading(loader)  # type: ignore[arg-type]
        plugin = Node("load-plugin[a]", "load-plugin", lambda get: ((), {}), _asks,
                      scope="shard")
        other = Node("score-documents[a]", "score-documents", lambda get: ((), {}), _asks,
                     scope="shard")
        on_add(plugin)
        on_add(other)
        assert plugin.ready is not None and plugin.ready() is False
        assert other.ready is None
    finally:
        STAGES.pop("load-plugin")
        STAGE_VERSIONS.pop("load-plugin")


def test_stages_that_follow_a_mode_go_in_their_declared_order() -> None:
    late = Stage("a-late", 1, "shard", _asks, reads=("grade",), order=2)
    early = Stage("b-early", 1, "shard", _asks, reads=("grade",), order=1)
    grade = STAGES["grade"]
    assert [s.name for s in in_order([grade, late, early])] == ["grade", "b-early", "a-late"]
    # the same order whatever order they are declared in; equal orders fall back to the name
    assert [s.name for s in in_order([early, late, grade])] == ["grade", "b-early", "a-late"]
    tie = Stage("b-early", 1, "shard", _asks, reads=("grade",), order=2)
    assert [s.name for s in in_order([tie, late, grade])] == ["grade", "a-late", "b-early"]


def test_a_plugin_stage_that_makes_completions_gets_the_generation_log() -> None:
    # a fresh interpreter: prefect is imported only under the prefect_server fixture here
    code = """
from assay.spec import parse_spec
from assay.stages import RunContext, Stage, StageResult, declare
from assay.tasks import stages as t
seen = []
t.AFTER["completions"] = seen.append  # the generation log, recorded
res = StageResult("ask-plugin", "a shard 1/1", "k", {}, {}, {"rows": 1})
plugin = declare(Stage("ask-plugin", 1, "shard", lambda ctx, rows, shard: res, asks_model=True,
                       results_role="completions"))
quiet = declare(Stage("quiet", 1, "shard", lambda ctx, rows, shard: res, asks_model=True))
spec = parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
                  "fields: {prompt: q, completion: c, reward: r}}]}")
ctx = RunContext(None, spec)
t.stage_body(quiet)(ctx, (None, None))
assert seen == [], seen
t.stage_body(plugin)(ctx, (None, None))
assert seen == [res], seen
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok"]
