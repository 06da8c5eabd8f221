"""The generate stage: k completions per prompt row from the model under test, one shard at a time.

Each completion is cached by its own request key, whatever shard holds it; a shard only schedules.

A source with ``generate:`` builds prompt rows (one per prompt, completion empty); its steps
filter those prompts, then this stage replaces each shard of them by ``k`` generated rows. The
stage's cache key holds the backend's identity (for a server: its URL, the model name and the
pinned ``revision``; for a local model: the weights' checksum, so a new checkpoint in the same
folder recomputes). A server's ``/v1/models`` answer is recorded in the summary, not keyed: it
proves nothing about the weights, and a server that loads on demand lists the model only while
it is loaded. The
stage's output (the shard's completion rows, with their references and metadata) is cached per
shard; the completions themselves are not: each is committed, as it arrives, to the journal of the
generation config (model identity, API, parameters), under the key of its request (rendered
prompt, parameters, seed, sample index) (:func:`assay.models.generate`). A killed run's rerun,
a changed reference or metadata field, a record inserted, removed or moved (which shifts every
later shard's rows) all re-run shards that ask only for prompts never asked. Failed requests
become ``gen_error`` rows that are never graded and are asked again by the next run; a cached
shard with error rows is therefore not served from the stage cache.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Any

from pydantic import BaseModel

from assay import stop
from assay.models.base import to_messages
from assay.models.freshness import reuse_scope
from assay.models.specs import GenerateSpec
from assay.progress import track
from assay.spec import StudySpec
from assay.stages.cache import (
    NotCached,
    ShardRows,
    StageResult,
    _ref_name,
    cached_stage,
    lookup,
    stage_key,
)
from assay.stages.declare import RunContext, Shard, Stage, declare
from assay.stages.seams import Computed
from assay.stages.slots import device_of, model_device, model_slots

STAGE = "generate"  # declared at the end

def backend_for(model_spec: BaseModel) -> Any:
    """The backend of a ``generate.model`` entry, built once per process."""
    from assay.models.generation import shared_backend

    return shared_backend(model_spec)


def generate_params(gspec: GenerateSpec) -> dict[str, Any]:
    """What of ``generate:`` decides the completions (not ``max_connections``, nor the model
    entry, whose identity is the stage's fingerprint)."""
    return gspec.model_dump(mode="json", exclude={"model", "max_connections", "reuse"})


def journal_file(config: dict[str, Any], name: str | None = None) -> str:
    """The store-relative path of the journal :func:`assay.models.generate` wrote for a call
    with ``config`` and ``journal=name`` (None: the config's own, which the stage writes).

    Example:
        >>> journal_file({"api": "chat"}) != journal_file({"api": "chat"}, "x")
        True
    """
    from assay.models.journal import shard_id

    sid = shard_id(config if name is None else {**config, "journal": name})
    return f"journals/{sid.split(':', 1)[1]}.jsonl"


def prompts_per_shard(shard_rows: int, k: int) -> int:
    """Prompt rows per generate shard, so a generated shard has about ``shard_rows`` rows."""
    return max(1, shard_rows // k)


def run_generate_shard(ctx: RunContext, filtered: StageResult, shard: Shard) -> StageResult:
    """Generate completions for prompt rows ``shard.bounds`` of source ``ctx.source``; cached
    per shard.

    ``ctx.device_slot(device)`` returns a context manager held while a local model generates
    (the Prefect task passes the strict ``gpu`` concurrency slot)."""
    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    device_slot = ctx.device_slot
    from assay.models import generate
    from assay.models.generation import differing_prompts

    source = spec.source(source_name)
    gspec = source.generate
    assert gspec is not None  # the plan shards this stage only for sources with generate:
    part = ShardRows(store, filtered, shard.bounds, shard.checksum)  # read if it computes
    backend = backend_for(gspec.model)
    params = generate_params(gspec)
    label = shard.label(source_name)
    # a server that accepts and never answers (frozen, overloaded) holds this GET for
    # timeout_s: the open unit lets execution.stall_after see it, and a stop abandons it
    with track("generate", label):
        identity = stop.call(backend.identity)
    scope = reuse_scope(identity, gspec.model, gspec.reuse, spec.night)
    fingerprint = identity if scope is None else {**identity, "scope": scope}
    key = stage_key(STAGE, [part.checksum()], params, fingerprint)
    doc = lookup(store, key)
    if doc is not None and doc["summary"].get("errors"):
        if ctx.cached_only:  # a probe changes nothing: the real run retries them
            raise NotCached(f"{label}: has failed requests")
        store.delete_ref(_ref_name(key))  # retry the failed requests (the rest is journalled)

    def compute() -> Computed:
        prompts = part.rows
        table = prompts.to_arrow()
        msgs = [[{"role": m["role"], "content": m["content"]} for m in ms]
                for ms in table.column("messages").to_pylist()]
        task_ids = table.column("task_id").to_pylist()
        privileged, meta = [r["privileged"] for r in prompts], [r["meta"] for r in prompts]
        # the graph's grading ahead (assay.stages.stream), when this run has one: each prompt
        # is graded as its last sample arrives, not after the shard's last request
        ahead = ctx.pregrader
        hook = ahead.feed(source_name, shard.index, k=gspec.k, task_ids=task_ids,
                          messages=[to_messages(m, system=gspec.system, i=i)
                                    for i, m in enumerate(msgs)],
                          privileged=privileged, meta=meta) if ahead is not None else None
        slot = (device_slot(device_of(backend)) if device_slot is not None
                else contextlib.nullcontext())
        with slot:
            g = generate(msgs, backend, k=gspec.k, params=gspec.params, seed=gspec.seed,
                         api=gspec.api, system=gspec.system,
                         max_connections=gspec.max_connections, store=store,
                         label=label, scope=scope, on_prompt=hook)
        rows = g.rows(task_ids=task_ids, privileged=privileged, meta=meta)
        ok = [r for r in g.records if r["status"] == "ok"]
        lat = [r["latency_s"] for r in g.records if r["latency_s"] is not None]
        summary = {"rows": len(rows), "prompts": len(prompts), "sent": g.sent,
                   "errors": len(g.errors),
                   "truncated": sum(r["finish_reason"] == "length" for r in ok),
                   # completions whose stop string the server kept and assay cut (as OpenAI
                   # and vLLM return them); prompts whose samples differ at temperature 0
                   "stop_trimmed": sum(r.get("stop_trimmed") is not None for r in ok),
                   "differ_at_t0": (differing_prompts(g.records, gspec.k)
                                    if gspec.params.temperature == 0 and gspec.k > 1 else 0),
                   "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
                   "completion_tokens": sum(r["completion_tokens"] or 0 for r in ok),
                   "latency_s_median": round(statistics.median(lat), 4) if lat else None,
                   "identity": identity, "scope": scope,
                   # what the server said of the model when this shard asked it (a server's
                   # /v1/models answer, asked only by a call that sent requests)
                   "served": (backend.listing() if g.sent and hasattr(backend, "listing")
                              else None),
                   # the journal holding these completions: `assay store gc` keeps it with the stage
                   "journal": journal_file(g.config),
                   # facts of this run (run.json reads them; the report, kept the same for the
                   # same rows, does not): HTTP requests, retries by cause, gave-ups, breaker
                   **g.stats}
        return {"rows": rows}, summary

    return cached_stage(store, STAGE, inputs=[part.checksum()], params=params,
                        fingerprint=fingerprint, compute=compute, label=label,
                        progress=ctx.progress)


def generation_facts(made: list[StageResult]) -> dict[str, Any]:
    """run.json's ``generation``: per generate shard, what this run asked (a cached shard asked
    nothing: its summary's request counts are another run's), and the total over shards: samples
    asked (``sent``), HTTP requests that reached the server, completions received and failures
    by cause this run (with those of a killed earlier run whose answers this run found in the
    journal: ``recovered`` says how many of the requests were theirs), retries by cause,
    requests that gave up, not sent (circuit breaker), error rows, completions whose stop string
    was cut, prompts whose samples differ at temperature 0.

    Example:
        >>> r = StageResult("generate", "s shard 1/1", "k", {}, {}, {"rows": 2, "errors": 1,
        ...     "requests": 5, "retries": {"429": 3}, "gave_up": 1, "not_sent": 0, "breaker": None})
        >>> generation_facts([r])["total"]["retries"]
        {'429': 3}
    """
    runs = ("sent", "requests", "completions", "gave_up", "not_sent", "recovered")
    shards: dict[str, Any] = {}
    total: dict[str, Any] = {"sent": 0, "requests": 0, "recovered": 0, "completions": 0,
                             "failures": {}, "retries": {}, "gave_up": 0, "not_sent": 0,
                             "errors": 0, "stop_trimmed": 0, "differ_at_t0": 0, "breaker": []}
    for r in made:
        doc = {**r.summary, "cached": r.cached}
        if r.cached:
            doc.update({k: 0 for k in runs if k in doc}, retries={}, failures={}, breaker=None)
        shards[r.label] = doc
        for k in ("errors", "stop_trimmed", "differ_at_t0"):  # facts of the rows, cached too
            total[k] += doc.get(k) or 0
        for k in runs:  # facts of this run
            total[k] += doc.get(k) or 0
        for name in ("retries", "failures"):
            for cause, n in (doc.get(name) or {}).items():
                total[name][cause] = total[name].get(cause, 0) + n
        if doc.get("breaker") and doc["breaker"] not in total["breaker"]:
            total["breaker"].append(doc["breaker"])
    total["retries"] = dict(sorted(total["retries"].items()))
    total["failures"] = dict(sorted(total["failures"].items()))
    return {"shards": shards, "total": total}


def _prompts_per_shard(spec: StudySpec, source: str) -> int:
    gen = spec.source(source).generate
    assert gen is not None  # the generate mode's stage
    return prompts_per_shard(spec.execution.shard_rows, gen.k)


def _slots(spec: StudySpec, source: str) -> tuple[str, ...]:
    """A local model generating holds the model slots; a server does not."""
    gen = spec.source(source).generate
    device = model_device(gen.model) if gen is not None else None
    return model_slots([device] if device is not None else [])


declare(Stage(STAGE, 1, "shard", run_generate_shard, reads=("filter-rows",), slots=_slots,
              device=True, asks_model=True, rows_per_shard=_prompts_per_shard,
              results_role="completions"))
