"""``rows()``: Rows built from prompts and completions, graded when given a verifier or callable.

Sits above :mod:`assay.rows` (the contract) and :mod:`assay.grading` (the judge loop), so both of
those import one way: grading reads rows, and this builder uses both.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from assay.errors import RowsError, RowsTypeError
from assay.grading import grade
from assay.rows import (
    COLUMNS,
    ROW_SCHEMA,
    ROWS_SCHEMA_VERSION,
    Rows,
    check_markers,
    check_number,
    is_sequence,
    markers_array,
    messages_of,
    task_id_for,
    to_json,
)

__all__ = ["TaskBook", "rows"]


def _build_table(cols: Mapping[str, list[Any]]) -> pa.Table:
    arrays = []
    for f in ROW_SCHEMA:
        if f.name == "markers":
            arrays.append(markers_array(cols["markers"]))
        else:
            arrays.append(pa.array(cols[f.name], type=f.type))
    return pa.Table.from_arrays(arrays, schema=ROW_SCHEMA)


def _flatten_completions(prompts_n: int, completions: Any) -> list[list[str]]:
    if not is_sequence(completions):
        raise RowsTypeError("completions: expected a sequence with one entry per prompt, got "
                            f"{type(completions).__name__}")
    if len(completions) != prompts_n:
        raise RowsError(f"completions: {len(completions)} entries for {prompts_n} prompts; give "
                        "one entry (a string or a list of k strings) per prompt")
    out = []
    for i, c in enumerate(completions):
        if isinstance(c, str):
            out.append([c])
            continue
        if c is None:
            raise RowsTypeError(f"completions[{i}] is None; every completion must be a string "
                                "(never the text 'None')")
        if not is_sequence(c):
            raise RowsTypeError(f"completions[{i}]: expected a string or a sequence of strings, "
                                f"got {type(c).__name__}")
        if len(c) == 0:
            raise RowsError(f"completions[{i}] is empty: prompt {i} would contribute no row; drop "
                            "the prompt or give it a completion")
        group = []
        for j, s in enumerate(c):
            if not isinstance(s, str):
                what = "None" if s is None else type(s).__name__
                raise RowsTypeError(f"completions[{i}][{j}] (prompt {i}, completion {j}) is "
                                    f"{what}, not a string")
            group.append(s)
        out.append(group)
    return out


def _per_completion(values: Any, shape: list[int], argument: str,
                    is_leaf: Callable[[object], bool]) -> list[list[Any]]:
    """Values nested like completions, or flat (one per completion), as nested lists."""
    total = sum(shape)
    if not is_sequence(values):
        raise RowsTypeError(f"{argument}: expected a sequence nested like completions, or flat, "
                            f"got {type(values).__name__}")
    values = list(values)
    nested = len(values) == len(shape) and any(not is_leaf(v) for v in values)
    if nested:
        out = []
        for i, (v, k) in enumerate(zip(values, shape)):
            if is_leaf(v):
                if k != 1:
                    raise RowsError(f"{argument}[{i}]: prompt {i} has {k} completions but one "
                                    f"value; give a list of {k}")
                out.append([v])
            else:
                v = list(v)
                if len(v) != k:
                    raise RowsError(f"{argument}[{i}]: {len(v)} values for prompt {i}'s {k} "
                                    "completions")
                out.append(v)
        return out
    if len(values) != total:
        raise RowsError(
            f"{argument}: {len(values)} values for {len(shape)} prompts with {total} completions; "
            "give one per completion (flat) or nest them like completions"
        )
    out, pos = [], 0
    for k in shape:
        out.append(values[pos:pos + k])
        pos += k
    return out


def _check_same_task(tid: str, a: tuple[str, list[dict[str, str]], str | None],
                     b: tuple[str, list[dict[str, str]], str | None]) -> None:
    """Two prompts with one task id are one task only when prompt and reference agree: else one
    task would be graded against two golds (or two questions), and no estimate says so. ``a``
    and ``b``: (how errors name the prompt, its messages, its privileged JSON)."""
    (name_i, msgs_i, priv_i), (name_j, msgs_j, priv_j) = a, b
    vi: object
    vj: object
    if msgs_i != msgs_j:
        field, vi, vj = "prompt", msgs_i[-1]["content"], msgs_j[-1]["content"]
        if vi == vj:  # the conversations differ before the last turn
            vi, vj = msgs_i, msgs_j
    elif priv_i != priv_j:
        # references are given for every prompt or for none: two unequal ones are both JSON
        assert priv_i is not None and priv_j is not None
        field = "reference"
        vi, vj = json.loads(priv_i)["reference"], json.loads(priv_j)["reference"]
    else:
        return
    raise RowsError(
        f"{name_i} and {name_j} have the same task id {tid!r} but a different {field} "
        f"({vi!r:.80} vs {vj!r:.80}); one task has one {field}: give them different task ids, "
        f"or make the {field}s agree"
    )


@dataclasses.dataclass
class TaskBook:
    """What :func:`rows` knows of the tasks it has seen: each task's rollouts so far and its
    first prompt. Passing one book to successive calls builds rows in batches (a big file a
    block of records at a time) numbered and checked as one call over all of them would.

    The tasks of the current call keep their first prompt whole (``first``); those of earlier
    calls only its name and a digest of its conversation and reference (``sealed``): a task's
    prompt as Python objects was ~1 KB a task, ~1 GB held by a 1M-task file's build (issue 50).
    A later prompt that differs from a sealed one raises :class:`TaskConflict`, which names both
    records but not how they differ (a caller that can re-read the file words it exactly)."""

    counters: dict[str, int] = dataclasses.field(default_factory=dict)
    first: dict[str, tuple[str, list[dict[str, str]], str | None]] = dataclasses.field(
        default_factory=dict)
    sealed: dict[str, tuple[str, bytes]] = dataclasses.field(default_factory=dict)

    def seal(self) -> None:
        """Keep only the name and digest of the tasks seen so far (the call that saw them
        ended)."""
        for tid, (name, msgs, priv) in self.first.items():
            self.sealed[tid] = (name, _task_digest(msgs, priv))
        self.first.clear()


class TaskConflict(RowsError):
    """A task seen in an earlier batch came back with another prompt or reference."""


def _task_digest(msgs: list[dict[str, str]], priv: str | None) -> bytes:
    import hashlib

    text = json.dumps([msgs, priv], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _meta_json(value: object, where: str) -> str | None:
    """One row's ``meta`` as JSON text: a dict of JSON data, or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise RowsTypeError(f"{where}: meta must be a dict of the record's fields, got "
                            f"{type(value).__name__}")
    return to_json(dict(value), where)


