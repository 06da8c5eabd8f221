"""A mode declares everything it decides in the mode table (assay.stages.modes): no module
compares a source's mode with a mode's name, and a mode added by its row alone gets its stages,
its shards and its default measures."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from assay.sources.base import Mode
from assay.spec import parse_spec
from assay.stages import STAGE_VERSIONS, STAGES, Stage, declare
from assay.stages.modes import MODES, ModeRow, declare_mode, default_sources, row_of
from assay.stages.wiring import study_graph

ROOT = Path(__file__).resolve().parents[2]

#: Where a mode's name may be compared, and why: the table itself; a kind saying which mode its
#: own fields make (the ``mode`` property the table is read by); lm-eval's own task types.
ALLOWED = {
    "src/assay/stages/modes.py": "the mode table",
    "src/assay/sources/records.py": "the records kind checks its own choices:/perplexity: fields",
    "src/assay/measure/lm_eval_means.py": "an lm-eval task's output type, as lm-eval names it",
}


def _is_mode(node: ast.AST) -> bool:
    """``mode``, ``x.mode`` or ``x["mode"]``: an expression that is a mode."""
    if isinstance(node, ast.Name):
        return node.id == "mode"
    if isinstance(node, ast.Attribute):
        return node.attr == "mode"
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
        and node.slice.value == "mode"


def _names_a_mode(node: ast.AST, modes: set[str]) -> bool:
    """A mode's name, or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in modes
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_mode(e, modes) for e in node.elts)
    return False


def mode_checks(text: str, modes: set[str]) -> list[str]:
    """Where ``text`` (a module's source) decides by a mode's name: a mode compared with a mode
    name (``s.mode == "choices"``, ``mode in ("choices", "perplexity")``) or with another mode
    (``s.mode == mode``: a mode passed in as a string). An ``assert`` decides nothing (a stage
    checking that the table sent it its mode's sources)."""
    tree = ast.parse(text)
    asserted = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assert)
                for n in ast.walk(a.test)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or id(node) in asserted:
            continue
        sides = [node.left, *node.comparators]
        moded = [i for i, s in enumerate(sides) if _is_mode(s)]
        if moded and any(_names_a_mode(s, modes) or (_is_mode(s) and i != moded[0])
                         for i, s in enumerate(sides)):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_checker_finds_the_mode_checks_it_is_for() -> None:
    modes = {"choices", "generate"}
    code = ('a = [s for s in spec.sources if s.mode == "choices"]\n'
            'b = mode != "generate"\n'
            'c = src.mode in ("choices", "x")\n'
            'd = g["mode"] == "choices"\n'
            'e = [s.name for s in spec.sources if s.mode == mode]\n'
            'f = mode == "drop"\n'  # not a source mode: allowed
            'g = r.stage == "generate"\n'  # a stage, not a mode: allowed
            'assert source.mode == "choices", source.mode\n'  # checks, decides nothing
            'h = row_of(s.mode).model == "generate"\n')  # the table's answer: allowed
    assert sorted(int(f.split(":")[0]) for f in mode_checks(code, modes)) == [1, 2, 3, 4, 5]


def test_no_mode_name_is_compared_outside_the_mode_table() -> None:
    modes = set(get_args(Mode))
    files = [*sorted((ROOT / "src/assay").rglob("*.py")), *sorted((ROOT / "tasks").glob("*.py")),
             *sorted((ROOT / "flows").glob("*.py"))]
    found = {str(p.relative_to(ROOT)): mode_checks(p.read_text(), modes) for p in files
             if str(p.relative_to(ROOT)) not in ALLOWED}
    assert {p: f for p, f in found.items() if f} == {}


def test_every_mode_has_a_row_and_each_row_says_what_it_needs() -> None:
    assert set(get_args(Mode)) <= set(MODES)
    assert {m: r.model for m, r in MODES.items() if m in get_args(Mode)} == {
        "scores": None, "verify": None, "generate": "generate", "choices": "scorer",
        "perplexity": "scorer"}
    for mode, row in MODES.items():
        assert all(STAGES[n].scope == "shard" for n in row.stages), mode
        assert (row.cut is None) == (not row.stages), mode  # stage-less modes stay whole
    with pytest.raises(ValueError, match="'rank' has no row in the mode table"):
        row_of("rank")


SPEC = ("{name: d, sources: [{name: a, kind: file, path: a.jsonl, fields: {prompt: q, "
        "completion: c, reward: r}}, {name: b, kind: file, path: b.jsonl, fields: {prompt: q, "
        "reference: c}, verifier: {kind: exact_match}}]}")


def test_the_default_measures_are_the_tables() -> None:
    spec = parse_spec(SPEC)
    assert default_sources(spec, "pass_at") == ["a", "b"]  # listed by no mode: every source
    assert default_sources(spec, "perplexity") == []
    saved = MODES["verify"]
    try:  # a mode whose row lists a measure is what that measure reads by default
        MODES["verify"] = ModeRow(saved.stages, measures=("perplexity",))
        assert default_sources(spec, "perplexity") == ["b"]
    finally:
        MODES["verify"] = saved


def _rank(ctx, rows, shard):  # pragma: no cover - never run: only the graph is built
    raise AssertionError


def test_a_mode_is_its_row_plus_its_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.sources.base import SourceSpec

    spec = parse_spec(SPEC)
    declare(Stage("rank-shard", 1, "shard", _rank, reads=("filter-rows",)))
    declare_mode("ranked", ModeRow(("rank-shard",), cut=None, measures=("perplexity",)))
    monkeypatch.setattr(SourceSpec, "mode", property(lambda s: "ranked" if s.name == "b"
                                                      else "scores"))
    try:
        g = study_graph(spec, None, progress=None)
        filtered = g.nodes["filter-rows[b]"]
        assert filtered.expand is not None
        from assay.stages.cache import StageResult

        shards = filtered.expand(StageResult("filter-rows", "b", "k", {}, {}, {"rows": 6}))
        # cut=None: the filtered rows whole, one node of the mode's stage
        assert [(n.id, n.stage) for n in shards] == [("rank-shard[b]", "rank-shard")]
        assert default_sources(spec, "perplexity") == ["b"]
    finally:
        MODES.pop("ranked")
        STAGES.pop("rank-shard")
        STAGE_VERSIONS.pop("rank-shard")
