"""Building blocks of the study spec shared by every package that owns spec kinds.

``SpecModel`` (frozen, unknown fields rejected), step validation, the verifier entry, and
``kind_union``: a field type whose choices are read from a kind registry when the schema is built.

Example:
    >>> from assay.registry import Registry
    >>> reg = Registry("pet")
    >>> class Cat(SpecModel):
    ...     kind: Literal["cat"]
    ...     lives: int = 9
    >>> _ = reg.register("cat", spec=Cat)(Cat)
    >>> class Home(SpecModel):
    ...     pet: kind_union(reg)
    >>> Home.model_validate({"pet": {"kind": "cat"}}).pet.lives
    9
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from assay.registry import Registry

__all__ = ["SpecModel", "PluginEntry", "VerifierSpec", "kind_union", "Literal"]


class SpecModel(BaseModel):
    """Base of every spec entry: immutable, and an unknown field is an error, not ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginEntry(SpecModel):
    """A kind named as ``module:callable`` instead of a registered name; ``params`` are the
    callable's keyword arguments."""

    kind: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
                      description="'package.module:callable' (an unregistered kind)")
    params: dict[str, Any] = Field(default_factory=dict)


def _kind_of(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    return kind if isinstance(kind, str) else None


class _KindUnion:
    """Pydantic hook: a tagged union over ``registry``'s spec models, built when the schema is
    (re)generated, so kinds registered later appear after :func:`refresh_models`."""

    def __init__(self, registry: Registry[Any], fallback: type[SpecModel] | None,
                 default: str | None = None) -> None:
        self.registry = registry
        self.fallback = fallback
        self.default = default

    def union(self) -> Any:
        choices = [Annotated[k.spec, Tag(k.name)] for k in self.registry if k.spec is not None]
        names = {k.name for k in self.registry if k.spec is not None}
        if self.fallback is not None:
            choices.append(Annotated[self.fallback, Tag(":plugin")])

        def pick(value: Any) -> str | None:
            kind = _kind_of(value)
            if kind is None and self.default is not None and isinstance(value, Mapping) \
                    and "kind" not in value:
                kind = self.default
            if kind in names:
                return kind
            if self.fallback is not None and kind and ":" in kind:
                return ":plugin"
            return None  # pydantic reports union_tag_not_found / invalid with the known tags

        if not choices:
            raise RuntimeError(f"no {self.registry.what} kinds are registered")
        return Annotated[Union[tuple(choices)], Discriminator(  # noqa: UP007 (a runtime tuple)
            pick, custom_error_type="unknown_kind",
            custom_error_message=f"unknown {self.registry.what} kind; known kinds: "
                                 f"{sorted(names)}" + (", or 'module:callable'" if self.fallback else ""),
        )]

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler.generate_schema(self.union())


def kind_union(registry: Registry[Any], fallback: type[SpecModel] | None = None,
               default: str | None = None) -> Any:
    """A field type accepting any kind registered in ``registry`` (by its spec model), and
    ``module:callable`` kinds as ``fallback`` entries when given; an entry without ``kind`` is
    of kind ``default`` when given (its spec model should default ``kind`` to it)."""
    return Annotated[Any, _KindUnion(registry, fallback, default)]


class VerifierSpec(SpecModel):
    """Which verifier grades a source: a registered kind (``assay.verify.registry.VERIFIERS``)
    or ``module:callable`` building one, with its keyword arguments. ``kind: function`` runs
    your own grading function (``function: 'mypkg.graders:grade'``, its ``params`` passed as
    keyword arguments) through the judge contract."""

    kind: str = Field(description="a registered verifier kind, or 'package.module:callable'")
    params: dict[str, Any] = Field(default_factory=dict)
    function: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="kind function only: 'package.module:callable' grading one completion, "
        "called as f(completion, reference, **params) or f(completion, reference, row, **params); "
        "a module next to the spec imports without PYTHONPATH")
    version: str | None = Field(
        None, description="kind function only: keys cached grades instead of the function's "
        "module source; change it whenever the function's behaviour changes")

    @field_validator("kind")
    @classmethod
    def _known(cls, v: str) -> str:
        from assay.verify.registry import VERIFIERS

        if v not in VERIFIERS and ":" not in v:
            VERIFIERS.get(v)  # raises with the known kinds and the closest match
        return v

    @model_validator(mode="after")
    def _function_iff_kind(self) -> VerifierSpec:
        if self.kind == "function" and self.function is None:
            raise ValueError("kind function needs function: 'package.module:callable' (your grader)")
        if self.kind != "function":
            for f in ("function", "version"):
                if getattr(self, f) is not None:
                    raise ValueError(f"{f} is only for kind function (this verifier is kind {self.kind!r}); "
                                     "drop it, or set kind: function")
        return self

    def label(self) -> str:
        """How the report names the verifier: its kind, or the function (and its version)."""
        if self.kind == "function":
            return f"function {self.function}" + (f" (version {self.version})" if self.version else "")
        return self.kind

    def _impl(self, base_dir: str | None) -> Any:
        from assay.registry import load_callable
        from assay.verify.registry import VERIFIERS

        return (VERIFIERS.get(self.kind).obj if ":" not in self.kind
                else load_callable(self.kind, what="verifier kind", base_dir=base_dir))

    def build(self, base_dir: str | None = None) -> Any:
        """The verifier object (its class or factory called with ``params``; a kind whose class
        has ``from_spec(vspec, base_dir)`` builds itself from the whole entry)."""
        import inspect

        from assay.errors import SpecError

        obj = self._impl(base_dir)
        from_spec = getattr(obj, "from_spec", None)
        if callable(from_spec):
            return from_spec(self, base_dir)
        try:
            inspect.signature(obj).bind(**self.params)
        except TypeError as e:
            raise SpecError(f"verifier {self.kind}: bad params {self.params} ({e})") from None
        except ValueError:  # no signature (a builtin): let the call say what is wrong
            pass
        return obj(**self.params)
