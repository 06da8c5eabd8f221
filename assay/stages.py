"""The study stages as plain functions, each cached in the content store on its checksum chain.

A stage's key is ``combine(stage, version, input checksums, parameters, model fingerprint)``;
its outputs are stored first and its ref last, so a killed run never leaves a readable half.

Every ``run_*`` function here is what a Prefect task in ``tasks/`` wraps (the task stays thin)
and what ``run_study`` calls directly. A stage returns a :class:`StageResult`: a small pointer
(store keys, content checksums, a summary) that is cheap to pass between processes.

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> store = Store(tempfile.mkdtemp())
    >>> calls = []
    >>> def compute():
    ...     calls.append(1)
    ...     return {"doc": {"answer": 42}}, {"rows": 0}
    >>> a = cached_stage(store, "measure", inputs=["x:1"], params={"p": 1}, compute=compute)
    >>> b = cached_stage(store, "measure", inputs=["x:1"], params={"p": 1}, compute=compute)
    >>> a.cached, b.cached, len(calls), store.get_json(b.outputs["doc"])
    (False, True, 1, {'answer': 42})
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assay.errors import SpecError, StoreError
from assay.hashing import combine
from assay.rows import Rows, as_table
from assay.store import Store

#: Bump a stage's version when its code changes what it outputs: old entries then miss.
STAGE_VERSIONS: dict[str, int] = {
    "build-rows": 1,
    "filter-rows": 1,
    "grade": 1,
    "decontaminate": 1,
    "score-reward-model": 1,
    "measure": 1,
    "report": 1,
}
STAGE_ORDER = tuple(STAGE_VERSIONS)


# ------------------------------------------------------------------------------- caching


@dataclass(frozen=True)
class StageResult:
    """Pointer to one stage x shard output in the store.

    ``outputs`` maps output names to store keys; ``checksums`` maps them to content checksums
    (what downstream keys combine); ``summary`` holds small JSON facts (row counts, timings).
    """

    stage: str
    label: str
    key: str
    outputs: dict[str, str]
    checksums: dict[str, str]
    summary: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "label": self.label, "key": self.key,
                "outputs": dict(self.outputs), "checksums": dict(self.checksums),
                "summary": dict(self.summary), "cached": self.cached, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StageResult:
        return cls(**{k: d[k] for k in ("stage", "label", "key", "outputs", "checksums",
                                         "summary", "cached", "seconds")})


def stage_key(stage: str, inputs: Sequence[str], params: Any, fingerprint: Any = None) -> str:
    """The cache key of a stage run: stage name + version + input checksums + parameters +
    model fingerprint (``None`` when no model is involved).

    Example:
        >>> stage_key("grade", ["rows:a"], {"v": 1}) != stage_key("grade", ["rows:b"], {"v": 1})
        True
    """
    if stage not in STAGE_VERSIONS:
        raise StoreError(f"unknown stage {stage!r}; known: {list(STAGE_VERSIONS)}")
    return combine("stage", stage, STAGE_VERSIONS[stage], list(inputs), params, fingerprint)


def _ref_name(key: str) -> str:
    return f"assay-stage/{key}"


def lookup(store: Store, key: str) -> dict[str, Any] | None:
    """The stored pointer document of a finished stage, or None (missing, corrupt, or any of
    its outputs missing or corrupt: then the stage simply runs again)."""
    ref = store.get_ref(_ref_name(key))
    if ref is None:
        return None
    doc = store.get_json(ref["blob"])
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    if not all(store.has(v) for v in doc.get("outputs", {}).values()):
        return None
    return doc


def _store_output(store: Store, value: Any) -> tuple[str, str]:
    """(store key, content checksum) of one output value."""
    if isinstance(value, Rows):
        return store.put_table(value.to_arrow()), value.checksum()
    if isinstance(value, pa.Table):
        k = store.put_table(value)
        return k, k
    if isinstance(value, (bytes, bytearray)):
        k = store.put_bytes(bytes(value))
        return k, k
    k = store.put_json(value)
    return k, k


def cached_stage(store: Store, stage: str, *, inputs: Sequence[str], params: Any,
                 compute: Callable[[], tuple[Mapping[str, Any], Mapping[str, Any]]],
                 fingerprint: Any = None, label: str | None = None,
                 progress: Callable[[StageResult], None] | None = None) -> StageResult:
    """Serve ``stage`` from the store, or run ``compute`` and store it.

    ``compute()`` returns ``(outputs, summary)``; outputs are Rows, Arrow tables, bytes or JSON
    documents. Outputs are written (atomically, verified) before the ref that names them, so a
    kill at any point leaves either a complete entry or none.
    """
    key = stage_key(stage, inputs, params, fingerprint)
    label = label or stage
    doc = lookup(store, key)
    if doc is not None:
        res = StageResult(stage, label, key, doc["outputs"], doc["checksums"], doc["summary"],
                          cached=True, seconds=0.0)
        if progress:
            progress(res)
        return res
    if progress:  # long stages (a reward model, a big shard) say they started
        progress(StageResult(stage, label, key, {}, {}, {"state": "running"}))
    t0 = time.perf_counter()
    values, summary = compute()
    outputs, checksums = {}, {}
    for name, value in values.items():
        outputs[name], checksums[name] = _store_output(store, value)
    seconds = time.perf_counter() - t0
    summary = dict(summary)
    pointer = {"key": key, "stage": stage, "label": label, "outputs": outputs,
               "checksums": checksums, "summary": summary, "seconds": seconds}
    store.set_ref(_ref_name(key), store.put_json(pointer), {"stage": stage, "label": label})
    res = StageResult(stage, label, key, outputs, checksums, summary, cached=False, seconds=seconds)
    if progress:
        progress(res)
    return res


def print_progress(res: StageResult, stream: Any = None) -> None:
    """One progress line: stage, shard, rows and rows/s (or 'cached')."""
    stream = stream or sys.stderr
    n = res.summary.get("rows")
    if res.summary.get("state") == "running":
        line = f"[{res.stage}] {res.label}: running"
    elif res.cached:
        line = f"[{res.stage}] {res.label}: cached"
    elif n:
        rate = n / res.seconds if res.seconds > 0 else float("inf")
        line = f"[{res.stage}] {res.label}: {n} rows in {res.seconds:.1f} s ({rate:,.0f} rows/s)"
    else:
        line = f"[{res.stage}] {res.label}: done in {res.seconds:.1f} s"
    print(line, file=stream, flush=True)


_TABLES: dict[tuple[str, str], pa.Table] = {}


def load_rows(store: Store, res: StageResult, name: str = "rows") -> Rows:
    """The rows a stage stored (verified). Tables are immutable and named by content, so a few
    recent ones are memoized: every grading shard reads the same filtered table."""
    memo = (str(store.root), res.outputs[name])
    t = _TABLES.get(memo)
    if t is None:
        t = store.get_table(res.outputs[name])
        if t is not None:
            if len(_TABLES) >= 8:
                _TABLES.pop(next(iter(_TABLES)))
            _TABLES[memo] = t
    if t is None:
        raise StoreError(f"{res.label}: output {name!r} ({res.outputs[name]}) vanished from "
                         f"{store.root}; rerun to recompute it")
    return Rows(t)


def load_doc(store: Store, res: StageResult, name: str) -> Any:
    d = store.get_json(res.outputs[name])
    if d is None:
        raise StoreError(f"{res.label}: output {name!r} vanished from {store.root}; rerun")
    return d


# ------------------------------------------------------------------------------- build-rows


def _read_records(path: Any, fmt: str) -> list[dict[str, Any]]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SpecError(f"{path}:{i}: not valid JSON ({e.msg}); one object per line") from None
            if not isinstance(rec, dict):
                raise SpecError(f"{path}:{i}: each line must be a JSON object, got {type(rec).__name__}")
            out.append(rec)
    return out


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
            rewards.append(rec[fields.reward])
    if not prompts:
        raise SpecError(f"{where}: no records")
    return assay.rows(prompts, completions, rewards if fields.reward is not None else None,
                      references=refs if fields.reference is not None else None,
                      task_ids=tids if fields.task_id is not None else None)


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


# ------------------------------------------------------------------------------- decontaminate


def _graded_checksums(graded: Mapping[str, Sequence[StageResult]], names: Sequence[str]) -> list[Any]:
    return [[n, [p.checksums["rows"] for p in graded[n]]] for n in names]


def run_decontaminate(store: Store, spec: Any, graded: Mapping[str, Sequence[StageResult]], *,
                      progress: Any = None) -> StageResult:
    """Eval-side contamination of each checked source against the spec's corpus, with pass@1
    on the full set and on the clean subset."""
    from assay.report import collect_estimates, result_doc
    from assay.spec import file_checksum

    d = spec.decontaminate
    names = d.sources or [s.name for s in spec.sources]
    params = d.model_dump(mode="json", exclude={"corpus", "sources"})
    corpus_sums = [file_checksum(spec.resolve(c)) for c in d.corpus]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        import assay.decontam as dc

        paths = [str(spec.resolve(c)) for c in d.corpus]
        docs, n_rows = [], 0
        for name in names:
            rows = concat_rows(store, graded[name])
            n_rows += len(rows)
            rep = dc.contamination(rows, paths, n=d.n, text_field=d.text_field,
                                   id_field=d.id_field, store=store, **d.params)
            extra: dict[str, Any] = {"source": name}
            if hasattr(rep, "rescore"):  # pass@1 on the full set next to the clean subset
                split = rep.rescore(rows)
                extra["clean_report"] = split.report() if hasattr(split, "report") else str(split)
                extra["clean_estimates"] = collect_estimates(getattr(split, "clean", None))
            docs.append(result_doc("contamination", f"contamination[{name}]", rep, **extra))
        return {"contamination": docs}, {"rows": n_rows}

    return cached_stage(store, "decontaminate", inputs=_graded_checksums(graded, names) + corpus_sums,
                        params=params, compute=compute, label=",".join(names), progress=progress)


# ------------------------------------------------------------------------------- reward models


def make_reward_model(mspec: Any, spec: Any) -> Any:
    """A reward model adapter from its spec entry."""
    from assay import reward

    if mspec.kind == "embedding":
        return reward.EmbeddingRewardModel(**mspec.params)
    if mspec.kind == "hf":
        path = mspec.path
        local = spec.resolve(path)
        if local.exists():
            path = str(local)
        return reward.HFRewardModel(path, revision=mspec.revision, **mspec.params)
    mod, _, attr = mspec.function.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise SpecError(f"reward model {mspec.name!r}: cannot import {mspec.function!r} ({e})") from None
    return reward.FunctionRewardModel(fn, **mspec.params)


def reward_views(spec: Any) -> dict[str, Any]:
    """The audited views: the diagnostic set's dimensions, each with the spec's steps applied."""
    from assay.data import apply_derivation, load_diagnostic_v3

    d = spec.reward.data
    views = load_diagnostic_v3()
    dims = d.dimensions or list(views)
    unknown = [x for x in dims if x not in views]
    if unknown:
        raise SpecError(f"reward.data.dimensions: unknown {unknown}; the set has {list(views)}")
    return {k: apply_derivation(views[k], d.steps) if d.steps else views[k] for k in dims}


def _gpu_slot(device: str) -> Any:
    """A strict ``gpu`` global concurrency slot when scoring on CUDA; a no-op on CPU (Prefect is
    imported only on the CUDA path). The limit is created with 1 slot if the server lacks it:
    raise it with ``prefect gcl update gpu --limit N`` on a machine with N GPUs."""
    import contextlib

    if not str(device).startswith("cuda"):
        return contextlib.nullcontext()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.sync import concurrency
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name("gpu")
        except ObjectNotFound:
            with contextlib.suppress(Exception):  # another process may create it first
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name="gpu", limit=1))
    return concurrency("gpu", occupy=1, strict=True)


def model_identity(mspec: Any, spec: Any) -> dict[str, Any]:
    """What identifies a reward model's outputs, computed without loading it (so a cached rerun
    never imports torch): adapter kind and arguments plus the digest of every weight,
    tokenizer and template file for local models; hub id and revision otherwise. The loaded
    model's own ``fingerprint`` is stored with the results."""
    from assay.reward.runtime import dir_digest

    ident: dict[str, Any] = {"kind": mspec.kind, "params": mspec.params}
    if mspec.kind == "embedding":
        from assay.reward.embedding import bundled_model_path

        path = mspec.params.get("path")
        ident["files"] = dir_digest(spec.resolve(path) if path else bundled_model_path())
    elif mspec.kind == "hf":
        local = spec.resolve(mspec.path)
        if local.is_dir():
            ident["files"] = dir_digest(local)
        else:  # a hub id: pin `revision` to a commit hash for a key that cannot go stale
            ident["hub"] = {"id": mspec.path, "revision": mspec.revision}
    else:
        import hashlib
        import inspect

        mod, _, attr = mspec.function.partition(":")
        fn = getattr(importlib.import_module(mod), attr, None)
        try:
            src = inspect.getsource(fn)
        except (TypeError, OSError):
            src = repr(fn)
        ident["function"] = {"name": mspec.function,
                             "source": hashlib.sha256(src.encode()).hexdigest()}
    return ident


