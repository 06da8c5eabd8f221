"""Why graded rows stayed unjudged: counts per reason, and the stop when one error took most rows.

A verifier that raises the same error on most rows is a broken verifier, not a finding: the
grade stage says so itself (:func:`check_shard`) rather than a later stage finding no rewards.

Example:
    >>> rows = [{"reward": None, "judge_status": "error", "reason": "TypeError: bad"}] * 3 + [
    ...         {"reward": 1.0, "judge_status": "ok", "reason": None}]
    >>> unjudged_summary(rows)
    {'rows': 3, 'reasons': [['error: TypeError: bad', 3]]}
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from assay.errors import VerifierError

if TYPE_CHECKING:
    from assay.rows import RowsLike

#: A shard stops when more than this share of its rows raised one and the same error.
MOST = 0.5
#: Reasons shown per source in the report.
TOP = 3


def _records(rows: RowsLike, unjudged: bool = False) -> list[Mapping[str, object]]:
    """The rows as dicts of the columns read here; ``unjudged``: only those without a reward,
    found in Arrow first (a study's every row as Python dicts was hundreds of MB)."""
    if hasattr(rows, "to_arrow"):
        import pyarrow.compute as pc

        t = rows.to_arrow()
        cols = [c for c in ("reward", "judge_status", "reason", "task_id", "rollout_index")
                if c in t.column_names]
        t = t.select(cols)
        if unjudged and "reward" in cols:
            t = t.filter(pc.is_null(t.column("reward")))
        return t.to_pylist()
    return list(rows)


def _why(r: Mapping[str, object]) -> str:
    reason = " ".join(str(r.get("reason") or "").split())
    return f"{r.get('judge_status')}: {reason[:160]}" if reason else str(r.get("judge_status"))


def unjudged_summary(rows: RowsLike, top: int = TOP) -> dict[str, object]:
    """``{"rows": n unjudged, "reasons": [[status: reason, count], ...]}`` (the ``top`` most
    frequent, ties by text), over rows without a reward."""
    c = Counter(_why(r) for r in _records(rows, unjudged=True) if r.get("reward") is None)
    ranked = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {"rows": sum(c.values()), "reasons": [[k, v] for k, v in ranked]}


_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b")


def _error_kind(reason: object) -> str:
    """What groups failures as one error: the exception type when the reason names one (the
    messages of one bug often differ per row), else the whole reason."""
    m = _EXC.match(str(reason or ""))
    return m.group(1) if m else str(reason)


def check_shard(rows: RowsLike, verifier: str, where: str, offset: int = 0) -> None:
    """Raise :class:`VerifierError` when more than half of ``rows`` failed with one error
    (status ``error``, the same exception type or reason): the verifier, the count, the
    error and the first row it hit (``offset``: the shard's first row in its source).

    Example:
        >>> rows = [{"judge_status": "error", "reason": f"KeyError: 'x{i}'", "task_id": f"t{i}",
        ...          "rollout_index": 0} for i in range(3)]
        >>> try:
        ...     check_shard(rows, "my:grade", "grade[m] shard 1/1")
        ... except VerifierError as e:
        ...     print(str(e).split(": ", 1)[1][:65])
        verifier my:grade failed on 3 of 3 rows with one error (KeyError)
    """
    recs = list(_records(rows))
    errs = Counter(_error_kind(r.get("reason")) for r in recs if r.get("judge_status") == "error")
    if not errs:
        return
    kind, n = max(errs.items(), key=lambda kv: kv[1])
    if n <= MOST * len(recs):
        return
    i, first = next((i, r) for i, r in enumerate(recs) if r.get("judge_status") == "error"
                    and _error_kind(r.get("reason")) == kind)
    raise VerifierError(
        f"{where}: verifier {verifier} failed on {n} of {len(recs)} rows with one error "
        f"({kind}); the first, row {offset + i} (task {first.get('task_id')}, rollout "
        f"{first.get('rollout_index')}): {first.get('reason')}; fix the verifier and rerun (the "
        "failed shard is not cached)")


def failed_samples(rows: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per source with failed samples (``gen_error`` rows: the model gave no completion),
    ``{"samples": n, "tasks": tasks hit}``; sources without any are left out. What run.json
    records and ``assay run`` turns into ``EXIT_PARTIAL``.

    Example:
        >>> failed_samples({"m": [{"task_id": "a", "judge_status": "gen_error"},
        ...                       {"task_id": "a", "judge_status": "ok"}], "n": []})
        {'m': {'samples': 1, 'tasks': 1}}
    """
    out = {}
    for name, r in rows.items():
        recs = list(r) if not hasattr(r, "to_arrow") else []
        if hasattr(r, "to_arrow"):
            t = r.to_arrow()
            cols = [c for c in ("task_id", "judge_status") if c in t.column_names]
            recs = t.select(cols).to_pylist()
        bad = [x for x in recs if x.get("judge_status") == "gen_error"]
        if bad:
            out[name] = {"samples": len(bad), "tasks": len({x.get("task_id") for x in bad})}
    return out
