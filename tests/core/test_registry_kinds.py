"""Kinds decide for themselves: no module tests a spec entry's kind against a registered kind
name; what a kind means for the spec is declared on the kind and read through its registry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import assay.spec  # noqa: F401  (imports every package, so every built-in kind is registered)
from assay.judging import Verifier
from assay.models.registry import BACKENDS
from assay.reward.registry import PREFERENCE_DATA, REWARD_MODELS
from assay.sources.registry import SOURCES
from assay.spec import parse_spec
from assay.stages.measure import MEASURES
from assay.verify.registry import VERIFIERS
from assay.verify.spec import VerifierSpec

SRC = Path(__file__).resolve().parents[2] / "src" / "assay"

def _registered() -> set[str]:
    names: set[str] = set()
    for reg in (VERIFIERS, SOURCES, BACKENDS, REWARD_MODELS, PREFERENCE_DATA, MEASURES):
        names |= set(reg.names())
    return names


def _is_kind(node: ast.expr) -> bool:
    """``kind``, ``x.kind``, ``x["kind"]``, ``x.get("kind")`` or ``getattr(x, "kind", ...)``."""
    if isinstance(node, ast.Name):
        return node.id == "kind"
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return (node.func.attr == "get" and bool(node.args)
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return (node.func.id == "getattr" and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == "kind")
    return False


def _literals(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for e in node.elts for s in _literals(e)]
    return []


def kind_checks(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of every comparison of a kind expression with a registered kind name."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_is_kind(s) for s in sides):
            out += [(node.lineno, lit) for s in sides for lit in _literals(s) if lit in names]
    return out


def _scan() -> dict[str, list[tuple[int, str]]]:
    names = _registered()
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        hits = kind_checks(ast.parse(path.read_text(), str(path)), names)
        if hits:
            found[path.relative_to(SRC).as_posix()] = hits
    return found


def test_the_checker_finds_what_it_looks_for() -> None:
    code = ('if v.kind == "judge": pass\nif kind in ("function", "x"): pass\n'
            'if d.get("kind") != "hf": pass\nif d["kind"] == "other": pass\n'
            'if v.kind == "judge_x": pass\nif getattr(s, "kind", None) != "hf": pass\n')
    assert kind_checks(ast.parse(code), {"judge", "function", "hf"}) == [
        (1, "judge"), (2, "function"), (3, "hf"), (6, "hf")]


def test_no_kind_name_dispatch_outside_the_kinds() -> None:
    # none is allowed: a file that needs one asks the kind (an attribute or method read
    # through its registry) or a declared table (assay.modes, assay.headlines)
    found = _scan()
    assert found == {}, ("ask the kind (an attribute or method read through its registry) "
                         f"instead of testing its name: {found}")


# ------------------------------------------------------------ what a verifier kind declares


class _Panel(Verifier):
    """A judge-like plugin kind: a model named in ``params.grader`` grades."""

    model_param = "grader"
    under_test_params = ("grader",)

    def __init__(self, grader: dict, rubric: str = "") -> None:
        self.grader, self.rubric = grader, rubric


class _Script(Verifier):
    """A kind grading with the user's function, other than the built-in ``function``."""

    takes_function = True
    open_markers = True

    @classmethod
    def from_spec(cls, vspec: VerifierSpec, base_dir: str | None = None) -> _Script:
        return cls()


@pytest.fixture()
def kinds() -> object:
    VERIFIERS.register("t_panel", replace=True)(_Panel)
    VERIFIERS.register("t_script", replace=True)(_Script)
    yield
    for name in ("t_panel", "t_script"):  # leave the registry as the other tests expect it
        VERIFIERS._kinds.pop(name, None)


def _spec(verifier: str) -> str:
    return f"name: x\nsources: [{{name: a, kind: humaneval, verifier: {verifier}}}]\n"


def test_a_registered_judge_like_kind_keeps_its_model_out_of_the_definition(kinds: object) -> None:
    one = parse_spec(_spec("{kind: t_panel, params: {grader: {kind: openai, model: m1}, "
                           "rubric: r}}"))
    two = parse_spec(_spec("{kind: t_panel, params: {grader: {kind: openai, model: m2}, "
                           "rubric: r}}"))
    other_rubric = parse_spec(_spec("{kind: t_panel, params: {grader: {kind: openai, "
                                    "model: m1}, rubric: s}}"))
    assert one.definition_checksum() == two.definition_checksum()
    assert one.definition_checksum() != other_rubric.definition_checksum()
    assert one.model_under_test()["a"]["judge"] == {"kind": "openai", "model": "m1"}


def test_a_kind_taking_a_function_accepts_function_and_opens_markers(kinds: object) -> None:
    v = VerifierSpec(kind="t_script", function="mod:grade", version="1")
    assert v.takes_function and v.open_markers
    with pytest.raises(ValueError, match="kind t_script needs function"):
        VerifierSpec(kind="t_script")
    with pytest.raises(ValueError, match="only for kind function"):
        VerifierSpec(kind="numeric", function="mod:grade")


def test_built_in_kinds_answer_as_before() -> None:
    judge = VerifierSpec(kind="judge", params={"model": {"kind": "openai", "model": "m"}})
    assert judge.grading_model() == {"kind": "openai", "model": "m"}
    assert set(judge.under_test_params) == {"model", "max_connections", "store"}
    assert not judge.open_markers and not judge.takes_function
    fn = VerifierSpec(kind="function", function="mod:grade", version="2")
    assert fn.takes_function and fn.open_markers and fn.label() == "function mod:grade (version 2)"
    assert VerifierSpec(kind="mod:make").open_markers  # a module:callable kind: only the run knows
    assert VerifierSpec(kind="numeric").label() == "numeric"
    assert VerifierSpec(kind="judge").label() == "judge"


def test_validate_checks_the_user_code_a_backend_kind_declares() -> None:
    from assay.spec import check_files

    spec = parse_spec("name: x\nsources: [{name: a, kind: humaneval, generate: {model: "
                      "{kind: function, callable: 'json:dumps'}}}]\n")
    found = [p for p in check_files(spec) if "generate.model" in p]
    assert len(found) == 1 and found[0].startswith(
        "sources[0].generate.model.callable: model.callable 'json:dumps' takes parameter 'obj'")
