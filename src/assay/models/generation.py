"""``assay.generate``: k completions per prompt from the model under test, cached and resumable.

Each completion is keyed and committed to a journal as it arrives; a rerun asks only for the rest.

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> g = generate(["2+3?", "7*6?"],
    ...              model={"kind": "function", "callable": "assay.models.function:echo"},
    ...              k=2, store=Store(tempfile.mkdtemp()))
    >>> g.completions, g.sent
    ([['2+3?', '2+3?'], ['7*6?', '7*6?']], 4)
"""

from __future__ import annotations

import inspect
import random
import sys
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from assay import stop
from assay.errors import GenerationError, RowsError
from assay.models.base import Backend, Request, RunStats, to_messages
from assay.models.claims import Claims, poll_s
from assay.models.journal import (
    Journal,
    completion_key,
    find_elsewhere,
    sample_seed,
    shard_id,
)
from assay.models.registry import BACKENDS
from assay.models.rejection import RequestRejected
from assay.models.specs import GenerateSpec, ModelEntry, SamplingParams, backend_spec
from assay.progress import track
from assay.store import Store

if TYPE_CHECKING:
    from assay.rows import Rows

#: Fields every generation record has (``latency_s`` and ``retries`` are wall-clock facts of the
#: run that produced it: they stay out of rows so results are byte-identical across reruns;
#: ``stop_trimmed``: what assay cut from a server's text at a stop string, None if nothing).
RECORD_FIELDS = ("key", "prompt_index", "sample_index", "seed", "status", "completion", "reason",
                 "finish_reason", "prompt_tokens", "completion_tokens", "served_model",
                 "latency_s", "retries", "stop_trimmed")
RECORD_SCHEMA = pa.schema([
    ("key", pa.string()), ("prompt_index", pa.int64()), ("sample_index", pa.int64()),
    ("seed", pa.int64()), ("status", pa.string()), ("completion", pa.string()),
    ("reason", pa.string()), ("finish_reason", pa.string()), ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()), ("served_model", pa.string()), ("latency_s", pa.float64()),
    ("retries", pa.int64()), ("stop_trimmed", pa.string()),
])


