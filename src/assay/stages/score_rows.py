"""The score-rows stage: each scoring reward model scores every completion of one graded shard,
and the scores land in the rows as markers ``rm:<model>`` that measure reads like any marker.

The stage is keyed on the shard's rows and the models' identities; the scores themselves are
cached apart, one journal line per row input (model identity, scoring protocol, the row's
conversation and completion; :func:`row_key`), committed as each chunk of rows is scored. So a new
verifier, a changed reference, an inserted, removed or reordered record (which moves every shard
boundary after it) re-attaches journalled scores, and only inputs the model never saw are scored;
a killed scoring run resumes from its last committed chunk. Two runs on one store scoring the same
new inputs at once score each once: the missing inputs are claimed (assay.models.claims), and
the other run waits for their scores in the journal. Scores an earlier version cached per
shard (``assay-rowscores/<key>``) still serve the same shard, and are journalled per row then.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from assay.errors import RowsError
from assay.hashing import combine, content_hash
from assay.progress import Unit, track
from assay.reward.batching import RowAdvance, on_batches
from assay.rows import MARKERS_TYPE, Rows, table_checksum
from assay.spec import StudySpec
from assay.stages.cache import StageResult, cached_stage, load_rows
from assay.stages.declare import RunContext, Shard, Stage, declare
from assay.stages.seams import Computed
from assay.stages.slots import device_of, model_device, scoring_slots
from assay.store import Store

if TYPE_CHECKING:
    from assay.models.claims import Claims
    from assay.models.journal import Journal
    from assay.paths import Paths
    from assay.reward.kinds import RewardModelEntry
    from assay.reward.worker import ScoringWorker

STAGE = "score-rows"  # declared at the end

#: Bump when what a row's score means changes (which text a model sees, how conversations are
#: passed, which rows are left unscored): it is part of every row-score cache key.
ROW_PROTOCOL = 1
#: Per model kind, bumped when that kind's adapter gives other bits for the same row input: it
#: joins the kind's identity (:func:`model_identity`), so scores made the old way are computed
#: again once while other kinds' stay cached. hf 2: every input scored alone (issue 49).
KIND_PROTOCOL: dict[str, int] = {"hf": 2}
MARKER_PREFIX = "rm:"
#: Distinct row inputs scored per model call and journal commit: what a killed run loses at most
#: per model (a GPU model batches within it by its own token budget)
COMMIT_ROWS = 512



class Scorer(Protocol):
    """What this stage asks of a built reward model: an adapter (an
    :class:`assay.reward.base.RewardModel`) or a worker's :class:`~assay.reward.worker.RemoteModel`
    (which has no ``last_run``); ``score_conversations`` is optional, looked up by name."""

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray: ...


#: What a reward model reads of a shard's rows (:func:`scoring_inputs`).
ScoringInputs = tuple[list[str], list[str], list[list[dict[str, str]] | None], np.ndarray]

#: identity key -> built adapter: one load per process, not per shard
_MODELS: dict[str, Scorer] = {}
_LOADING: dict[str, threading.Event] = {}  # identity key -> set when the load in flight ends
_MODELS_LOCK = threading.Lock()


def marker_name(model_name: str) -> str:
    """The marker a reward model's row scores are stored under.

    Example:
        >>> marker_name("minilm")
        'rm:minilm'
    """
    return f"{MARKER_PREFIX}{model_name}"


def scoring_inputs(table: pa.Table) -> ScoringInputs:
    """What a reward model reads per row: the prompt text, the completion, the conversation
    (``None`` for a single user turn, where the prompt is the whole conversation) and whether
    the row can be scored at all (an empty completion cannot: it gets no marker).

    Example:
        >>> import assay
        >>> t = assay.rows(["Q"], [["A", " "]]).to_arrow()
        >>> p, r, conv, ok = scoring_inputs(t)
        >>> p, r, conv, ok.tolist()
        (['Q', 'Q'], ['A', ' '], [None, None], [True, False])
    """
    prompts = table.column("prompt").to_pylist()
    responses = table.column("final_text").to_pylist()
    msgs = (table.column("messages").to_pylist() if "messages" in table.column_names
            else [None] * len(prompts))
    convs: list[list[dict[str, str]] | None] = []
    for m in msgs:
        if m is None or (len(m) == 1 and m[0]["role"] == "user"):  # single-turn
            convs.append(None)
        else:
            convs.append([{"role": x["role"], "content": x["content"]} for x in m])
    ok = np.array([isinstance(r, str) and bool(r.strip()) for r in responses], dtype=bool)
    return prompts, responses, convs, ok


def inputs_checksum(table: pa.Table) -> str:
    """Content id of what the models read (conversation and completion), not of the verdicts:
    re-grading leaves it unchanged, so cached scores are reused."""
    cols = [c for c in ("prompt", "messages", "final_text") if c in table.column_names]
    return table_checksum(table.select(cols), "rmin")


def score_inputs(model: Scorer, prompts: Sequence[str], responses: Sequence[str],
                 convs: Sequence[list[dict[str, str]] | None], ok: np.ndarray,
                 unit: Unit | None = None) -> np.ndarray:
    """Scores (NaN where ``ok`` is False). A model with ``score_conversations`` (a chat-template
    model) gets multi-turn conversations whole, rendered by its template once; others, and
    single-turn rows, get ``(prompt, completion)``. With a progress ``unit``, it advances per
    batch the model scores, by ``len(prompts)`` rows in all (unscorable rows at the end).

    Example:
        >>> from assay.reward.function import FunctionRewardModel
        >>> m = FunctionRewardModel(lambda prompt, completion: float(len(completion)), name="len")
        >>> score_inputs(m, ["Q", "Q"], ["ab", " "], [None, None], np.array([True, False]))
        array([ 2., nan])
    """
    out = np.full(len(prompts), np.nan)
    idx = np.flatnonzero(ok)
    by_conversation = getattr(model, "score_conversations", None)  # optional on an adapter
    conv_idx = ([int(i) for i in idx if convs[int(i)] is not None]
                if by_conversation is not None else [])
    plain = np.setdiff1d(idx, np.asarray(conv_idx, dtype=np.int64))

    def scored(rows: int, fn: Callable[..., np.ndarray], *args: object) -> np.ndarray:
        if unit is None:
            return fn(*args)
        adv = RowAdvance(unit, rows)  # the model's batches, mapped onto these rows
        with on_batches(adv):
            got = fn(*args)
        adv.finish()
        return got

    if plain.size:
        out[plain] = scored(int(plain.size), model.score, [prompts[i] for i in plain],
                            [responses[i] for i in plain])
    if conv_idx and by_conversation is not None:
        out[conv_idx] = scored(len(conv_idx), by_conversation, [convs[i] for i in conv_idx],
                               [responses[i] for i in conv_idx])
    if unit is not None and len(prompts) > idx.size:
        unit.advance(len(prompts) - int(idx.size))  # empty completions: nothing to score
    return out


def clear_model_cache() -> None:
    """Forget the adapters built in this process (the next shard builds its model again)."""
    with _MODELS_LOCK:
        _MODELS.clear()


def forget_worker(worker: ScoringWorker) -> None:
    """Forget the models ``worker`` holds (it is closing: later shards build their own)."""
    from assay.reward.worker import RemoteModel

    with _MODELS_LOCK:
        for key in [k for k, m in _MODELS.items()
                    if isinstance(m, RemoteModel) and m.worker is worker]:
            del _MODELS[key]


def _planned_device(mspec: RewardModelEntry, identity: object) -> str:
    """Where the model is (or will be) loaded, known before loading it, so the device slot is
    held while the weights move to the GPU too: a Python function runs on the CPU."""
    built = _MODELS.get(combine("rmid", identity))
    if built is not None:
        return device_of(built)
    device = model_device(mspec)
    if device is None:
        return "cpu"
    from assay.reward.runtime import resolve_device

    return resolve_device(device)


def _model(mspec: RewardModelEntry, spec: StudySpec, identity: object,
           worker: ScoringWorker | None = None) -> Scorer:
    """The built adapter, loaded once per process even when a preload (:func:`preload`) and
    a shard ask for it at once: the second waits for the first's load (its waker: the loader's
    ``finally``; if that load failed, the waiter loads it itself and sees the error). With a
    ``worker`` (:class:`assay.reward.worker.ScoringWorker`), a model other than a ``function``
    is built there and the cache holds its :class:`~assay.reward.worker.RemoteModel`."""
    key = combine("rmid", identity)
    while True:
        with _MODELS_LOCK:
            if key in _MODELS:
                return _MODELS[key]
            loading = _LOADING.get(key)
            if loading is None:
                loading = _LOADING[key] = threading.Event()
                break
        loading.wait()
    try:
        if worker is not None and model_device(mspec) is not None:
            built = worker.load(mspec, spec.paths)
        else:
            built = mspec.build(spec.paths)
        with _MODELS_LOCK:
            while len(_MODELS) >= 2:
                _MODELS.pop(next(iter(_MODELS)))
            _MODELS[key] = built
        return built
    finally:
        with _MODELS_LOCK:
            _LOADING.pop(key, None)
        loading.set()


def preload(spec: StudySpec, worker: ScoringWorker | None = None) -> None:
    """Build the study's scoring models now (into this process's cache; in ``worker``'s
    process when given), so the first score-rows shard finds them loaded: the graph calls it on
    a background thread while the model server generates, when the cores would otherwise idle.
    A failure here is left for the shard to raise, with its own context."""
    assert spec.reward is not None
    for mspec in spec.reward.scoring_models():
        try:
            _model(mspec, spec, model_identity(mspec, spec.paths), worker)
        except Exception:  # noqa: BLE001 - the shard loads it again and reports the error
            return


def _cached_scores(store: Store, key: str) -> np.ndarray | None:
    """A shard's scores as versions before the per-row journal cached them (one table per
    shard's inputs), or None."""
    ref = store.get_ref(f"assay-rowscores/{key}")
    if ref is None:
        return None
    t = store.get_table(ref["blob"])
    if t is None:
        return None
    return t.column("score").to_numpy(zero_copy_only=False).astype(np.float64)


