"""Calling a user's function by its parameter names: graders, judges, reward and model functions.

One rule for every place assay calls code a user wrote, checked when the spec is validated.

Each parameter of the function gets the value assay offers under its name (``prompt``,
``completion``, ``reference``, ``row``, ``meta``, ... as the call site offers them, in any order)
or the ``params:`` entry of that name; ``**kwargs`` receives everything offered that no named
parameter took. A parameter with a default may be left out. A required parameter with a name
assay does not offer is an error naming the function and the names it may take. Only a
function none of whose parameters carries an offered name (``lambda p, r: ...``) is called
positionally, in the order the call site documents, where the call site allows it (the Python
API's short lambdas; never a function named in a spec).

Example:
    >>> def grade(prompt, completion, reference, tol=0.0):
    ...     return (prompt, completion, reference, tol)
    >>> b = Binding(grade, ("completion", "reference", "prompt"), params={"tol": 0.5},
    ...             what="verifier function 'g:grade'")
    >>> b.call({"completion": "4", "reference": "4", "prompt": "2+2?"})
    ('2+2?', '4', '4', 0.5)
    >>> Binding(lambda answer, gold: 1, ("completion", "reference"), what="verifier function 'g:f'")
    Traceback (most recent call last):
    ...
    assay.errors.SpecError: verifier function 'g:f' takes parameter 'answer', which assay ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from assay.errors import SpecError


class Binding:
    """How to call ``fn`` with values offered by name (see module docstring).

    ``names``: what the call site offers; ``aliases``: other accepted spellings (``response`` for
    ``completion``); ``params``: fixed keyword values from the spec; ``positional``: the order a
    function with none of the names is called in (None: such a function is refused).
    ``takes`` is the set of offered names the function receives.
    """

    def __init__(self, fn: Callable[..., object], names: Sequence[str], *, what: str,
                 params: Mapping[str, object] | None = None,
                 aliases: Mapping[str, str] | None = None,
                 positional: Sequence[str] | None = None) -> None:
        self.fn = fn
        self.what = what
        self.names = tuple(names)
        self.params = dict(params or {})
        aliases = dict(aliases or {})
        known = {n: n for n in self.names} | {a: n for a, n in aliases.items() if n in self.names}
        self._args: list[str] = []  # offered names passed positionally (positional-only params)
        self._kw: dict[str, str] = {}  # parameter name -> offered name
        self._fixed: dict[str, object] = {}  # parameter name -> params value
        self._rest = False  # **kwargs: gets every offered value and param not taken by name
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin without a signature: documented order
            self._args = list(positional or self.names)
            self.takes = set(self._args)
            return
        ps = [p for p in sig.parameters.values() if p.kind is not p.VAR_POSITIONAL]
        self._rest = any(p.kind is p.VAR_KEYWORD for p in ps)
        ps = [p for p in ps if p.kind is not p.VAR_KEYWORD]
        named = [p for p in ps if p.name not in self.params]
        if positional is not None and named and not any(p.name in known for p in named):
            self._bind_positionally(named, list(positional))
        else:
            for p in named:
                if p.name in known:
                    if p.kind is p.POSITIONAL_ONLY:
                        self._args.append(known[p.name])
                    else:
                        self._kw[p.name] = known[p.name]
                elif p.default is p.empty:
                    raise SpecError(self._unknown(p.name))
        taken = {p.name for p in ps}
        for k, v in self.params.items():
            if k in taken or self._rest:
                self._fixed[k] = v
            else:
                raise SpecError(f"{what}: params {k!r} is not one of its parameters "
                                f"{[p.name for p in ps]}; fix the spelling or take **kwargs")
        self.takes = set(self._args) | set(self._kw.values())
        if self._rest:
            self.takes = set(self.names)

    def _bind_positionally(self, named: list[inspect.Parameter], order: list[str]) -> None:
        for i, p in enumerate(named):
            if i < len(order) and p.kind is not p.KEYWORD_ONLY:
                self._args.append(order[i])
            elif p.default is p.empty:
                raise SpecError(f"{self.what} takes {len(named)} arguments "
                                f"{[q.name for q in named]}; it is called with "
                                f"({', '.join(order)}), or by the names "
                                f"{', '.join(self.names)}")

    def _unknown(self, name: str) -> str:
        extra = f", a params key ({', '.join(self.params)})" if self.params else ""
        return (f"{self.what} takes parameter {name!r}, which assay does not pass; name its "
                f"parameters from: {', '.join(self.names)} (any order, any subset){extra}, "
                "or take **kwargs")

    def call(self, values: Mapping[str, object]) -> Any:

        """``fn`` called with ``values`` (offered name -> value) and the params."""
        kw = {p: values[n] for p, n in self._kw.items()}
        if self._rest:
            kw.update({n: v for n, v in values.items() if n not in kw and n not in self._fixed})
        kw.update(self._fixed)
        return self.fn(*[values[n] for n in self._args], **kw)

