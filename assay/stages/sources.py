"""The row stages: build-rows (a source's rows), filter-rows (its steps), grade (per shard).

Each ``run_*`` is cached by :func:`assay.stages.cache.cached_stage`; a Prefect task wraps it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assay.errors import RowsError, RowsTypeError, SpecError
from assay.jsonl import iter_jsonl
from assay.rows import Rows, _check_number, as_table
from assay.stages.cache import StageResult, cached_stage, load_rows
from assay.store import Store


def _read_records(path: Any, fmt: str) -> list[dict[str, Any]]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return [rec for _, rec in iter_jsonl(path, error=SpecError)]


def rows_from_records(records: Sequence[Mapping[str, Any]], fields: Any, *, where: str) -> Rows:
    """Rows from prompt/completion records through a field mapping (one completion per record;
    records with the same task id or prompt group into one task).

    Example:
        >>> from assay.spec import FieldMap
        >>> r = rows_from_records([{"q": "2+2?", "a": "4", "s": 1}, {"q": "2+2?", "a": "5", "s": 0}],
        ...                       FieldMap(prompt="q", completion="a", reward="s"), where="demo")
        >>> len(r), r[1]["rollout_index"], r[1]["reward"]
        (2, 1, 0.0)
    """
    import assay

    prompts, completions, refs, tids, rewards = [], [], [], [], []
    for i, rec in enumerate(records):
        for role, name in (("prompt", fields.prompt), ("completion", fields.completion)):
            if name not in rec or rec[name] is None:
                raise SpecError(f"{where} record {i}: field {name!r} (fields.{role}) is missing; "
                                f"the record has {sorted(rec)}")
        if not isinstance(rec[fields.completion], str):
            raise SpecError(f"{where} record {i}: field {fields.completion!r} (fields.completion) must "
                            f"be a string, got {type(rec[fields.completion]).__name__} "
                            f"{rec[fields.completion]!r:.60}")
        if not isinstance(rec[fields.prompt], (str, list)):
            raise SpecError(f"{where} record {i}: field {fields.prompt!r} (fields.prompt) must be a "
                            f"string or a list of messages, got {type(rec[fields.prompt]).__name__}")
        prompts.append(rec[fields.prompt])
        completions.append(rec[fields.completion])
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
            try:
                _check_number(rec[fields.reward], f"{where} record {i}: field {fields.reward!r} (fields.reward)")
            except (RowsError, RowsTypeError) as e:
                raise SpecError(str(e)) from None
            rewards.append(rec[fields.reward])
    if not prompts:
        raise SpecError(f"{where}: no records")
    return assay.rows(prompts, completions, rewards if fields.reward is not None else None,
                      references=refs if fields.reference is not None else None,
                      task_ids=tids if fields.task_id is not None else None,
                      record_names=lambda i: f"{where} record {i}")


def build_source_rows(source: Any, spec: Any) -> Rows:
    """The ungraded (or given-score) rows of one source."""
    if source.kind == "humaneval":
        import assay
        from assay import benchmarks

        problems = benchmarks.humaneval()
        p = source.policy
        completions = benchmarks.seeded_code_policy(problems, k=p.k, seed=p.seed, skill=p.skill)
        return assay.rows(completions=completions, **problems.inputs())
    path = spec.resolve(source.path)
    fmt = source.format or path.suffix.lower().lstrip(".")
    return rows_from_records(_read_records(path, fmt), source.fields, where=f"source {source.name!r} ({path})")


def source_params(source: Any, spec: Any) -> dict[str, Any]:
    """What determines a source's rows: its definition minus name, steps and verifier, with
    the file's content hash in place of its path."""
    from assay.spec import file_checksum

    d = source.model_dump(mode="json", exclude={"name", "steps", "verifier"})
    if source.kind == "file":
        d["path"] = file_checksum(spec.resolve(source.path))
    else:  # the problems and the policy are code: their source is part of the key
        d["code"] = [code_checksum(m) for m in ("assay.benchmarks.problems", "assay.benchmarks.policy")]
    return d


def code_checksum(module: str) -> str:
    """Checksum of a module's source file: a stage whose behaviour lives in code we do not
    version by hand (a verifier, the seeded policy) recomputes when that code changes."""
    from assay.spec import file_checksum

    mod = importlib.import_module(module)
    return file_checksum(mod.__file__)


def run_build_rows(store: Store, spec: Any, source_name: str, *, progress: Any = None) -> StageResult:
    source = _source(spec, source_name)
    params = source_params(source, spec)

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        r = build_source_rows(source, spec)
        return {"rows": r}, {"rows": len(r)}

    return cached_stage(store, "build-rows", inputs=[], params=params, compute=compute,
                        label=f"{source_name}", progress=progress)


# ------------------------------------------------------------------------------- filter-rows


def _task_order(table: pa.Table) -> list[str]:
    ids = table.column("task_id").to_pylist()
    return list(dict.fromkeys(ids))