def model_identity(mspec: RewardModelEntry, paths: Paths) -> dict[str, Any]:
    """A reward model entry's identity in every row-score key: its own, plus its kind's
    :data:`KIND_PROTOCOL` where it has one.

    Example:
        >>> class Entry:  # what a `kind: hf` entry's identity() returns, less its file digests
        ...     def identity(self, paths): return {"kind": "hf", "params": {}}
        >>> model_identity(Entry(), None)
        {'kind': 'hf', 'params': {}, 'scoring': 2}
    """
    ident = mspec.identity(paths)
    version = KIND_PROTOCOL.get(str(ident.get("kind")))
    return ident if version is None else {**ident, "scoring": version}


def journal_id(identity: object) -> str:
    """The journal one reward model's row scores are committed to (its identity, a JSON value, and
    :data:`ROW_PROTOCOL`; whatever study, source or shard asked).

    Example:
        >>> journal_id(["len", {"function": "m:f"}]) == journal_id(["len", {"function": "m:f"}])
        True
    """
    return content_hash({"rowscores": identity, "protocol": ROW_PROTOCOL}, "rsjournal")


def row_key(journal: str, prompt: str, conversation: list[dict[str, str]] | None,
            completion: str) -> str:
    """The cache key of one row's score in ``journal`` (:func:`journal_id`, which holds the model
    identity and protocol): everything the model reads of the row, and nothing else (no verdict,
    reference, metadata or position), so a regraded or re-sharded row finds its score.

    Example:
        >>> j = journal_id(["len", {}])
        >>> row_key(j, "Q", None, "A") == row_key(j, "Q", None, "A") != row_key(j, "Q", None, "B")
        True
    """
    return content_hash({"journal": journal, "prompt": prompt, "conversation": conversation,
                         "completion": completion}, "rs")


