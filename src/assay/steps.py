"""The one vocabulary of derivation steps (where, slice, sample, collapse_duplicates), with the
ops each consumer accepts, so ``assay validate`` and the run apply the same check.

A source's row steps may use :data:`ROW_OPS`; a preference view's derivation :data:`VIEW_OPS`.
A ``where`` step without ``cmp`` compares with ``==`` everywhere.

Example:
    >>> validate_steps([{"op": "where", "field": "axis", "value": "chat"}])
    [{'op': 'where', 'field': 'axis', 'value': 'chat', 'cmp': '=='}]
    >>> validate_steps([{"op": "collapse_duplicates"}], ROW_OPS, used_by="a source's rows")
    Traceback (most recent call last):
    ...
    assay.errors.DataError: steps[0].op 'collapse_duplicates' is not supported for a source's \
rows (use one of ['where', 'slice', 'sample']); collapse_duplicates applies to preference views
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from assay.errors import DataError, HashError
from assay.hashing import canonicalize

__all__ = ["ROW_OPS", "STEP_FIELDS", "VIEW_OPS", "WHERE_OPS", "check_steps", "validate_steps"]

#: Comparison operators a ``where`` step may use.
WHERE_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
    "contains": lambda a, b: b in a,
}
#: Step ops and their fields (required, optional). ``where``'s ``cmp`` defaults to ``==``.
STEP_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "where": (("field", "value"), ("cmp",)),
    "slice": (("start",), ("stop", "step")),
    "sample": (("n", "seed"), ()),
    "collapse_duplicates": ((), ()),
}
#: Ops a source's row steps may use (the filter-rows stage replays them on rows).
ROW_OPS: tuple[str, ...] = ("where", "slice", "sample")
#: Ops a preference view's derivation may use (``DataView`` replays them on items).
VIEW_OPS: tuple[str, ...] = ("where", "slice", "sample", "collapse_duplicates")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_op(at: str, op: object, ops: Sequence[str], used_by: str) -> None:
    if op in ops:
        return
    if op in STEP_FIELDS:  # a real op, but not for this consumer: say where it does apply
        home = "preference views" if op in VIEW_OPS else "rows"
        raise DataError(f"{at}.op {op!r} is not supported for {used_by} "
                        f"(use one of {list(ops)}); {op} applies to {home}")
    hint = " (filter(callable) steps cannot be replayed: use where())" if op == "filter" else ""
    raise DataError(f"{at}.op is {op!r}; expected one of {list(ops)}{hint}")


def validate_steps(steps: object, ops: Sequence[str] = VIEW_OPS, *,
                   used_by: str = "preference views") -> list[dict[str, Any]]:
    """Check derivation steps (as stored in a spec) against the ops ``ops`` allows and return
    them as plain dicts, a ``where`` without ``cmp`` given ``cmp: '=='``.

    Raises DataError naming the bad step's index and field, e.g. ``steps[2].n``.

    Example:
        >>> validate_steps([{"op": "slice", "start": 0, "stop": 5}])
        [{'op': 'slice', 'start': 0, 'stop': 5}]
        >>> validate_steps([{"op": "sample", "n": -1, "seed": 0}])
        Traceback (most recent call last):
        ...
        assay.errors.DataError: steps[0].n must be a non-negative int, got -1
    """
    if isinstance(steps, (str, bytes, Mapping)) or not isinstance(steps, Sequence):
        raise DataError("derivation steps must be a list of step mappings, "
                        f"got {type(steps).__name__}")
    out = []
    for i, s in enumerate(steps):
        at = f"steps[{i}]"
        if not isinstance(s, Mapping):
            raise DataError(f"{at} must be a mapping like {{'op': 'slice', ...}}, got {s!r}")
        op = s.get("op")
        _check_op(at, op, ops, used_by)
        assert isinstance(op, str)
        req, opt = STEP_FIELDS[op]
        for k in req:
            if k not in s:
                raise DataError(f"{at}.{k} is missing (a {op!r} step needs {list(req)})")
        for k in s:
            if k != "op" and k not in req and k not in opt:
                raise DataError(f"{at}.{k} is not a field of a {op!r} step "
                                f"(fields: {list(req + opt)})")
        step = dict(s)
        if op == "where":
            step.setdefault("cmp", "==")
            if not isinstance(step["field"], str) or not step["field"]:
                raise DataError(f"{at}.field must be a non-empty field name, got {step['field']!r}")
            if step["cmp"] not in WHERE_OPS:
                raise DataError(f"{at}.cmp is {step['cmp']!r}; expected one of {list(WHERE_OPS)}")
            try:
                canonicalize(step["value"])
            except HashError as e:
                raise DataError(f"{at}.value is not JSON data: {e}") from None
            if step["cmp"] in ("in", "not in") and not isinstance(step["value"], (list, tuple)):
                raise DataError(f"{at}.value must be a list for cmp {step['cmp']!r}")
        elif op == "slice":
            for k in ("start", "stop", "step"):
                v = step.get(k)
                if v is not None and not _is_int(v):
                    raise DataError(f"{at}.{k} must be an int or null, got {v!r}")
            if step.get("step") == 0:
                raise DataError(f"{at}.step must not be 0")
        elif op == "sample":
            if not _is_int(step["n"]) or step["n"] < 0:
                raise DataError(f"{at}.n must be a non-negative int, got {step['n']!r}")
            if not _is_int(step["seed"]) or step["seed"] < 0:
                raise DataError(f"{at}.seed must be a non-negative int, got {step['seed']!r}")
        out.append(step)
    return out


def check_steps(steps: object, ops: Sequence[str] = VIEW_OPS, *,
                used_by: str = "preference views") -> list[dict[str, Any]]:
    """:func:`validate_steps` for a spec field validator: the error is a ValueError, so pydantic
    prefixes the YAML path (``sources.0.steps``) to the ``steps[i].field`` message.

    Example:
        >>> check_steps([{"op": "where", "field": "reward", "cmp": ">", "value": 0}], ROW_OPS)
        [{'op': 'where', 'field': 'reward', 'cmp': '>', 'value': 0}]
    """
    try:
        return validate_steps(steps, ops, used_by=used_by)
    except DataError as e:
        raise ValueError(str(e)) from None