@dataclass
class Generations:
    """The outcome of :func:`generate`: one record per (prompt, sample), in order.

    ``sent``: completions asked of the model in this call (the rest came from the journal);
    ``records[i]["status"]`` is ``ok`` or ``error`` (``completion`` None, ``reason`` why);
    ``stats``: facts of this call (:class:`assay.models.base.RunStats`: HTTP requests sent,
    retries by cause, requests that gave up, not sent by an open circuit breaker), with those of
    an earlier call that was killed before it reported them (``recovered``: its HTTP requests
    counted here; see :func:`_take_over`)."""

    prompts: list[object]
    messages: list[list[dict[str, str]]]
    k: int
    records: list[dict[str, Any]]
    sent: int
    config: dict[str, Any] = field(repr=False, default_factory=dict)
    stats: dict[str, object] = field(repr=False, default_factory=dict)

    @property
    def completions(self) -> list[list[str | None]]:
        """``completions[i][j]``: sample j of prompt i, None for an error record."""
        return [[r["completion"] for r in self.records[i * self.k:(i + 1) * self.k]]
                for i in range(len(self.prompts))]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["status"] != "ok"]

    def to_arrow(self) -> pa.Table:
        """Every record as an Arrow table of :data:`RECORD_SCHEMA`."""
        return pa.Table.from_pylist([{f: r.get(f) for f in RECORD_FIELDS} for r in self.records],
                                    schema=RECORD_SCHEMA)

    def rows(self, reward: object = None, *, references: Sequence[object] | None = None,
             task_ids: Sequence[str] | None = None,
             privileged: Sequence[Mapping[str, object] | None] | None = None,
             meta: Sequence[Mapping[str, object] | None] | None = None,
             workers: int | None = None) -> Rows:
        """:class:`assay.Rows`, one per record, optionally graded by ``reward``.

        An error record becomes a row with ``judge_status: gen_error`` (reward None, the
        failure in ``reason``) that no grader scores; every row carries markers
        ``prompt_tokens``, ``completion_tokens`` and ``truncated`` (1 for a ``length`` finish)
        where the backend reported them. ``privileged``: a dict per prompt carried into its
        rows' ``privileged`` (a source's reference and tests), next to ``generation`` (finish
        reason, served model, cache key, seed). ``meta``: a dict per prompt (its source record's
        own fields) carried into its rows' ``meta``. Rollouts are numbered per task, so two prompts
        of one task do not share indices."""
        from assay.grading import grade
        from assay.rows import Rows, as_table, task_id_for

        n = len(self.prompts)
        for name, seq in (("references", references), ("task_ids", task_ids),
                          ("privileged", privileged), ("meta", meta)):
            if seq is not None and len(seq) != n:
                raise RowsError(f"{name}: expected one per prompt ({n}), got {len(seq)}")
        out = []
        rollouts: dict[str, int] = {}
        stops = (self.config.get("params") or {}).get("stop")
        for r in self.records:
            i = r["prompt_index"]
            tid = task_ids[i] if task_ids is not None else task_id_for(self.messages[i])
            rollouts[tid] = rollouts.get(tid, -1) + 1
            msgs = [m for m in self.messages[i] if m["role"] != "system"]
            users = [m["content"] for m in msgs if m["role"] == "user"]
            markers = {}
            if r["prompt_tokens"] is not None:
                markers["prompt_tokens"] = float(r["prompt_tokens"])
            if r["completion_tokens"] is not None:
                markers["completion_tokens"] = float(r["completion_tokens"])
            if r["status"] == "ok":
                markers["truncated"] = float(r["finish_reason"] == "length")
                if stops:  # 1: the server's text kept the stop string and assay cut it
                    markers["stop_trimmed"] = float(r.get("stop_trimmed") is not None)
            priv = dict(privileged[i] or {}) if privileged is not None else {}
            priv["generation"] = {"finish_reason": r["finish_reason"],
                                  "served_model": r["served_model"], "key": r["key"],
                                  "seed": r["seed"], "sample_index": r["sample_index"]}
            if references is not None:
                priv["reference"] = references[i]
            row = {"task_id": tid,
                   "prompt": users[-1] if users else msgs[-1]["content"],
                   "final_text": r["completion"] if r["status"] == "ok" else "",
                   "messages": self.messages[i], "rollout_index": rollouts[tid],
                   "privileged": priv, "markers": markers, "reward": None,
                   "judge_status": "unjudged" if r["status"] == "ok" else "gen_error",
                   "reason": None if r["status"] == "ok" else r["reason"],
                   "meta": meta[i] if meta is not None else None}
            out.append(row)
        table = Rows(as_table(out))
        return table if reward is None else grade(table, reward, workers=workers)


_SHARED: dict[bytes, Backend] = {}
_SHARED_LOCK = threading.Lock()


def shared_backend(model: ModelEntry) -> Backend:
    """The backend of a spec entry, built once per process (the shards of a study, and a judge
    and its cache identity, share one loaded local model); shards on threads get the same one."""
    from assay.hashing import canonical_json
    from assay.specbase import SpecModel

    spec = backend_spec(model)
    # one entry in two spec folders (`path: ./lm` beside each spec) is two models
    where = spec.spec_paths.base_dir if isinstance(spec, SpecModel) else None
    key = canonical_json({"entry": spec.model_dump(mode="json"), "spec_dir": where})
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = make_backend(model)
        return _SHARED[key]


def make_backend(model: ModelEntry | Backend) -> Backend:
    """A backend from a spec entry (dict or spec model), or ``model`` itself when it already is
    one (anything with ``spec``, ``identity``, ``render`` and ``run``), so a loaded model is
    reused."""
    if all(hasattr(model, a) for a in ("spec", "identity", "render", "run")):
        return cast(Backend, model)
    spec: Any = backend_spec(model)  # a registered backend's spec model: each has a ``kind``
    return BACKENDS.get(spec.kind).obj(spec)