def journal_file(identity: object) -> str:
    """The store-relative path of a model's row-score journal (the stage's summary names it, so
    ``assay store gc`` keeps it with the stage)."""
    return f"journals/{journal_id(identity).split(':', 1)[1]}.jsonl"


def attach_markers(table: pa.Table, scores: dict[str, np.ndarray], *, where: str) -> pa.Table:
    """The table with each ``{marker: scores}`` added to the rows' markers (NaN: left out).

    Example:
        >>> import assay
        >>> t = attach_markers(assay.rows(["Q"], [["A", "B"]]).to_arrow(),
        ...                    {"rm:x": np.array([0.5, np.nan])}, where="demo")
        >>> t.column("markers").to_pylist()
        [[('rm:x', 0.5)], []]
    """
    old = table.column("markers").to_pylist()
    new = []
    for i, m in enumerate(old):
        d = dict(m or ())
        for name, s in scores.items():
            if name in d:
                raise RowsError(f"{where} row {i}: already has a marker {name!r}; the reward "
                                f"model's scores go there: rename the model or the marker")
            if not np.isnan(s[i]):
                d[name] = float(s[i])
        new.append(sorted(d.items()))
    pos = table.column_names.index("markers")
    return table.set_column(pos, pa.field("markers", MARKERS_TYPE),
                            pa.array(new, type=MARKERS_TYPE))


