"""Which estimate a measurement document headlines: the one number per source that report.md's
pass-rate figure and the comparison page show, declared per measurement kind in one table.

Example:
    >>> doc = {"kind": "pass_at", "estimates": [{"name": "pass@1", "value": 0.5},
    ...                                         {"name": "pass@4", "value": 0.8}]}
    >>> headline_estimate(doc)
    {'name': 'pass@1', 'value': 0.5}
    >>> headline_estimate({"kind": "eval_variance", "estimates": [{"name": "pass@1"}]}) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping

#: measurement kind -> the start of the name of the estimate it headlines (its first such
#: estimate); a kind not listed headlines nothing
HEADLINES: dict[str, str] = {"pass_at": "pass@1"}


def headline_estimate(doc: Mapping[str, object]) -> Mapping[str, object] | None:
    """The estimate a measurement document (report.json's ``measurements`` entry) headlines,
    as the document states it (never recomputed), or None."""
    prefix = HEADLINES.get(str(doc.get("kind")))
    estimates = doc.get("estimates")
    if prefix is None or not isinstance(estimates, list):
        return None
    return next((e for e in estimates if isinstance(e, Mapping)
                 and str(e.get("name", "")).startswith(prefix)), None)
