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
from typing import Any, NotRequired, TypedDict

#: The verdict of a partial source's metrics when the gate refuses to compare a subset.
NOT_COMPARED = "not compared: partial night"

#: Why tasks are left out of a partial source's comparison.
PARTIAL_WHY = "the model gave no completion for some of their samples (gen_error)"

#: Why a source none of whose rows could be judged is partial (run.json ``nothing_judged``).
NOTHING_JUDGED_WHY = "no row could be judged (run.json nothing_judged)"


class PartialRecord(TypedDict):
    """A partial source's record (nightly.json ``sources[].partial``): failed samples, the tasks
    they hit, the tasks in all, the tasks left out, whether the rest was compared, and why."""

    samples: int
    tasks: int
    tasks_total: int
    left_out: list[str]
    compared: bool
    why: str
    #: run.json's ``nothing_judged`` reasons, ``[reason, count]``, when no row was judged
    nothing_judged: NotRequired[list[list[object]]]


def nothing_judged_record(unjudged: Mapping[str, Any], tasks: list[str]) -> PartialRecord:
    """The partial record of a source of which no row got a reward: every task left out and
    never compared (with no judged row there is no subset to compare, whatever
    ``nightly.allow_partial`` says); ``reasons`` as run.json's ``nothing_judged`` has them.

    Example:
        >>> r = nothing_judged_record({"rows": 4, "reasons": [["no_verdict", 4]]}, ["t1", "t0"])
        >>> r["left_out"], r["compared"], r["samples"]
        (['t0', 't1'], False, 4)
    """
    hit = sorted(set(tasks))
    return {"samples": int(unjudged["rows"]), "tasks": len(hit), "tasks_total": len(hit),
            "left_out": hit, "compared": False, "why": NOTHING_JUDGED_WHY,
            "nothing_judged": [list(r) for r in unjudged.get("reasons") or []]}


def partial_text(s: Mapping[str, Any]) -> str:
    """One sentence on a partial source: what failed and what the gate did about it."""
    p = s["partial"]
    if "nothing_judged" in p:
        why = "; ".join(f"{r} ({n})" for r, n in p["nothing_judged"]) or "no reward"
        return (f"{s['source']}: no row of {p['samples']} could be judged ({why}); not compared "
                "with the baseline: it has no judged row; fix the verifier and rerun the night")
    head = (f"{s['source']}: {p['samples']} sample(s) of {p['tasks']} of {p['tasks_total']} "
            f"task(s) failed ({p['why']})")
    if not p["compared"]:
        return (head + "; not compared with the baseline: the gate does not compare a subset "
                "(`nightly.allow_partial: true` compares the tasks answered in full)")
    shown = ", ".join(p["left_out"][:20]) + (" ..." if len(p["left_out"]) > 20 else "")
    return head + f"; compared on the other tasks (nightly.allow_partial); left out: {shown}"


__all__ = ["NOTHING_JUDGED_WHY", "NOT_COMPARED", "PARTIAL_WHY", "nothing_judged_record",
           "partial_text"]
