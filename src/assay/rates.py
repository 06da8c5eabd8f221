"""How fast something went, as a person reads it: ``1,234 rows/s``, ``2.5 rows/s``, or, below
one a second, the time per unit (``3.59 s/row``), never ``0 rows/s``.

Example:
    >>> rate_text(32, 114.8), rate_text(15, 6.0), rate_text(12_000, 4.0)
    ('3.59 s/row', '2.5 rows/s', '3,000 rows/s')
"""

from __future__ import annotations


def rate_text(n: float, seconds: float, unit: str = "row", units: str | None = None) -> str:
    """``n`` units done in ``seconds``: per second from one a second up (three significant
    digits below 100, whole numbers above), else seconds per unit; ``units``: the plural
    (default ``unit + "s"``).

    Example:
        >>> rate_text(1, 0.0), rate_text(0, 5.0), rate_text(9, 10.0), rate_text(1, 3600, "pair")
        ('inf rows/s', '0 rows/s', '1.11 s/row', '3,600 s/pair')
    """
    plural = units or f"{unit}s"
    if seconds <= 0:
        return f"inf {plural}/s" if n > 0 else f"0 {plural}/s"
    if n <= 0:  # nothing done: no time per unit to give
        return f"0 {plural}/s"
    rate = n / seconds
    if rate >= 100:
        return f"{rate:,.0f} {plural}/s"
    if rate >= 1:
        return f"{rate:.3g} {plural}/s"
    per = seconds / n  # below one a second: "0 rows/s" would say nothing moved
    return f"{per:,.0f} s/{unit}" if per >= 100 else f"{per:.3g} s/{unit}"
