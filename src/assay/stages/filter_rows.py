"""The filter-rows stage: a source's row steps (slice, sample, where) replayed as data.

``slice`` and ``sample`` act on tasks (a task keeps all its completions); ``where`` on row fields.

Example:
    >>> import assay
    >>> r = assay.rows(["a", "b", "c"], [["x", "y"], ["z"], ["w"]], [[1, 0], [1], [0]])
    >>> len(apply_row_steps(r, [{"op": "slice", "start": 1, "stop": 3}]))
    2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assay.errors import DataError, SpecError
from assay.rows import Rows, as_table
from assay.spec import steps_before_grading
from assay.stages.cache import StageResult, Stored, cached_stage, load_rows
from assay.stages.declare import RunContext, Stage, declare
from assay.stages.seams import Computed
from assay.steps import ROW_OPS, WHERE_OPS, validate_steps

STAGE = "filter-rows"  # declared at the end


def _task_order(table: pa.Table) -> list[str]:
    ids = table.column("task_id").to_pylist()
    return list(dict.fromkeys(ids))


def _row_field(table: pa.Table, field: str, where: str) -> list[Any]:
    from assay.errors import RowsError
    from assay.rowfields import field_values

    try:
        return field_values(table, field, where=f"{where}.field")
    except RowsError as e:
        raise SpecError(str(e)) from None


def apply_row_steps(
    rows: Rows, steps: Sequence[Mapping[str, Any]], *, where: str = "steps"
) -> Rows:
    """Replay row filters recorded as data. ``slice`` and ``sample`` act on tasks in order of
    first appearance (a task keeps all its completions); ``where`` keeps rows whose field
    compares true.

    Example:
        >>> import assay
        >>> r = assay.rows(["a", "b", "c"], [["x", "y"], ["z"], ["w"]], [[1, 0], [1], [0]])
        >>> len(apply_row_steps(r, [{"op": "slice", "start": 0, "stop": 2}]))
        3
        >>> len(apply_row_steps(r, [{"op": "where", "field": "reward", "cmp": "==", "value": 1.0}]))
        2
    """
    try:  # the check `assay validate` ran on the spec's steps, so run and validate agree
        checked = validate_steps(steps, ROW_OPS, used_by="a source's rows")
    except DataError as e:
        raise SpecError(f"{where}{str(e)[len('steps'):]}") from None
    table = as_table(rows, require=())
    for i, s in enumerate(checked):
        at = f"{where}[{i}]"
        op = s["op"]
        if op in ("slice", "sample"):
            tasks = _task_order(table)
            if op == "slice":
                keep = tasks[slice(s["start"], s.get("stop"), s.get("step"))]
            else:
                if s["n"] > len(tasks):
                    raise SpecError(f"{at}.n = {s['n']} but only {len(tasks)} tasks remain; "
                                    "lower n or drop the step")
                rng = np.random.default_rng(s["seed"])
                idx = np.sort(rng.choice(len(tasks), size=s["n"], replace=False))
                keep = [tasks[j] for j in idx]
            mask = pc.is_in(table.column("task_id"), value_set=pa.array(keep, type=pa.string()))
        else:
            fn = WHERE_OPS[s["cmp"]]
            vals = _row_field(table, s["field"], at)
            try:
                mask = pa.array([v is not None and bool(fn(v, s["value"])) for v in vals])
            except TypeError as e:
                raise SpecError(f"{at}: cannot compare field {s['field']!r} with "
                                f"{s['value']!r} ({e})") from None
        table = table.filter(mask)
    return Rows(table)


def run_filter_rows(ctx: RunContext, built: StageResult) -> StageResult:
    """Apply source ``ctx.source``'s steps to its built rows (cached on the rows and the
    steps)."""
    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    source = spec.source(source_name)
    index = [s.name for s in spec.sources].index(source_name)
    early = steps_before_grading(source, index)
    if early:  # the same words as `assay validate`, not "its steps keep no rows"
        raise SpecError(early[0])

    def compute() -> Computed:
        if not source.steps:  # the rows as built: named again, not decoded and stored again
            return ({"rows": Stored(built.outputs["rows"], built.checksums["rows"])},
                    {"rows": built.summary["rows"]})
        r = apply_row_steps(load_rows(store, built), source.steps, where=f"sources[{index}].steps")
        if len(r) == 0:
            raise SpecError(f"source {source_name!r}: its steps keep no rows; loosen them")
        return {"rows": r}, {"rows": len(r)}

    return cached_stage(store, STAGE, inputs=[built.checksums["rows"]],
                        params=list(source.steps), compute=compute, label=source_name,
                        progress=ctx.progress)


declare(Stage(STAGE, 1, "source", run_filter_rows, reads=("build-rows",)))