def generate(prompts: Sequence[object], model: ModelEntry | Backend, *, k: int = 1,
             params: SamplingParams | Mapping[str, object] | None = None, seed: int = 0,
             api: str = "chat", system: str | None = None, max_connections: int = 16,
             store: Store | None = None, journal: str | None = None, label: str | None = None,
             stage: str = "generate", scope: str | None = None,
             on_prompt: Callable[[int, list[dict[str, Any]]], None] | None = None) -> Generations:
    """Sample ``k`` completions per prompt from ``model``, cached per completion in ``store``.

    Args:
        prompts: strings or message lists ``[{"role", "content"}]``.
        model: a backend spec entry (``{"kind": "openai", "base_url": ..., "model": ...}``,
            ``{"kind": "hf", "path": ...}``, ``{"kind": "function", "callable": "m:f"}``) or a
            backend object already built (a loaded ``hf`` model is then reused).
        k: completions per prompt; params: :class:`SamplingParams` (every field is sent);
        seed: per-sample seeds derive from it, the rendered prompt and the sample index;
        api: ``chat`` or ``completions``; system: a system prompt put first (chat only);
        max_connections: concurrent requests (``openai``); store: where the journal lives
            (default ``$ASSAY_STORE`` or ``./.assay``); journal: a name for the journal this
            call writes to within the config's (default: the config's own, which the generate
            stage uses too); keys do not depend on it, and a completion committed to any
            journal of the store is found by its key.
        label, stage: the live progress unit this call advances (``track(stage, label)`` of
            :mod:`assay.progress`): one per committed sample, ``errors`` for an error record,
            ``retries`` per retried request.
        scope: a token added to every completion key (a nightly's ``night:<date>`` when the
            model's identity is unproven): completions cached under another scope are not reused.
        on_prompt: called ``on_prompt(i, records)`` as soon as prompt ``i`` has all ``k`` of its
            records (from the journal: before any request; else from the backend's thread, at
            its last commit), with those records as :attr:`Generations.records` will hold them.
            The study graph grades finished prompts early with it; keep it cheap.

    A completion already in the journal is not asked again, unless it is an error record: those
    are retried. A 4xx other than 408/429 raises :class:`assay.errors.GenerationError`.
    """
    with stop.run() as epoch:  # a stop left by an earlier, finished run does not apply here
        return _generate(prompts, model, k=k, params=params, seed=seed, api=api, system=system,
                         max_connections=max_connections, store=store, journal=journal,
                         label=label, stage=stage, scope=scope, on_prompt=on_prompt,
                         epoch=epoch)