def _is_number_leaf(v: object) -> bool:
    return v is None or isinstance(v, (numbers.Real, np.bool_, bool)) or isinstance(v, str)


def rows(
    prompts: Sequence[str | Sequence[Mapping[str, str]]],
    completions: Sequence[str | Sequence[str]],
    reward: object = None,
    *,
    references: Sequence[object] | None = None,
    task_ids: Sequence[str] | None = None,
    markers: Sequence[object] | None = None,
    meta: Sequence[object] | None = None,
    workers: int | None = None,
    record_names: Callable[[int], str] | None = None,
    book: TaskBook | None = None,
) -> Rows:
    """Build rows from prompts and completions, optionally grading them.

    Args:
        prompts: strings, or message lists ``[{"role", "content"}]``; the row's ``prompt`` is
            the last user turn and ``messages`` keeps the whole list.
        completions: one string per prompt, or a sequence of k strings per prompt.
        reward: ``None`` (unjudged); a verifier (``check(candidate, reference, row)``); a
            callable ``(prompt, completion)``, ``(prompt, completion, reference)`` or
            ``(row) -> verdict``; or numbers in [0, 1] nested like completions or flat.
        references: the gold answer per prompt, stored under ``privileged.reference``.
        task_ids: a name per prompt; default: a hash of the whole conversation, so the same
            prompt twice is one task with rollouts numbered continuously.
        markers: ``{name: number}`` per completion, nested like completions or flat.
        meta: a dict of the source record's own fields (``{"subject": "algebra"}``) per
            completion, nested like completions or flat; read by steps (``meta.subject``) and
            ``by:``, never exported for training.
        workers: worker processes for grading with a verifier (see :func:`assay.grade`).
        record_names: how errors name prompt ``i`` (default ``prompts[i]``); a file source
            passes its file and record index.
        book: the tasks of earlier batches (:class:`TaskBook`): rollouts continue their
            numbering and a task's prompt is checked against its first batch's.

    Prompts that share a task id (given, or the same conversation) must have the same prompt
    and reference: a conflict raises, naming both prompts and the field that differs.

    Returns:
        :class:`Rows`.

    Example:
        >>> r = rows(["2+3?"], [["5", "4"]], lambda p, c, ref: c == ref, references=["5"])
        >>> [x["reward"] for x in r], r[0]["judge_status"]
        ([1.0, 0.0], 'ok')
    """
    if isinstance(prompts, (str, bytes)) or not is_sequence(prompts):
        raise RowsTypeError("prompts: expected a sequence of prompts, got "
                            f"{type(prompts).__name__}")
    prompts = list(prompts)
    n = len(prompts)
    name = record_names or (lambda i: f"prompts[{i}]")
    parsed = [messages_of(p, i) for i, p in enumerate(prompts)]
    groups = _flatten_completions(n, completions)
    shape = [len(g) for g in groups]
    if references is not None:
        if not is_sequence(references) or len(references) != n:
            got = len(references) if is_sequence(references) else type(references).__name__
            raise RowsError(f"references: expected one reference per prompt ({n}), got {got}")
        references = list(references)
    if task_ids is not None:
        if not is_sequence(task_ids) or len(task_ids) != n:
            raise RowsError(f"task_ids: expected one task id per prompt ({n})")
        for i, t in enumerate(task_ids):
            if not isinstance(t, str) or not t:
                raise RowsTypeError(f"task_ids[{i}] must be a non-empty string, got {t!r:.60}")
    mk = None
    if markers is not None:
        mk = _per_completion(markers, shape, "markers",
                             lambda v: v is None or isinstance(v, Mapping))
    md = None
    if meta is not None:
        md = _per_completion(meta, shape, "meta",
                             lambda v: v is None or isinstance(v, (Mapping, str, bytes)))
    numbers_given = reward is not None and is_sequence(reward) and not callable(reward)
    rw = None
    if numbers_given:
        rw = _per_completion(reward, shape, "reward", _is_number_leaf)
    elif reward is not None and not (callable(reward) or callable(getattr(reward, "check", None))):
        raise RowsTypeError("reward: expected a verifier, a callable, or numbers; got "
                            f"{type(reward).__name__}")

    cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    book = book if book is not None else TaskBook()
    counters, first = book.counters, book.first
    for i, ((msgs, last_user), group) in enumerate(zip(parsed, groups)):
        tid = task_ids[i] if task_ids is not None else task_id_for(msgs)
        priv = (None if references is None
                else to_json({"reference": references[i]}, f"references[{i}]"))
        seen = first.get(tid)
        if seen is not None:
            _check_same_task(tid, seen, (name(i), msgs, priv))
        elif tid in book.sealed:
            name_0, digest = book.sealed[tid]
            if digest != _task_digest(msgs, priv):
                raise TaskConflict(
                    f"{name_0} and {name(i)} have the same task id {tid!r} but a different "
                    "prompt or reference; one task has one prompt and one reference: give them "
                    "different task ids, or make them agree")
        else:
            first[tid] = (name(i), msgs, priv)
        for j, text in enumerate(group):
            where = f"prompt {i}, completion {j}" if record_names is None else record_names(i)
            k = counters.get(tid, 0)
            counters[tid] = k + 1
            cols["task_id"].append(tid)
            cols["prompt"].append(last_user)
            cols["final_text"].append(text)
            cols["messages"].append(msgs)
            cols["rollout_index"].append(k)
            cols["privileged"].append(priv)
            cols["markers"].append({} if mk is None
                                   else check_markers(mk[i][j], f"markers ({where})"))
            if rw is not None:
                r = check_number(rw[i][j], f"reward ({where})")
                cols["reward"].append(r)
                cols["judge_name"].append("given" if r is not None else None)
                cols["judge_status"].append("given" if r is not None else "unjudged")
            else:
                cols["reward"].append(None)
                cols["judge_name"].append(None)
                cols["judge_status"].append("unjudged")
            cols["reason"].append(None)
            cols["judge_meta"].append(None)
            cols["meta"].append(None if md is None else _meta_json(md[i][j], f"meta ({where})"))
            cols["schema_version"].append(ROWS_SCHEMA_VERSION)
    out = Rows(_build_table(cols))
    if reward is not None and not numbers_given:
        out = grade(out, reward, workers=workers, argument="reward")
    return out
