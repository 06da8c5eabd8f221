"""One registration style for every kind registry: a :class:`assay.registry.Registry`, kinds
registered with ``register(name)`` on the class or ``register(name, obj)``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import assay.spec  # noqa: F401  (imports every package, so every built-in kind is registered)
from assay.models import hf_loglik, openai_loglik
from assay.models.loglik import rolling_problem
from assay.models.registry import BACKENDS
from assay.models.scorers import SCORERS, no_rolling
from assay.registry import Registry
from assay.reward.registry import PREFERENCE_DATA, REWARD_MODELS
from assay.sources.registry import SOURCES
from assay.stages.measure import MEASURES
from assay.verify.registry import VERIFIERS

SRC = Path(__file__).resolve().parents[2] / "src" / "assay"
REGISTRIES = {"VERIFIERS": VERIFIERS, "SOURCES": SOURCES, "BACKENDS": BACKENDS,
              "SCORERS": SCORERS, "REWARD_MODELS": REWARD_MODELS,
              "PREFERENCE_DATA": PREFERENCE_DATA, "MEASURES": MEASURES}
#: still registering through the decorator called by hand (valid, but the other style): none
OLD_STYLE_ALLOWED: set[str] = set()


def test_every_registry_is_a_registry() -> None:
    assert {n: type(r).__name__ for n, r in REGISTRIES.items()
            if not isinstance(r, Registry)} == {}
    assert {"hf", "openai"} <= set(SCORERS.names())


def test_register_is_a_decorator_or_a_call_with_the_object() -> None:
    reg: Registry[object] = Registry("pet")

    @reg.register("cat", help="meows")
    class Cat:
        pass

    class Dog:
        """Barks."""

    assert reg.register("dog", Dog) is Dog
    assert [(k.name, k.obj, k.help) for k in reg] == [("cat", Cat, "meows"), ("dog", Dog, "Barks.")]
    with pytest.raises(ValueError, match="already registered"):
        reg.register("dog", Cat)


def test_a_self_spec_registry_uses_the_class_as_its_spec() -> None:
    reg: Registry[type] = Registry("entry", self_spec=True)

    @reg.register("a")
    class A:
        pass

    class Spec:
        pass

    reg.register("b", A, spec=Spec)
    assert reg.get("a").spec is A and reg.get("b").spec is Spec
    assert Registry("plain").register("c", A) is A
    for r in (SOURCES, REWARD_MODELS, PREFERENCE_DATA):
        assert all(k.spec is k.obj for k in r if k.name != "lm_eval"), r.what


def test_scorers_declare_whether_they_roll() -> None:
    assert SCORERS.get("hf").obj is hf_loglik.HFScorer
    assert SCORERS.get("openai").obj is openai_loglik.OpenAIScorer
    assert no_rolling("hf") is None and no_rolling("openai").startswith("a document's perplexity")
    assert rolling_problem("function") == (
        "kind 'function' has no log-likelihood scorer (scorers: ['hf', 'openai'])")


def _old_style(tree: ast.AST) -> list[int]:
    """Lines of ``X.register(...)(obj)``: the decorator called by hand."""
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Call)
            and isinstance(n.func.func, ast.Attribute) and n.func.func.attr == "register"]


def test_no_kind_is_registered_by_calling_the_decorator_by_hand() -> None:
    assert _old_style(ast.parse("R.register('a', spec=A)(A)\nR.register('b', B)\n")) == [1]
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        lines = _old_style(ast.parse(path.read_text(), rel))
        if lines and rel not in OLD_STYLE_ALLOWED:
            found[rel] = lines
    assert found == {}, f"register with @REG.register(name) or REG.register(name, obj): {found}"