def _json_score(v: float) -> float | str | None:
    """A score as its journal line holds it. JSON has no NaN or infinity: a plugin adapter's NaN
    (the row gets no marker) is kept as null, an infinity as "inf"/"-inf" (:func:`_read_score`).

    Example:
        >>> [_read_score(_json_score(x)) for x in (0.1, float("-inf"))], _json_score(float("nan"))
        ([0.1, -inf], None)
    """
    f = float(v)
    if np.isnan(f):
        return None
    return f if np.isfinite(f) else str(f)


def _read_score(v: float | str | None) -> float:
    return np.nan if v is None else float(v)


def _journalled_scores(store: Store, ident: object, inputs: ScoringInputs, old_key: str,
                       score: Callable[[list[int], Unit], np.ndarray], unit: Unit
                       ) -> tuple[np.ndarray, int]:
    """One model's scores of a shard's rows (NaN where a row cannot be scored) and how many
    distinct inputs it scored now: journalled ones read by key, the rest from an earlier
    version's per-shard cache (``old_key``) if it has this shard, else scored by
    ``score(idx, unit)`` (``idx``: the rows to score; called only when some are missing) in
    chunks of :data:`COMMIT_ROWS`, each chunk committed to the journal as it is scored.

    The missing inputs are claimed first (:class:`assay.models.claims.Claims`, on the journal):
    another run on this store scoring the same inputs right now scores each once, and this one
    waits for its answers in the journal (taking over those whose claimant died)."""
    from assay.models.claims import Claims
    from assay.models.journal import Journal

    prompts, responses, convs, ok = inputs
    n = len(prompts)
    jid = journal_id(ident)
    keys = {int(i): row_key(jid, prompts[i], convs[i], responses[i]) for i in np.flatnonzero(ok)}
    journal = Journal(store, jid)
    out = np.full(n, np.nan)
    todo: dict[str, list[int]] = {}  # a key never journalled -> its rows (duplicates: once)

    def read(found: dict[str, dict[str, Any]]) -> None:
        for k, rec in found.items():
            out[todo[k]] = _read_score(rec["score"])

    try:
        done = journal.lookup(keys.values())
        for i, k in keys.items():
            rec = done.get(k)
            if rec is not None:
                out[i] = _read_score(rec["score"])
            else:
                todo.setdefault(k, []).append(i)
        if todo:
            old = _cached_scores(store, old_key)
            if old is not None and len(old) == n:  # migration: no model call, kept per row now
                for k, rows in todo.items():
                    out[rows] = old[rows[0]]
                    journal.append({"key": k, "score": _json_score(old[rows[0]])})
                todo = {}
        unit.advance(n - len(todo))  # read, duplicates of a scored input, unscorable
        n_new = 0
        if todo:
            claims = Claims(store, journal.rel)
            try:
                rest = list(todo)
                while rest:
                    # one claim write and one listing: all it costs when no other run scores
                    mine = claims.claim(rest)
                    # answered by a claimant that released between our lookup and our claim
                    # (its journal lines precede its release, so this look finds them)
                    fresh = journal.lookup(mine)
                    read(fresh)
                    unit.advance(len(fresh))
                    send = [k for k in mine if k not in fresh]
                    claims.drop(fresh)
                    for lo in range(0, len(send), COMMIT_ROWS):
                        chunk = send[lo:lo + COMMIT_ROWS]
                        idx = [todo[k][0] for k in chunk]
                        got = score(idx, unit)
                        for k, v in zip(chunk, got):
                            out[todo[k]] = v
                            journal.append({"key": k, "score": _json_score(v)})
                        # published (object store) before the claim on them goes
                        journal.close()
                        claims.drop(chunk)
                        n_new += len(chunk)
                    rest = _await_others(claims, journal, [k for k in rest if k not in mine],
                                         read, unit, store)
            finally:
                try:
                    journal.close()  # its scores published before the claim goes
                finally:
                    claims.release()  # even unpublished: a waiter then scores them itself
    finally:
        journal.close()
    return out, n_new