def run_reward_audit(store: Store, spec: Any, model_name: str, *, progress: Any = None) -> StageResult:
    """Audit one reward model on the diagnostic set; keyed on the model's identity (weights,
    tokenizer, template digests) and the views' checksums, never on its name."""
    from assay.report import result_doc

    mspec = next(m for m in spec.reward.models if m.name == model_name)
    views = reward_views(spec)
    inputs = [[k, v.checksum()] for k, v in views.items()]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        from assay.reward import audit

        model = make_reward_model(mspec, spec)
        with _gpu_slot(getattr(model, "device", "cpu")):
            res = audit(model, views, store=store) if _accepts(audit, "store") else audit(model, views)
        doc = result_doc("reward_audit", model_name, res, dimensions=_audit_dimensions(res),
                         fingerprint=model.fingerprint)
        return {"audit": doc}, {"rows": sum(len(v) for v in views.values())}

    return cached_stage(store, "score-reward-model", inputs=inputs, params={"name": model_name},
                        fingerprint=model_identity(mspec, spec), compute=compute, label=model_name,
                        progress=progress)


def _accepts(fn: Any, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _audit_dimensions(res: Any) -> list[dict[str, Any]]:
    """Per-dimension pair accuracy (with interval and n) and baseline, for the plot."""
    from assay.report import collect_estimates

    out = []
    dims = getattr(res, "dimensions", None)
    items = dims.items() if isinstance(dims, Mapping) else (
        [(getattr(d, "dimension", getattr(d, "name", str(i))), d) for i, d in enumerate(dims)]
        if dims else [])
    for name, d in items:
        ests = collect_estimates(d)
        acc = next((e for e in ests if "acc" in e["name"] or "acc" in e["path"]), None)
        base = next((e for e in ests if "baseline" in e["name"] or "baseline" in e["path"]), None)
        if acc:
            out.append({**acc, "dimension": str(name), "baseline": base["value"] if base else None})
    return out


# ------------------------------------------------------------------------------- measure


def run_measure(store: Store, spec: Any, graded: Mapping[str, Sequence[StageResult]], *,
                progress: Any = None) -> StageResult:
    """The measurements the spec asks for, over the graded rows of each source."""
    import assay
    from assay.report import result_doc

    m = spec.measure
    names = [s.name for s in spec.sources]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        rows = {n: concat_rows(store, graded[n]) for n in names}
        docs: list[dict[str, Any]] = []
        outputs: dict[str, Any] = {}
        if m.pass_at is not None:
            for n in m.pass_at.sources or names:
                docs.append(result_doc("pass_at", f"pass_at[{n}]", assay.pass_at(rows[n], k=m.pass_at.k),
                                       source=n))
        for c in m.compare:
            res = assay.compare(rows[c.before], rows[c.after], proxy=c.proxy, metrics=c.metrics,
                                alpha=c.alpha)
            docs.append(result_doc("compare", f"compare[{c.before} -> {c.after}]", res,
                                   before=c.before, after=c.after))
        if m.eval_variance is not None:
            for n in m.eval_variance.sources or names:
                docs.append(result_doc("eval_variance", f"eval_variance[{n}]",
                                       assay.eval_variance(rows[n]), source=n))
        if m.holdout_size is not None:
            h = m.holdout_size
            res = assay.holdout_size(h.effect, before=rows[h.before] if h.before else None,
                                     after=rows[h.after] if h.after else None, power=h.power,
                                     alpha=h.alpha)
            docs.append(result_doc("holdout_size", "holdout_size", res))
        if m.select is not None:
            res = assay.select(rows[m.select.source], mode="rl", band=tuple(m.select.band))
            kept = getattr(res, "rows", None)
            if kept is not None:
                outputs["selected"] = Rows(as_table(kept, require=()))
            docs.append(result_doc("select", f"select[{m.select.source}]", res,
                                   source=m.select.source))
        outputs["measurements"] = docs
        return outputs, {"rows": sum(len(r) for r in rows.values())}

    return cached_stage(store, "measure", inputs=_graded_checksums(graded, names),
                        params=m.model_dump(mode="json"), compute=compute,
                        label=",".join(names), progress=progress)


# ------------------------------------------------------------------------------- report


def run_report(store: Store, spec: Any, graded: Mapping[str, Sequence[StageResult]],
               measured: StageResult | None, decon: StageResult | None,
               audits: Sequence[StageResult], *, progress: Any = None) -> StageResult:
    """report.md / report.json / PNGs as stored blobs (written to the run dir afterwards)."""
    from assay.report import build_report

    ups = [p.checksums for p in (measured, decon, *audits) if p is not None]
    inputs = _graded_checksums(graded, list(graded)) + [ups]
    spec_doc = {"name": spec.name, "description": spec.description, "checksum": spec.checksum()}

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        sources = []
        for s in spec.sources:
            r = concat_rows(store, graded[s.name])
            sources.append({"name": s.name, "rows": len(r),
                            "tasks": len(set(r.to_arrow().column("task_id").to_pylist())),
                            "verifier": s.verifier.kind if s.verifier else "given scores"})
        files = build_report(
            spec_doc, sources,
            load_doc(store, measured, "measurements") if measured else [],
            load_doc(store, decon, "contamination") if decon else [],
            [load_doc(store, a, "audit") for a in audits])
        return {f"file:{k}": v for k, v in files.items()}, {"files": sorted(files)}

    return cached_stage(store, "report", inputs=inputs, params=spec_doc, compute=compute,
                        label=spec.name, progress=progress)


def report_files(store: Store, report: StageResult) -> dict[str, bytes]:
    """The report stage's files, verified, as ``{name: bytes}``."""
    out = {}
    for k, key in report.outputs.items():
        data = store.get_bytes(key)
        if data is None:
            raise StoreError(f"report file {k} vanished from {store.root}; rerun")
        out[k.removeprefix("file:")] = data
    return out


# ------------------------------------------------------------------------------- the chain


def direct_call(fn: Callable[..., StageResult], *args: Any, **kwargs: Any) -> StageResult:
    """Run a stage function in this process (what ``run_study`` does without Prefect)."""
    return fn(*args, **kwargs)


def direct_map(fn: Callable[..., StageResult], calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]
               ) -> list[StageResult]:
    return [fn(*a, **k) for a, k in calls]


