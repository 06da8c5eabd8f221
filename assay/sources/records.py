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

from assay.errors import SpecError
from assay.jsonl import iter_jsonl
from assay.rows import Rows
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


def rows_from_records(records: Sequence[Mapping[str, Any]], fields: FieldMap, *, where: str,
                      prompts_only: bool = False) -> Rows:
    """Rows from prompt/completion records through a field mapping (one completion per record;
    records with the same task id or prompt group into one task). ``prompts_only``: the records
    hold prompts for the generate stage; each row's completion is left empty until it runs."""
    from assay.builder import rows

    prompts, completions, refs, tids, rewards = [], [], [], [], []
    needed = (("prompt", fields.prompt),) if prompts_only else (
        ("prompt", fields.prompt), ("completion", fields.completion))
    for i, rec in enumerate(records):
        for role, name in needed:
            if name not in rec or rec[name] is None:
                raise SpecError(f"{where} record {i}: field {name!r} (fields.{role}) is missing; "
                                f"the record has {sorted(rec)}")
        prompts.append(rec[fields.prompt])
        completions.append("" if prompts_only else rec[fields.completion])
        if fields.reference is not None:
            if fields.reference not in rec:
                raise SpecError(f"{where} record {i}: reference field {fields.reference!r} is missing")
            refs.append(rec[fields.reference])
        if fields.task_id is not None:
            if rec.get(fields.task_id) is None:
                raise SpecError(f"{where} record {i}: task id field {fields.task_id!r} is missing")
            tids.append(str(rec[fields.task_id]))
        if fields.reward is not None:
            if fields.reward not in rec:
                raise SpecError(f"{where} record {i}: reward field {fields.reward!r} is missing")
            rewards.append(rec[fields.reward])
    if not prompts:
        raise SpecError(f"{where}: no records")
    return rows(prompts, completions, rewards if fields.reward is not None else None,
               references=refs if fields.reference is not None else None,
               task_ids=tids if fields.task_id is not None else None)