def _await_others(claims: Claims, journal: Journal, wait: list[str],
                  read: Callable[[dict[str, dict[str, Any]]], None], unit: Unit,
                  store: Store) -> list[str]:
    """Wait until another run's scores of the inputs ``wait`` are journalled (``read`` each as
    it arrives); the ones whose claim went with no score journalled (its holder died, its lease
    lapsed; it failed; or both runs yielded the key to each other) are returned, to be claimed
    again. The claim listing precedes the journal look: a claimant journals before it releases,
    so a key unclaimed at the listing and unscored at the look was never scored."""
    from assay import stop
    from assay.models.claims import poll_s

    left = set(wait)
    while left:
        held = claims.held_by_others(left)  # our claim rewritten first: the yielded keys go
        found = journal.lookup(left)
        read(found)
        unit.advance(len(found))
        left.difference_update(found)
        free = [k for k in wait if k in left and k not in held]
        if free:
            # a random pause: two runs that each yielded a key to the other do not meet again
            stop.wait(random.uniform(0, poll_s(store)))
            stop.check()
            return [k for k in wait if k in left]
        if stop.wait(poll_s(store)):
            stop.check()
    return []


def run_score_rows(ctx: RunContext, graded: StageResult, shard: Shard) -> StageResult:
    """One graded shard of source ``ctx.source``, with every scoring model's ``rm:<model>``
    marker added.

    Keyed on the shard's rows and the models' identities (weights, tokenizer, template digests
    or function source; never the name alone). Inside, each row's score is read from the model's
    row-score journal when this model already scored this exact input (:func:`row_key`), and the
    rest are computed (holding ``ctx.device_slot(device)``, a ``gpu`` slot from the Prefect task
    on CUDA, while the model loads and scores) and journalled as they arrive.
    """
    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    device_slot = ctx.device_slot
    assert spec.reward is not None
    models = spec.reward.scoring_models()
    identities = [[m.name, model_identity(m, spec.paths)] for m in models]
    table = load_rows(store, graded).to_arrow()
    label = shard.label(source_name) if shard.count > 1 else source_name

    def compute() -> Computed:
        with track(STAGE, label, total=table.num_rows * len(models)) as unit:
            return _compute(unit)

    def _compute(unit: Unit) -> Computed:
        inputs = scoring_inputs(table)
        prompts, responses, convs, ok = inputs
        texts = inputs_checksum(table)
        scores: dict[str, np.ndarray] = {}
        how: dict[str, str] = {}
        scored: dict[str, int] = {}
        for mspec, (_, ident) in zip(models, identities):
            # the slot is taken, and the model loaded, only when some row needs scoring; held
            # (the ExitStack) until this model's last chunk is scored and journalled
            with contextlib.ExitStack() as held:
                loaded: list[Scorer] = []

                def score(idx: list[int], unit: Unit, mspec: RewardModelEntry = mspec,
                          ident: object = ident, held: contextlib.ExitStack = held,
                          loaded: list[Scorer] = loaded
                          ) -> np.ndarray:
                    if not loaded:
                        if device_slot:
                            held.enter_context(device_slot(_planned_device(mspec, ident)))
                        # a load takes seconds to minutes: the bar says so, not "0/N, ETA ?"
                        unit.set_phase(f"loading reward model {mspec.name}")
                        try:
                            loaded.append(_model(mspec, spec, ident))
                        finally:
                            unit.set_phase(None)
                    return score_inputs(loaded[0], [prompts[i] for i in idx],
                                        [responses[i] for i in idx], [convs[i] for i in idx],
                                        np.ones(len(idx), dtype=bool), unit)

                got, n_new = _journalled_scores(
                    store, ident, inputs, combine("rowscores", ident, texts, ROW_PROTOCOL),
                    score, unit)
            name = marker_name(mspec.name)
            how[name] = "computed" if n_new else "cached"
            scored[name] = n_new
            scores[name] = got
        out = attach_markers(table, scores, where=f"source {source_name!r}")
        return {"rows": Rows(out)}, {"rows": len(out), "scores": how, "scored": scored,
                                     "unscored": int((~ok).sum()),
                                     # `assay store gc` keeps the journals a live stage names
                                     "journals": [journal_file(i) for _, i in identities]}

    return cached_stage(store, STAGE, inputs=[graded.checksums["rows"]],
                        params={"protocol": ROW_PROTOCOL}, fingerprint=identities,
                        compute=compute, label=label, progress=ctx.progress)


def _scored(spec: StudySpec, source: str) -> bool:
    """The sources ``reward.score`` names: their rows get the markers after their mode's stages."""
    score = spec.reward.score if spec.reward is not None else None
    return score is not None and source in score.sources


def _slots(spec: StudySpec, source: str) -> tuple[str, ...]:
    return scoring_slots(spec.reward.scoring_models() if spec.reward is not None else [])


declare(Stage(STAGE, 1, "shard", run_score_rows,
              reads=("filter-rows", "grade", "score-choices", "score-documents"),
              slots=_slots, device=True, applies=_scored, loads_models=True))
