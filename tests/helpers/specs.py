"""Study specs tests share: one source of given completions in ``a.jsonl`` graded by exact
match, measured by pass@k (the shape a dozen tests write out in full)."""

from __future__ import annotations


def exact_match_study(name: str, *, k: int, execution: str) -> str:
    """The spec's YAML; ``execution``: the inside of its ``execution:`` mapping.

    Example:
        >>> print(exact_match_study("x", k=2, execution="shard_rows: 8").splitlines()[-1])
        execution: {shard_rows: 8}
    """
    return f"""
name: {name}
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {{prompt: q, completion: c, reference: gold, task_id: id}}
    verifier: {{kind: exact_match}}
measure:
  pass_at: {{k: {k}}}
execution: {{{execution}}}
"""
