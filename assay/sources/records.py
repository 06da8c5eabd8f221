"""Records into rows: read JSONL/Parquet records and map their fields onto the rows contract.

One reader for every source kind that holds prompts and completions as records.

Example:
    >>> r = rows_from_records([{"q": "2+2?", "a": "4", "s": 1}, {"q": "2+2?", "a": "5", "s": 0}],
    ...                       FieldMap(prompt="q", completion="a", reward="s"), where="demo")
    >>> len(r), r[1]["rollout_index"], r[1]["reward"]
    (2, 1, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from assay.errors import RowsError, RowsTypeError, SpecError
from assay.jsonl import iter_jsonl
from assay.rows import Rows, check_number
from assay.specbase import SpecModel


class FieldMap(SpecModel):
    """Which record fields hold the prompt, the completion, and the optional extras."""

    prompt: str = "prompt"
    completion: str = "completion"
    reference: str | None = None
    task_id: str | None = None
    reward: str | None = None


def read_records(path: str | Path, fmt: str) -> list[dict[str, Any]]:
    """Every record of a JSONL or Parquet file; a bad line is a SpecError naming file and line."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return [rec for _, rec in iter_jsonl(path, error=SpecError)]


def check_record(rec: Mapping[str, Any], fields: FieldMap, at: str, *, prompts_only: bool = False) -> None:
    """Raise SpecError naming ``at`` (file and record) and the field when one record cannot
    become a row: a missing or mistyped prompt/completion (no completion with ``prompts_only``),
    a missing reference or task id, a reward that is not a number in [0, 1] (None: unjudged)."""
    needed = (("prompt", fields.prompt),) if prompts_only else (
        ("prompt", fields.prompt), ("completion", fields.completion))
    for role, name in needed:
        if name not in rec or rec[name] is None:
            raise SpecError(f"{at}: field {name!r} (fields.{role}) is missing; the record has {sorted(rec)}")
    if not prompts_only and not isinstance(rec[fields.completion], str):
        raise SpecError(f"{at}: field {fields.completion!r} (fields.completion) must be a string, got "
                        f"{type(rec[fields.completion]).__name__} {rec[fields.completion]!r:.60}")
    if not isinstance(rec[fields.prompt], (str, list)):
        raise SpecError(f"{at}: field {fields.prompt!r} (fields.prompt) must be a string or a list of "
                        f"messages, got {type(rec[fields.prompt]).__name__}")
    if fields.reference is not None and fields.reference not in rec:
        raise SpecError(f"{at}: field {fields.reference!r} (fields.reference) is missing; "
                        f"the record has {sorted(rec)}")
    if fields.task_id is not None and rec.get(fields.task_id) is None:
        raise SpecError(f"{at}: field {fields.task_id!r} (fields.task_id) is missing; "
                        f"the record has {sorted(rec)}")
    if fields.reward is not None:
        if fields.reward not in rec:
            raise SpecError(f"{at}: field {fields.reward!r} (fields.reward) is missing; "
                            f"the record has {sorted(rec)}")
        try:
            check_number(rec[fields.reward], f"{at}: field {fields.reward!r} (fields.reward)")
        except (RowsError, RowsTypeError) as e:
            raise SpecError(str(e)) from None


def rows_from_records(records: Sequence[Mapping[str, Any]], fields: FieldMap, *, where: str,
                      prompts_only: bool = False) -> Rows:
    """Rows from prompt/completion records through a field mapping (one completion per record;
    records with the same task id or prompt group into one task, and must agree on prompt and
    reference). Errors name ``where`` (the file), the record index and the field.
    ``prompts_only``: the records hold prompts for the generate stage; each row's completion is
    left empty until it runs."""
    from assay.builder import rows

    prompts, completions, refs, tids, rewards = [], [], [], [], []
    for i, rec in enumerate(records):
        check_record(rec, fields, f"{where} record {i}", prompts_only=prompts_only)
        prompts.append(rec[fields.prompt])
        completions.append("" if prompts_only else rec[fields.completion])
        if fields.reference is not None:
            refs.append(rec[fields.reference])
        if fields.task_id is not None:
            tids.append(str(rec[fields.task_id]))
        if fields.reward is not None:
            rewards.append(rec[fields.reward])
    if not prompts:
        raise SpecError(f"{where}: no records")
    return rows(prompts, completions, rewards if fields.reward is not None else None,
                references=refs if fields.reference is not None else None,
                task_ids=tids if fields.task_id is not None else None,
                record_names=lambda i: f"{where} record {i}")


def check_records(path: str | Path, fmt: str, fields: FieldMap, *, limit: int = 20,
                  prompts_only: bool = False) -> list[str]:
    """Every problem ``rows_from_records`` would raise on a file, without building rows:
    ``record N: field ...`` strings (JSONL lines that do not parse, missing or mistyped fields,
    a reward that is not a number in [0, 1], one task id with two prompts or references, an
    empty file). Streams the file; at most ``limit`` problems, then a count of the rest.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.jsonl"
        >>> _ = p.write_text('{"prompt": "a", "completion": "x", "r": "high"}\\n{"prompt": "b"}\\nnot json\\n')
        >>> for line in check_records(p, "jsonl", FieldMap(reward="r")): print(line)
        record 0 (line 1): field 'r' (fields.reward): reward must be a number, got str 'high'
        record 1 (line 2): field 'completion' (fields.completion) is missing; the record has ['prompt']
        line 3: not valid JSON (Expecting value); one object per line
    """
    import json

    problems: list[str] = []
    more = 0
    first: dict[str, tuple[str, Any, Any]] = {}

    def add(msg: str) -> None:
        nonlocal more
        if len(problems) < limit:
            problems.append(msg)
        else:
            more += 1

    def records() -> Any:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=65536):
                for rec in batch.to_pylist():
                    yield None, rec, None
            return
        with open(path, encoding="utf-8") as fh:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    yield no, None, f"line {no}: not valid JSON ({e.msg}); one object per line"
                    continue
                if not isinstance(obj, dict):
                    yield no, None, f"line {no}: each line must be a JSON object, got {type(obj).__name__}"
                    continue
                yield no, obj, None

    i = -1
    for no, rec, bad in records():
        if bad is not None:
            add(bad)
            continue
        i += 1
        at = f"record {i}" + (f" (line {no})" if no is not None else "")
        try:
            check_record(rec, fields, at, prompts_only=prompts_only)
        except SpecError as e:
            add(str(e))
            continue
        tid = str(rec[fields.task_id]) if fields.task_id is not None else None
        if tid is None:
            continue  # the default task id hashes the prompt: records agree on it by construction
        prompt = rec[fields.prompt]
        ref = rec.get(fields.reference) if fields.reference is not None else None
        seen = first.setdefault(tid, (at, prompt, ref))
        if seen[0] != at:
            for field, a, b in (("prompt", seen[1], prompt), ("reference", seen[2], ref)):
                if a != b:
                    add(f"{seen[0]} and {at} have the same task id {tid!r} but a different {field} "
                        f"({a!r:.60} vs {b!r:.60}); give them different task ids, or make the {field}s agree")
                    break
    if i < 0 and not problems:
        add("no records: the file is empty")
    if more:
        problems.append(f"... and {more} more problem{'s' * (more != 1)}")
    return problems
