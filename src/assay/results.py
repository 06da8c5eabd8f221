"""Shared shapes of measurement results: an interval with its method, an estimate with its n.

Every measurement (pass_at, compare, contamination, the reward audit) reports through these.

Naming rule for result classes: no suffix, named for what the call returns (``pass_at`` ->
``PassAt``, ``contamination`` -> ``Contamination``, ``audit`` -> ``Audit``), as scipy's result
objects are named for their test.

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import pandas as pd


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

    def to_dict(self) -> dict[str, object]:
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

    def to_dict(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        return d


class EstimateRecord(TypedDict):
    """One :class:`Estimate` as :func:`collect_estimates` lists it (JSON-ready: NaN is None)."""

    path: str
    name: str
    value: float | None
    low: float | None
    high: float | None
    level: float | None
    method: str | None
    n: int
    unit: str
    n_rows: int | None
    note: str | None


def collect_estimates(obj: object, path: str = "") -> list[EstimateRecord]:
    """Every :class:`Estimate` inside a result (dataclasses, mappings, sequences), flattened to
    ``{path, name, value, low, high, level, method, n, unit, n_rows, note}`` in field order.

    Example:
        >>> est = collect_estimates(
        ...     {"pass1": Estimate("pass@1", 0.5, Interval(0.3, 0.7, 0.95, "t"), 10)})
        >>> est[0]["name"], est[0]["low"], est[0]["n"]
        ('pass@1', 0.3, 10)
    """
    out: list[EstimateRecord] = []
    if isinstance(obj, Estimate):
        iv = obj.interval
        out.append({"path": path, "name": obj.name, "value": finite_or_none(obj.value),
                    "low": finite_or_none(iv.low) if iv else None,
                    "high": finite_or_none(iv.high) if iv else None,
                    "level": iv.level if iv else None, "method": iv.method if iv else None,
                    "n": obj.n, "unit": obj.unit, "n_rows": obj.n_rows, "note": obj.note})
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            out += collect_estimates(getattr(obj, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            out += collect_estimates(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out += collect_estimates(v, f"{path}[{i}]")
    return out


def finite_or_none(x: Any) -> float | None:
    """``float(x)`` when it is a finite number, else None (JSON has no NaN)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def to_plain(obj: object) -> Any:
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
    """Mixin for frozen result dataclasses: ``to_dict()``, ``to_frame()``, one-line ``str()``,
    ``report()``, and the headline estimate at ``.estimate`` (its number at ``.value``).

    Subclasses define ``__str__`` (every estimate with interval and n on one line) and may
    override ``report()`` (multi-line, where warnings live). ``str()`` ends with
    "(N warnings: report() shows them)" when there are warnings, so a printed result never hides
    them. The headline is the Estimate field named by ``_headline_field``, or what
    ``_headline()`` builds.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Rate(Result):
        ...     rate: Estimate
        ...     warnings: tuple[str, ...] = ()
        ...     _headline_field = "rate"
        ...     def __str__(self) -> str:
        ...         return str(self.rate)
        >>> r = Rate(Estimate("rate", 0.25, None, 8), ("only 8 tasks",))
        >>> print(r)
        rate 0.250 (8 tasks) (1 warning: report() shows it)
        >>> r.estimate.value, r.value, r.to_frame()["value"].tolist()
        (0.25, 0.25, [0.25])
    """

    #: name of the field holding the headline :class:`Estimate` (None: ``_headline`` builds it)
    _headline_field: str | None = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__str__")
        if own is not None and not getattr(own, "_with_warnings", False):
            # each subclass's own __str__ is kept as _line and wrapped once, at class creation
            cls._line = own  # type: ignore[method-assign]  # replaced once, at class creation

            def __str__(self: Result) -> str:
                return self._line() + _warnings_suffix(self)

            __str__._with_warnings = True  # type: ignore[attr-defined]  # a marker attribute
            __str__.__doc__ = own.__doc__
            cls.__str__ = __str__  # type: ignore[method-assign, assignment]  # wrapped, as above

    def _line(self) -> str:
        """The one-line form without the warnings count (what ``report()`` starts with)."""
        return object.__str__(self)

    def _headline(self) -> Estimate:
        name = type(self)._headline_field
        if name is None:
            raise NotImplementedError(f"{type(self).__name__} names no headline estimate")
        return getattr(self, name)

    @property
    def estimate(self) -> Estimate:
        """The headline :class:`Estimate` (value, interval, n) of this result."""
        return self._headline()

    @property
    def value(self) -> float:
        """The headline number, ``estimate.value``."""
        return self.estimate.value

    def to_dict(self) -> dict[str, object]:
        return {f.name: to_plain(getattr(self, f.name))
                for f in dataclasses.fields(self)}  # type: ignore[arg-type]  # on a dataclass

    def to_frame(self) -> pd.DataFrame:
        """Every estimate in the result as a pandas DataFrame, one row each: ``path`` (where it
        sits in the result), ``name``, ``value``, ``low``, ``high``, ``level``, ``method``,
        ``n``, ``unit``, ``n_rows``, ``note``. A result without Estimate fields gives its
        headline."""
        import pandas as pd

        rows = collect_estimates(self)
        if not rows:
            rows = collect_estimates({"estimate": self.estimate})
        return pd.DataFrame.from_records(rows, columns=list(_FRAME_COLUMNS))

    def report(self) -> str:
        lines = [self._line()]
        for w in getattr(self, "warnings", ()) or ():
            lines.append(f"warning: {w}")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return "```\n" + self.report() + "\n```"


_FRAME_COLUMNS = ("path", "name", "value", "low", "high", "level", "method", "n", "unit", "n_rows",
                  "note")


def _warnings_suffix(result: object) -> str:
    n = len(getattr(result, "warnings", ()) or ())
    if not n:
        return ""
    return (f" ({n} warning: report() shows it)" if n == 1
            else f" ({n} warnings: report() shows them)")


def line_of(result: object) -> str:
    """A result's one-line form without the warnings count (for documents that list the
    warnings themselves)."""
    line = getattr(result, "_line", None)
    return line() if callable(line) else str(result)