def _generate(prompts: Sequence[object], model: ModelEntry | Backend, *, k: int,
              params: SamplingParams | Mapping[str, object] | None, seed: int, api: str,
              system: str | None, max_connections: int, store: Store | None,
              journal: str | None, label: str | None, stage: str, scope: str | None,
              on_prompt: Callable[[int, list[dict[str, Any]]], None] | None,
              epoch: int) -> Generations:
    backend = make_backend(model)
    gspec = GenerateSpec(model=backend.spec, api=api, k=k, params=params or SamplingParams(),
                         seed=seed, max_connections=max_connections, system=system)
    store = store if store is not None else Store()
    prompts = list(prompts)
    messages = [to_messages(p, system=gspec.system, i=i) for i, p in enumerate(prompts)]
    rendered = [backend.render(m, gspec.api) for m in messages]
    # a server that accepts and never answers holds this GET for timeout_s: a stop abandons
    # it, and the open unit lets execution.stall_after see it
    with track(stage, label or stage):
        identity = stop.call(backend.identity)
    config: dict[str, object] = {"identity": identity, "api": gspec.api,
              "params": gspec.params.model_dump(mode="json")}
    if scope is not None:
        config["scope"] = scope
    log = Journal(store, shard_id(config if journal is None else {**config, "journal": journal}))
    requests: list[Request] = []
    seen: set[str] = set()
    for i, rp in enumerate(rendered):
        for j in range(gspec.k):
            s = sample_seed(gspec.seed, rp, j)
            key = completion_key(config, rp, s, j)
            requests.append(Request(key, i, j, s, rp))
    # one batched look per call: this config's journal, then (for what it lacks) every other
    # journal of the store, e.g. one an earlier assay wrote per shard of rows. What is found
    # elsewhere is copied here, so the next look finds it at once
    done = log.lookup(r.key for r in requests)
    missing = {r.key for r in requests if (done.get(r.key) or {}).get("status") != "ok"}
    for key, rec in find_elsewhere(store, missing, skip=log.rel).items():
        rec = _untallied(rec)  # its counts are its own journal's to report
        log.append(rec)
        done[key] = rec
    log.close()  # synced now (a later append reopens it): nothing is held open if a step fails
    todo = []
    for r in requests:
        prev = done.get(r.key)
        if (prev is None or prev["status"] != "ok") and r.key not in seen:
            todo.append(r)
            seen.add(r.key)

    # prompt -> its requests still missing; a key -> the prompts waiting on it (two identical
    # prompts share their keys: one request answers both)
    left = [0] * len(rendered)
    waiting: dict[str, list[int]] = {}
    if on_prompt is not None:
        pending = {r.key for r in todo}
        for r in requests:
            if r.key in pending:
                left[r.prompt_index] += 1
                waiting.setdefault(r.key, []).append(r.prompt_index)

    def finished(i: int) -> None:
        assert on_prompt is not None  # only called when there is a hook
        on_prompt(i, [_record(r, done.get(r.key)) for r in requests[i * gspec.k:(i + 1) * gspec.k]])

    if on_prompt is not None:
        for i, n in enumerate(left):
            if n == 0:  # every sample already journalled (a resumed shard)
                finished(i)
    committed: set[str] = set()
    # another run on this store (a second cron entry, a deployment beside a CLI run) may be
    # asking the same requests right now: a claim makes each request asked once, and the
    # other waits for its answer (assay.models.claims)
    claims = Claims(store, log.rel)
    asked = 0
    # this call's answers carry its batch id and running counts; it settles them as it returns
    # them (_settle), and a killed call's are taken over by a later call (_take_over)
    batch = uuid.uuid4().hex[:12]
    tally_lock = threading.Lock()
    found = [r for r in done.values() if r.get("batch")]  # answers of earlier calls
    with track(stage, label or stage, total=len(todo)) as unit:
        stats = RunStats(unit)

        def settle(key: str) -> None:
            for i in waiting.pop(key, ()):
                left[i] -= 1
                if left[i] == 0:
                    finished(i)

        def commit(req: Request, result: Mapping[str, object]) -> None:
            # an abandoned backend thread (stop.call) must not write after a stop, nor into
            # a later run
            stop.check(epoch)
            if req.key in committed:  # a backend bug: never two records for one sample
                raise GenerationError(f"backend {gspec.model.kind} committed sample "
                                      f"{req.sample_index} of prompt {req.prompt_index} twice")
            committed.add(req.key)
            rec = {f: result.get(f) for f in RECORD_FIELDS}
            rec.update(key=req.key, seed=req.seed, sample_index=req.sample_index)
            rec.pop("prompt_index")
            with tally_lock:  # counts only grow: a reader takes the largest it finds
                stats.committed(rec)
                tally = _tally(stats.as_dict(), None if kw else len(committed))
            log.append({**rec, "batch": batch, "tally": tally})
            done[req.key] = rec
            if rec["status"] == "ok":
                unit.advance(1)
            else:
                unit.advance(1, errors=1)
            settle(req.key)

        def answered(keys: Collection[str]) -> dict[str, dict[str, Any]]:
            """The ok records another run journalled for ``keys`` (kept here: done, progress,
            and a copy in this config's journal when found in another)."""
            got = {k: r for k, r in log.lookup(keys).items() if r.get("status") == "ok"}
            for k, rec in find_elsewhere(store, set(keys) - set(got), skip=log.rel).items():
                rec = _untallied(rec)
                log.append(rec)
                got[k] = rec
            for k, rec in got.items():
                done[k] = rec
                unit.advance(1)
                settle(k)
            return got

        kw = {"stats": stats} if _takes_stats(backend) else {}
        rest, listed = list(todo), False
        # held while this call runs, in the same lease as its requests: a later call takes over
        # this batch's counts only once it is dead (its lease lapsed) and never settled
        own = [f"adopt:{batch}"] if todo else []
        try:
            while rest:
                mine = set(claims.claim([*own, *(r.key for r in rest)]))
                # a claimant that answered and released between our first look and our claim
                # (its journal lines precede its release, so this look finds them)
                fresh = answered(mine)
                send = [r for r in rest if r.key in mine and r.key not in fresh]
                wait = {r.key: r for r in rest if r.key not in mine}
                if send:
                    if not listed and hasattr(backend, "listing"):
                        # what a server says of the model, recorded before its first request
                        # (a server that is down fails here, at once); a call with nothing to
                        # ask asks nothing
                        stop.call(backend.listing)
                        listed = True
                    try:
                        # on a daemon thread, abandoned at a stop: a local model's loop or a
                        # plugin backend has no waker of its own (the openai backend also
                        # cancels its requests itself)
                        stop.call(backend.run, send, gspec.params, api=gspec.api,
                                  max_connections=gspec.max_connections, commit=commit, **kw)
                    except RequestRejected as e:  # which field of the spec the server refused
                        raise e.for_stage(stage) from None
                    finally:
                        log.close()  # published before the claim goes (object store)
                    asked += len(send)
                # its requests are journalled (or were answered before): free for waiters;
                # the batch stays claimed until this call has settled it
                claims.drop(k for k in mine if k not in own)
                claims.claim([])
                rest = _await_others(claims, wait, answered, store, epoch)
            if not kw:  # a local backend: one request per sample asked, no retries
                stats.requests = asked
            found += [r for r in done.values() if r.get("batch")]
            taken = _take_over(store, log, claims, found, batch)
            if committed:
                _settle(store, log, batch, batch)
        finally:
            log.close()
            claims.release()
    records = [_record(r, done.get(r.key)) for r in requests]
    if gspec.params.temperature == 0 and gspec.k > 1:
        n = differing_prompts(records, gspec.k)
        if n:
            print(f"warning: {label or stage}: temperature 0, yet the {gspec.k} samples of {n} of "
                  f"{len(prompts)} prompts differ: the server does not decode greedily (batching "
                  "or non-deterministic kernels); the report notes it", file=sys.stderr,
                  flush=True)
    return Generations(prompts, messages, gspec.k, records, asked, config,
                       _with_taken(stats.as_dict(), taken))


