"""The direction of every metric assay reports: whether a rise is better, worse, or neither.

pass@1 and scores rise when the model improves; a rise in truncation, errors, refusals or
contamination is worse; token counts and lengths have no direction (a change is only a change).

Example:
    >>> direction("pass@1"), direction("marker:truncated"), direction("marker:refusal_rate")
    ('higher', 'lower', 'lower')
    >>> direction("marker:completion_tokens"), direction("marker:acc_norm")
    (None, 'higher')
    >>> direction("marker:completion_tokens", lower_is_better=["completion_tokens"])
    'lower'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

Direction = Literal["higher", "lower"] | None

#: Markers assay writes where a rise is worse, and what each counts.
LOWER: dict[str, str] = {
    "truncated": "completions cut at max_tokens (finish_reason length)",
    "stop_trimmed": "completions whose stop string the server kept (assay cut it)",
    "contaminated": "tasks found in the training data",
}
#: Markers assay writes that have no direction: a change is reported, never better or worse.
NEUTRAL: dict[str, str] = {
    "prompt_tokens": "tokens of the prompt", "completion_tokens": "tokens of the completion",
    "len": "a length",
}
#: A marker whose name says it counts failures (a user's refusal or error rate): a rise is worse.
WORSE_NAME = re.compile(r"error|fail|refus|timeout|truncat|contamin|violat|unsafe|toxic")


def direction(metric: str, *, lower_is_better: Iterable[str] = (),
              higher_is_better: Iterable[str] = ()) -> Direction:
    """``"higher"`` (a rise is better), ``"lower"`` (a rise is worse) or None (no direction) of
    ``pass@1`` or ``marker:<name>``: what the user declared first, then assay's own markers, then
    the name (failure words mean lower), else higher."""
    name = metric.removeprefix("marker:")
    if metric == "pass@1":
        return "higher"
    if name in {m.removeprefix("marker:") for m in lower_is_better}:
        return "lower"
    if name in {m.removeprefix("marker:") for m in higher_is_better}:
        return "higher"
    if name in LOWER:
        return "lower"
    if name in NEUTRAL:
        return None
    return "lower" if WORSE_NAME.search(name) else "higher"