@dataclass(frozen=True)
class StudyRun:
    """Every stage pointer of one study run, in execution order, plus the named ones."""

    spec_checksum: str
    results: tuple[StageResult, ...]
    graded: dict[str, tuple[StageResult, ...]]
    report: StageResult | None

    @property
    def cached_stages(self) -> list[str]:
        return [f"{r.stage}[{r.label}]" for r in self.results if r.cached]

    @property
    def computed_stages(self) -> list[str]:
        return [f"{r.stage}[{r.label}]" for r in self.results if not r.cached]


def run_study(spec: Any, store: Store, *, call: Callable[..., StageResult] = direct_call,
              call_many: Callable[..., list[StageResult]] = direct_map,
              progress: Callable[[StageResult], None] | None = print_progress,
              workers: int | None = None) -> StudyRun:
    """Run the chain build-rows -> filter -> grade -> decontaminate -> score-reward-model ->
    measure -> report, skipping what the spec does not ask for. ``call``/``call_many`` decide
    where each stage runs (directly, or as Prefect tasks: see ``flows/study.py``)."""
    workers = workers or spec.execution.workers
    done: list[StageResult] = []
    graded: dict[str, tuple[StageResult, ...]] = {}
    for src in spec.sources:
        built = call(run_build_rows, store, spec, src.name, progress=progress)
        filtered = call(run_filter_rows, store, spec, src.name, built, progress=progress)
        done += [built, filtered]
        if src.verifier is None:
            graded[src.name] = (filtered,)
            continue
        bounds = shard_bounds(load_rows(store, filtered), spec.execution.shard_rows)
        calls = [((store, spec, src.name, filtered, b, i, len(bounds)),
                  {"workers": workers, "progress": progress}) for i, b in enumerate(bounds)]
        shards = call_many(run_grade_shard, calls)
        done += shards
        graded[src.name] = tuple(shards)
    decon = None
    if spec.decontaminate is not None:
        decon = call(run_decontaminate, store, spec, graded, progress=progress)
        done.append(decon)
    audits: list[StageResult] = []
    if spec.reward is not None:
        for m in spec.reward.models:
            audits.append(call(run_reward_audit, store, spec, m.name, progress=progress))
        done += audits
    measured = None
    if spec.sources:
        measured = call(run_measure, store, spec, graded, progress=progress)
        done.append(measured)
    report = call(run_report, store, spec, graded, measured, decon, tuple(audits), progress=progress)
    done.append(report)
    return StudyRun(spec.checksum(), tuple(done), graded, report)


# ------------------------------------------------------------------------------- helpers


def _source(spec: Any, name: str) -> Any:
    for s in spec.sources:
        if s.name == name:
            return s
    raise SpecError(f"no source named {name!r}; sources are {[s.name for s in spec.sources]}")


def _source_index(spec: Any, name: str) -> int:
    return [s.name for s in spec.sources].index(name)


def summarize(results: Sequence[StageResult]) -> str:
    """``cached: a, b | computed: c`` over stage labels, in order."""
    cached = [f"{r.stage}[{r.label}]" for r in results if r.cached]
    fresh = [f"{r.stage}[{r.label}]" for r in results if not r.cached]
    return (f"cached ({len(cached)}): {', '.join(cached) or '-'}\n"
            f"computed ({len(fresh)}): {', '.join(fresh) or '-'}")


__all__ = [
    "STAGE_VERSIONS", "StageResult", "stage_key", "cached_stage", "lookup", "print_progress",
    "build_source_rows", "rows_from_records", "apply_row_steps", "shard_bounds",
    "run_build_rows", "run_filter_rows", "run_grade_shard", "concat_rows", "make_verifier",
    "summarize",
]