def _await_others(claims: Claims, wait: dict[str, Request],
                  answered: Callable[[Collection[str]], dict[str, dict[str, Any]]],
                  store: Store, epoch: int) -> list[Request]:
    """Wait until another run's answers to the requests in ``wait`` are journalled; the ones
    whose claim went without an ok answer (its holder died: its lease lapsed; it released an
    error; or both runs yielded a key to each other) are returned, to be claimed again.

    The claim listing comes before the journal look: a claimant journals before it releases,
    so a key unclaimed at the listing and unanswered at the look was never answered."""
    while wait:
        held = claims.held_by_others(wait)
        for k in answered(list(wait)):
            del wait[k]
        free = [k for k in wait if k not in held]
        if free:
            # a random pause: two runs that each yielded a key to the other do not meet again
            stop.wait(random.uniform(0, poll_s(store)))
            stop.check(epoch)
            return list(wait.values())
        if stop.wait(poll_s(store)):
            stop.check(epoch)
    return []


def differing_prompts(records: Sequence[Mapping[str, object]], k: int) -> int:
    """How many prompts' answered samples are not all the same text (records in prompt order,
    ``k`` per prompt).

    Example:
        >>> recs = [{"status": "ok", "completion": c} for c in ("a", "a", "a", "b")]
        >>> differing_prompts(recs, 2)
        1
    """
    n = 0
    for i in range(0, len(records), k):
        texts = {r["completion"] for r in records[i:i + k] if r["status"] == "ok"}
        n += len(texts) > 1
    return n


def _record(r: Request, rec: Mapping[str, object] | None) -> dict[str, object]:
    """The record of request ``r`` from its journalled result."""
    if rec is None:  # a backend that skipped a request: never a silent gap
        rec = {"key": r.key, "status": "error", "completion": None,
               "reason": "the backend returned no result for this request", "seed": r.seed}
    return {**{f: rec.get(f) for f in RECORD_FIELDS}, "prompt_index": r.prompt_index,
            "sample_index": r.sample_index}


_COUNTS = ("requests", "completions", "gave_up", "not_sent")
_BY_CAUSE = ("retries", "failures")


