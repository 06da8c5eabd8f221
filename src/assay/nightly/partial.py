"""A partial night's words: what failed in a source and what the gate did about it.

Read by the gate (nightly.md), the flow's alert and the night's page; no heavy imports.

Example:
    >>> p = {"samples": 2, "tasks": 1, "tasks_total": 10, "left_out": ["t3"], "compared": True,
    ...      "why": PARTIAL_WHY}
    >>> partial_text({"source": "m", "partial": p}).split(";")[1]
    ' compared on the other tasks (nightly.allow_partial)'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The verdict of a partial source's metrics when the gate refuses to compare a subset.
NOT_COMPARED = "not compared: partial night"

#: Why tasks are left out of a partial source's comparison.
PARTIAL_WHY = "the model gave no completion for some of their samples (gen_error)"


def partial_text(s: Mapping[str, Any]) -> str:
    """One sentence on a partial source: what failed and what the gate did about it."""
    p = s["partial"]
    head = (f"{s['source']}: {p['samples']} sample(s) of {p['tasks']} of {p['tasks_total']} "
            f"task(s) failed ({p['why']})")
    if not p["compared"]:
        return (head + "; not compared with the baseline: the gate does not compare a subset "
                "(`nightly.allow_partial: true` compares the tasks answered in full)")
    shown = ", ".join(p["left_out"][:20]) + (" ..." if len(p["left_out"]) > 20 else "")
    return head + f"; compared on the other tasks (nightly.allow_partial); left out: {shown}"


__all__ = ["NOT_COMPARED", "PARTIAL_WHY", "partial_text"]
