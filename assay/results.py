"""Shared shapes of measurement results: an interval with its method, an estimate with its n.

Every measurement (pass_at, compare, contamination, the reward audit) reports through these.

Naming rule for result classes: no suffix, named for what the call returns (``pass_at`` ->
``PassAt``, ``contamination`` -> ``Contamination``, ``audit`` -> ``Audit``), as scipy's result
objects are named for their test. Older names (``...Report``, ``...Result``) still import, with a
DeprecationWarning (:func:`deprecated_names`).

Example:
    >>> e = Estimate("pass@1", 0.688, Interval(0.41, 0.88, 0.95, "cluster t"), n=4, n_rows=16)
    >>> str(e)
    'pass@1 0.688 [0.410, 0.880] (4 tasks, 16 rows)'
    >>> e.confidence_interval().method
    'cluster t'
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.{digits}f}"


@dataclass(frozen=True)
class Interval:
    """A confidence interval: bounds, level and the name of the method that made it."""

    low: float
    high: float
    level: float = 0.95
    method: str = ""

    def __str__(self) -> str:
        return f"[{_fmt(self.low)}, {_fmt(self.high)}]"

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval and the number of independent units behind it."""

    name: str
    value: float
    interval: Interval | None
    n: int
    unit: str = "tasks"
    n_rows: int | None = None
    note: str | None = None

    def confidence_interval(self) -> Interval | None:
        return self.interval

    def __str__(self) -> str:
        ci = f" {self.interval}" if self.interval is not None else ""
        rows = f", {self.n_rows} rows" if self.n_rows is not None else ""
        note = f"; {self.note}" if self.note else ""
        return f"{self.name} {_fmt(self.value)}{ci} ({self.n} {self.unit}{rows}{note})"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return d


def to_plain(obj: Any) -> Any:
    """Recursively turn dataclasses / numpy values into JSON-ready Python (NaN -> None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "to_dict") and type(obj).to_dict is not Result.to_dict:
            return to_plain(obj.to_dict())
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if hasattr(obj, "item") and type(obj).__module__ == "numpy":
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


class Result:
    """Mixin for frozen result dataclasses: ``to_dict()``, one-line ``str()``, ``report()``.

    Subclasses define ``__str__`` (every estimate with interval and n on one line) and may
    override ``report()`` (multi-line, where warnings live).
    """

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def report(self) -> str:
        lines = [str(self)]
        for w in getattr(self, "warnings", ()) or ():
            lines.append(f"warning: {w}")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return "```\n" + self.report() + "\n```"


def deprecated_names(module: str, namespace: Mapping[str, Any], renamed: Mapping[str, str]
                     ) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that serves each old name in ``renamed`` (old -> new)
    as the new object, with a DeprecationWarning, so code written against the old name works.

    Example:
        >>> import warnings
        >>> class Audit: ...
        >>> get = deprecated_names("m", {"Audit": Audit}, {"AuditResult": "Audit"})
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     get("AuditResult") is Audit, str(w[0].message)
        (True, 'm.AuditResult is deprecated: use m.Audit (the same class)')
    """
    def __getattr__(name: str) -> Any:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated: use {module}.{new} (the same class)",
                      DeprecationWarning, stacklevel=2)
        return namespace[new]

    return __getattr__