def _row_field(table: pa.Table, field: str, where: str) -> list[Any]:
    if field in table.column_names and field not in ("markers", "privileged", "judge_meta", "messages"):
        return table.column(field).to_pylist()
    head, _, tail = field.partition(".")
    if head == "markers" and tail:
        return [dict(m or []).get(tail) for m in table.column("markers").to_pylist()]
    if head == "privileged" and tail:
        return [None if v is None else json.loads(v).get(tail) for v in table.column("privileged").to_pylist()]
    raise SpecError(f"{where}.field {field!r}: rows have {list(table.column_names)} "
                    "(and markers.<name>, privileged.<key>)")


def apply_row_steps(rows: Rows, steps: Sequence[Mapping[str, Any]], *, where: str = "steps") -> Rows:
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
    from assay.data.view import WHERE_OPS

    table = as_table(rows, require=())
    for i, s in enumerate(steps):
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
        elif op == "where":
            fn = WHERE_OPS[s["cmp"]]
            vals = _row_field(table, s["field"], at)
            try:
                mask = pa.array([v is not None and bool(fn(v, s["value"])) for v in vals])
            except TypeError as e:
                raise SpecError(f"{at}: cannot compare field {s['field']!r} with {s['value']!r} ({e})") from None
        else:
            raise SpecError(f"{at}.op {op!r} is not supported for rows (use where, slice, sample)")
        table = table.filter(mask)
    return Rows(table)


def run_filter_rows(store: Store, spec: Any, source_name: str, built: StageResult, *,
                    progress: Any = None) -> StageResult:
    source = _source(spec, source_name)

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        r = apply_row_steps(load_rows(store, built), source.steps,
                            where=f"sources[{_source_index(spec, source_name)}].steps")
        if len(r) == 0:
            raise SpecError(f"source {source_name!r}: its steps keep no rows; loosen them")
        return {"rows": r}, {"rows": len(r)}

    return cached_stage(store, "filter-rows", inputs=[built.checksums["rows"]],
                        params=list(source.steps), compute=compute, label=source_name,
                        progress=progress)


# ------------------------------------------------------------------------------- grade


def make_verifier(vspec: Any) -> Any:
    """An ``assay.verify`` verifier from its spec (kind + keyword arguments)."""
    from assay.spec import VERIFIER_CLASSES

    verify = importlib.import_module("assay.verify")
    cls = getattr(verify, VERIFIER_CLASSES[vspec.kind])
    try:
        return cls(**vspec.params)
    except TypeError as e:
        raise SpecError(f"verifier {vspec.kind}: bad params {vspec.params} ({e})") from None


def verifier_fingerprint(vspec: Any) -> Any:
    """The verifier's identity for cache keys: kind, params, and its own version if it has one."""
    verify = importlib.import_module("assay.verify")
    from assay.spec import VERIFIER_CLASSES

    cls = getattr(verify, VERIFIER_CLASSES[vspec.kind])
    return {"kind": vspec.kind, "params": vspec.params, "code": code_checksum(cls.__module__)}


def shard_bounds(rows: Rows, shard_rows: int) -> list[tuple[int, int]]:
    """Row ranges of shards of about ``shard_rows`` rows that never split a task (rows of a task
    are contiguous after build-rows). Shards are the grading stage's resume unit.

    Example:
        >>> import assay
        >>> r = assay.rows(["a", "b", "c"], [["x", "y"], ["z", "w"], ["v"]], [[1, 0], [1, 1], [0]])
        >>> shard_bounds(r, 3)
        [(0, 4), (4, 5)]
    """
    ids = rows.to_arrow().column("task_id").to_pylist()
    bounds, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or (i - start >= shard_rows and ids[i] != ids[i - 1]):
            bounds.append((start, i))
            start = i
    return bounds


def run_grade_shard(store: Store, spec: Any, source_name: str, filtered: StageResult,
                    bounds: tuple[int, int], shard: int, n_shards: int, *,
                    workers: int | None = None, progress: Any = None) -> StageResult:
    """Grade rows[bounds] of a source with its verifier; cached per shard content."""
    from assay.grading import grade

    source = _source(spec, source_name)
    lo, hi = bounds

    part = Rows(load_rows(store, filtered).to_arrow().slice(lo, hi - lo))

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        graded = grade(part, make_verifier(source.verifier), workers=workers)
        return {"rows": graded}, {"rows": len(graded)}

    # The shard's own content is its input, so a filter that keeps this shard's rows as they
    # were (e.g. a longer slice) does not re-grade it.
    return cached_stage(store, "grade", inputs=[part.checksum()],
                        params={"verifier": verifier_fingerprint(source.verifier)},
                        compute=compute, label=f"{source_name} shard {shard + 1}/{n_shards}",
                        progress=progress)


def concat_rows(store: Store, parts: Sequence[StageResult]) -> Rows:
    tables = [load_rows(store, p).to_arrow() for p in parts]
    return Rows(pa.concat_tables(tables)) if len(tables) > 1 else Rows(tables[0])


def _source(spec: Any, name: str) -> Any:
    for s in spec.sources:
        if s.name == name:
            return s
    raise SpecError(f"no source named {name!r}; sources are {[s.name for s in spec.sources]}")


def _source_index(spec: Any, name: str) -> int:
    return [s.name for s in spec.sources].index(name)