def _tally(stats: Mapping[str, object], requests: int | None) -> dict[str, object]:
    """The counts a journalled answer carries: its call's so far (``requests``: given for a
    local backend, one per sample committed)."""
    out = {k: stats[k] for k in (*_COUNTS, *_BY_CAUSE)}
    if requests is not None:
        out["requests"] = requests
    return {k: v for k, v in out.items() if v}  # on every journal line: zeros left out


def _untallied(rec: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in rec.items() if k not in ("batch", "tally")}


def _settled(log: Journal, batch: str) -> str:
    """Where the mark that ``batch``'s counts were handed on lives (beside the journal, not in
    it: a journal holds one line per answer)."""
    return f"settled/{log.rel.rsplit('/', 1)[-1].removesuffix('.jsonl')}/{batch}.json"


def _settle(store: Store, log: Journal, batch: str, by: str) -> None:
    store.write_file(_settled(log, batch), f'{{"by":"{by}"}}'.encode())


def _take_over(store: Store, log: Journal, claims: Claims, found: Sequence[Mapping[str, object]],
               batch: str) -> list[dict[str, Any]]:
    """The counts of the requests of earlier calls that answered some of this call's
    samples and never settled them (killed: no run reported their counts), one per batch;
    settled here, so no later call counts them again.

    A batch's counts are the largest its journalled answers carry (counts only grow), so
    requests it sent after its last journalled answer, answered or not, are not counted. A batch
    whose claim is held is alive (another run, still going): left to report its own counts."""
    best: dict[str, dict[str, Any]] = {}
    for rec in found:
        b, t = rec.get("batch"), rec.get("tally")
        if b == batch or not isinstance(b, str) or not isinstance(t, dict):
            continue
        acc = best.setdefault(b, {k: 0 for k in _COUNTS} | {k: {} for k in _BY_CAUSE})
        for k in _COUNTS:
            acc[k] = max(acc[k], int(t.get(k) or 0))
        for k in _BY_CAUSE:
            for cause, n in (t.get(k) or {}).items():
                acc[k][cause] = max(acc[k].get(cause, 0), int(n))
    if not best:
        return []

    def unsettled(bs: Collection[str]) -> list[str]:
        return [b for b in bs if store.read_file(_settled(log, b)) is None]

    # the claim makes two runs never take over one batch; the look after it sees what a taker
    # that just released settled
    open_ = unsettled(list(best))
    if not open_:
        return []
    mine = [k.removeprefix("adopt:") for k in claims.claim(f"adopt:{b}" for b in open_)]
    taken = unsettled(mine)
    for b in taken:
        _settle(store, log, b, batch)
    return [best[b] for b in taken]


def _with_taken(stats: dict[str, Any], taken: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``stats`` (:meth:`RunStats.as_dict`) plus the counts taken over from killed calls (their
    requests, retries, failures, gave up and not sent; not their completions, which this call
    served from the journal), and ``recovered``: how many of its ``requests`` those were.

    Example:
        >>> s = {"requests": 3, "completions": 3, "gave_up": 0, "not_sent": 0, "retries": {},
        ...      "failures": {}}
        >>> t = {"requests": 2, "completions": 1, "gave_up": 0, "not_sent": 0,
        ...      "retries": {"429": 1}, "failures": {}}
        >>> r = _with_taken(s, [t]); r["requests"], r["recovered"], r["retries"]
        (5, 2, {'429': 1})
    """
    out = {**stats, "recovered": 0}
    for t in taken:
        out["recovered"] += t["requests"]
        # what reached the server is counted; a completion it received is a journalled row
        # this run served (not one it received): ``completions`` stays this run's own
        for k in _COUNTS:
            if k != "completions":
                out[k] += t[k]
        for k in _BY_CAUSE:
            merged = dict(out[k])
            for cause, n in t[k].items():
                merged[cause] = merged.get(cause, 0) + n
            out[k] = dict(sorted(merged.items()))
    return out


def _takes_stats(backend: Backend) -> bool:
    """Whether ``backend.run`` takes ``stats=`` (a plugin backend written before it need not)."""
    try:
        params = inspect.signature(backend.run).parameters
    except (TypeError, ValueError):
        return False
    return "stats" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
