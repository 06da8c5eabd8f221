"""Kind registries: verifiers, sources, model backends, scorers, judges, reward models, preference
data and measures, each by name.

Each package owns one :class:`Registry` and registers its kinds next to their classes; the spec
and its JSON Schema are derived from the registries, and a user's module can add kinds too.

A kind is a name, the object that implements it (a class or a factory), and optionally a pydantic
model of its spec entry (the fields a YAML entry of this kind takes, ``kind`` included). A kind
may also be named in a spec as ``module:callable`` without registering it (see
:meth:`Registry.get`). What a kind means for the spec (which fields it takes, what it loads) is
declared on the kind's object, so the spec asks the kind rather than testing its name.

One registration style for every registry: ``register(name, ...)`` as a decorator on the class
or function, or ``register(name, obj, ...)`` as a call where a decorator cannot reach (a class
made elsewhere).

Example:
    >>> reg = Registry("greeter")
    >>> @reg.register("hello")
    ... def hello(name: str) -> str:
    ...     return f"hello {name}"
    >>> _ = reg.register("hi", lambda name: f"hi {name}")
    >>> reg.get("hello").obj("you"), reg.names()
    ('hello you', ['hello', 'hi'])
    >>> reg.get("helo")
    Traceback (most recent call last):
    ...
    assay.errors.SpecError: unknown greeter kind 'helo' (did you mean 'hello'?); known kinds: ...
"""

from __future__ import annotations

import difflib
import enum
import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast, overload

from assay.errors import SpecError

if TYPE_CHECKING:
    from pydantic import BaseModel

T = TypeVar("T")


class _Nothing(enum.Enum):
    """``register``'s "no object given" (None could be a registered object's value)."""

    NOTHING = 0


_NOTHING: Final = _Nothing.NOTHING

#: Bumped on every registration, so derived artefacts (the spec model, the schema) know to rebuild.
_GENERATION = [0]


def generation() -> int:
    """A counter that changes whenever any registry gains a kind."""
    return _GENERATION[0]


@dataclass(frozen=True)
class Kind(Generic[T]):
    """One registered kind: its name, what implements it, its spec model and a one-line help."""

    name: str
    obj: T
    spec: type[BaseModel] | None = None
    help: str = ""
    module: str = ""


class Registry(Generic[T]):
    """Kinds of one sort, by name. ``register`` registers (a decorator, or a call with the
    object); ``get`` resolves a name or a ``module:callable`` reference; iteration yields the
    registered :class:`Kind` entries. ``self_spec``: each kind's object is its own spec model
    (a pydantic entry class with its behaviour: sources, reward models, preference data), so
    ``spec`` defaults to it."""

    def __init__(self, what: str, *, self_spec: bool = False) -> None:
        self.what = what
        self.self_spec = self_spec
        self._kinds: dict[str, Kind[T]] = {}

    @overload
    def register(self, name: str, *, spec: type[BaseModel] | None = None, help: str = "",
                 replace: bool = False) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T, *, spec: type[BaseModel] | None = None,
                 help: str = "", replace: bool = False) -> T: ...

    def register(self, name: str, obj: T | _Nothing = _NOTHING, *,
                 spec: type[BaseModel] | None = None, help: str = "",
                 replace: bool = False) -> Callable[[T], T] | T:
        """Register ``obj`` as kind ``name`` (with ``spec``, its pydantic entry model, and
        ``help``, else the first line of its docstring); without ``obj``, a decorator doing so.

        A second registration of a name raises unless ``replace=True`` or it is the same object
        re-imported (a module reloaded in a notebook)."""

        def deco(obj: T) -> T:
            old = self._kinds.get(name)
            same = old is not None and getattr(old.obj, "__qualname__", None) == getattr(
                obj, "__qualname__", object()) and old.module == getattr(obj, "__module__", "")
            if old is not None and not (replace or same):
                raise ValueError(f"{self.what} kind {name!r} is already registered by {old.module}")
            doc = help or (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
            entry = cast("type[BaseModel]", obj) if spec is None and self.self_spec else spec
            self._kinds[name] = Kind(name, obj, entry, doc, getattr(obj, "__module__", ""))
            _GENERATION[0] += 1
            return obj

        return deco if obj is _Nothing.NOTHING else deco(obj)

    def names(self) -> list[str]:
        return sorted(self._kinds)

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[Kind[T]]:
        return iter([self._kinds[n] for n in self.names()])

    def __len__(self) -> int:
        return len(self._kinds)

    def get(self, name: str) -> Kind[T]:
        """The kind called ``name``; ``module:callable`` imports the callable (an unregistered
        kind); an unknown name is a SpecError listing the known ones and the closest match."""
        if name in self._kinds:
            return self._kinds[name]
        if ":" in name:
            obj = load_callable(name, what=f"{self.what} kind")
            # the user's callable stands for the kind's object (a class or factory): trusted
            # as T, as a registered one would be
            return Kind(name, cast(T, obj), None, "", getattr(obj, "__module__", ""))
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"unknown {self.what} kind {name!r}{hint}; known kinds: {self.names()}, "
                        "or 'module:callable'")


def load_callable(ref: str, *, what: str = "callable",
                  base_dir: str | Path | None = None) -> Callable[..., Any]:
    """Import ``package.module:attr`` (``attr`` may be dotted). ``base_dir`` (a spec's folder) is
    put on ``sys.path`` first, so a module next to the spec imports without PYTHONPATH."""
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise SpecError(f"{what} {ref!r}: write it as 'package.module:callable'")
    if base_dir is not None and str(base_dir) not in sys.path:
        sys.path.insert(0, str(base_dir))
    try:
        obj: object = importlib.import_module(mod_name)
    except Exception as e:  # a user module: any import-time error is theirs to fix
        raise SpecError(f"{what} {ref!r}: cannot import module {mod_name!r} "
                        f"({type(e).__name__}: {e})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpecError(f"{what} {ref!r}: module {mod_name!r} has no attribute "
                            f"{attr!r}") from None
    if not callable(obj):
        raise SpecError(f"{what} {ref!r}: {attr!r} is a {type(obj).__name__}, not callable")
    return obj


def import_plugins(refs: list[str], *, base_dir: str | Path | None = None) -> None:
    """Import each plugin a spec names: ``module`` (its import registers kinds with the
    registries' decorators) or ``module:callable`` (called with no arguments after import)."""
    for ref in refs:
        if ":" in ref:
            load_callable(ref, what="plugin", base_dir=base_dir)()
            continue
        if base_dir is not None and str(base_dir) not in sys.path:
            sys.path.insert(0, str(base_dir))
        try:
            importlib.import_module(ref)
        except Exception as e:
            raise SpecError(f"plugin {ref!r}: cannot import ({type(e).__name__}: {e})") from None
