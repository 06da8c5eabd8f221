"""Building blocks of the study spec shared by every package that owns spec kinds.

``SpecModel`` (frozen, unknown fields rejected), step validation, the verifier entry, and
``kind_union``: a field type whose choices are read from a kind registry when the schema is built.

Example:
    >>> from assay.registry import Registry
    >>> reg = Registry("pet")
    >>> class Cat(SpecModel):
    ...     kind: Literal["cat"]
    ...     lives: int = 9
    >>> _ = reg.register("cat", Cat, spec=Cat)
    >>> class Home(SpecModel):
    ...     pet: kind_union(reg)
    >>> Home.model_validate({"pet": {"kind": "cat"}}).pet.lives
    9
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal, Protocol, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
)
from pydantic_core import CoreSchema

from assay.paths import SpecPaths

__all__ = ["SpecModel", "QuietSpecModel", "PluginEntry", "kind_union", "version_field", "Literal"]


class SpecModel(BaseModel):
    """Base of every spec entry: immutable, and an unknown field is an error, not ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the folder of the spec file this entry was read from (set by ``parse_spec`` on every
    #: entry; private, so never part of a checksum: moving a study's folder recomputes nothing)
    _spec_dir: str | None = PrivateAttr(None)

    @property
    def spec_paths(self) -> SpecPaths:
        """How a path written in this entry resolves: from its spec file's folder."""
        return SpecPaths(self._spec_dir)

    def bind_spec_dir(self, base_dir: str | None) -> None:
        """Record ``base_dir`` on this entry and every entry nested in it."""
        _bind(self, base_dir)


def _bind(value: object, base_dir: str | None) -> None:
    if isinstance(value, SpecModel):
        value._spec_dir = base_dir
        for name in type(value).model_fields:
            _bind(getattr(value, name), base_dir)
    elif isinstance(value, list | tuple):
        for item in value:
            _bind(item, base_dir)
    elif isinstance(value, dict):
        for item in value.values():
            _bind(item, base_dir)


class QuietSpecModel(SpecModel):
    """A spec entry whose options added later leave its dump (so a spec's checksums) as it was
    while they hold their defaults: ``QUIET`` names them with the default they are dropped at.

    Example:
        >>> class Shots(QuietSpecModel):
        ...     QUIET: ClassVar[dict[str, object]] = {"order": "random"}
        ...     k: int = 0
        ...     order: str = "random"
        >>> Shots().model_dump(), Shots(order="first").model_dump()
        ({'k': 0}, {'k': 0, 'order': 'first'})
    """

    QUIET: ClassVar[dict[str, object]] = {}

    @model_serializer(mode="wrap")
    def _quiet(self, handler: SerializerFunctionWrapHandler) -> object:
        out = handler(self)
        if isinstance(out, dict):
            for key, default in self.QUIET.items():
                if key in out and getattr(self, key) == default:
                    del out[key]
        return out


class PluginEntry(SpecModel):
    """A kind named as ``module:callable`` instead of a registered name; ``params`` are the
    callable's keyword arguments."""

    kind: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
                      description="'package.module:callable' (an unregistered kind)")
    params: dict[str, object] = Field(default_factory=dict)


def _kind_of(value: object) -> str | None:
    kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    return kind if isinstance(kind, str) else None


class _KindEntry(Protocol):
    """What a kind union reads of one registered kind (a :class:`assay.registry.Kind`)."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> type[BaseModel] | None: ...


class KindSource(Protocol):
    """What a kind union reads of a registry (an :class:`assay.registry.Registry` of any kind
    of object): what its kinds are, and the kinds with their spec models."""

    @property
    def what(self) -> str: ...

    def __iter__(self) -> Iterator[_KindEntry]: ...


class _KindUnion:
    """Pydantic hook: a tagged union over ``registry``'s spec models, built when the schema is
    (re)generated, so kinds registered later appear after :func:`refresh_models`."""

    def __init__(self, registry: KindSource, fallback: type[SpecModel] | None,
                 default: str | None = None) -> None:
        self.registry = registry
        self.fallback = fallback
        self.default = default

    def union(self) -> object:
        choices = [Annotated[k.spec, Tag(k.name)] for k in self.registry if k.spec is not None]
        names = {k.name for k in self.registry if k.spec is not None}
        if self.fallback is not None:
            choices.append(Annotated[self.fallback, Tag(":plugin")])

        def pick(value: object) -> str | None:
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
        known = f"{sorted(names)}" + (", or 'module:callable'" if self.fallback else "")
        return Annotated[
            Union[tuple(choices)],  # noqa: UP007 (a runtime tuple)
            Discriminator(pick, custom_error_type="unknown_kind",
                          custom_error_message=f"unknown {self.registry.what} kind; "
                          f"known kinds: {known}"),
        ]

    def __get_pydantic_core_schema__(self, source: object,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:

        return handler.generate_schema(self.union())


def version_field(keyed: str, *, only: str = "") -> Any:
    """The ``version:`` field every kind that runs user code accepts (one rule:
    :func:`assay.hashing.code_identity`): when set it keys ``keyed`` instead of the code's
    module source and its local helpers. ``only`` prefixes the description (``kind function
    only: ``) where the field belongs to one kind of an entry."""
    return Field(None, description=f"{only}keys {keyed} instead of the function's module source "
                 "(and its helpers'); change it whenever the function's behaviour changes")


def kind_union(registry: KindSource, fallback: type[SpecModel] | None = None,
               default: str | None = None) -> Any:
    """A field type accepting any kind registered in ``registry`` (by its spec model), and
    ``module:callable`` kinds as ``fallback`` entries when given; an entry without ``kind`` is
    of kind ``default`` when given (its spec model should default ``kind`` to it)."""
    return Annotated[Any, _KindUnion(registry, fallback, default)]
