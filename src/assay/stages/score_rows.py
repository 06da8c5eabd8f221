"""The score-rows stage: each scoring reward model scores every completion of one graded shard,
and the scores land in the rows as markers ``rm:<model>`` that measure reads like any marker.

The stage is keyed on the shard's rows and the models' identities; the scores themselves are
cached apart, per (model identity, scoring inputs, scoring protocol), so a new verifier or a new
filter upstream re-attaches cached scores and only completions the model never saw are scored.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from assay.errors import RowsError
from assay.hashing import combine
from assay.progress import Unit, track
from assay.reward.batching import RowAdvance, on_batches
from assay.rows import MARKERS_TYPE, Rows, table_checksum
from assay.spec import StudySpec
from assay.stages.cache import StageResult, cached_stage, load_rows
from assay.stages.declare import RunContext, Shard, Stage, declare
from assay.stages.slots import device_of, model_device, scoring_slots
from assay.store import Store

if TYPE_CHECKING:
    from assay.reward.base import RewardModel
    from assay.reward.kinds import RewardModelEntry
    from assay.reward.worker import ScoringWorker

STAGE = "score-rows"  # declared at the end

#: Bump when what a row's score means changes (which text a model sees, how conversations are
#: passed, which rows are left unscored): it is part of every row-score cache key.
ROW_PROTOCOL = 1
MARKER_PREFIX = "rm:"

_MODELS: dict[str, Any] = {}  # identity key -> built adapter: one load per process, not per shard
_LOADING: dict[str, threading.Event] = {}  # identity key -> set when the load in flight ends
_MODELS_LOCK = threading.Lock()


def marker_name(model_name: str) -> str:
    """The marker a reward model's row scores are stored under.

    Example:
        >>> marker_name("minilm")
        'rm:minilm'
    """
    return f"{MARKER_PREFIX}{model_name}"


def scoring_inputs(table: pa.Table
                   ) -> tuple[list[str], list[str], list[list[dict[str, str]] | None], np.ndarray]:
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


def score_inputs(model: RewardModel, prompts: Sequence[str], responses: Sequence[str],
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

    def scored(rows: int, fn: Any, *args: Any) -> np.ndarray:
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


def _planned_device(mspec: RewardModelEntry, identity: Any) -> str:
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


def _model(mspec: RewardModelEntry, spec: StudySpec, identity: Any,
           worker: ScoringWorker | None = None) -> Any:
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
            _model(mspec, spec, mspec.identity(spec.paths), worker)
        except Exception:  # noqa: BLE001 - the shard loads it again and reports the error
            return


def _cached_scores(store: Store, key: str) -> np.ndarray | None:
    ref = store.get_ref(f"assay-rowscores/{key}")
    if ref is None:
        return None
    t = store.get_table(ref["blob"])
    if t is None:
        return None
    return t.column("score").to_numpy(zero_copy_only=False).astype(np.float64)


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


def run_score_rows(ctx: RunContext, graded: StageResult, shard: Shard) -> StageResult:
    """One graded shard of source ``ctx.source``, with every scoring model's ``rm:<model>``
    marker added.

    Keyed on the shard's rows and the models' identities (weights, tokenizer, template digests
    or function source; never the name alone). Inside, each model's scores are read from the
    row-score cache when this model already scored these exact inputs, else computed (holding
    ``ctx.device_slot(device)``, a ``gpu`` slot from the Prefect task on CUDA) and stored there.
    """
    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    device_slot = ctx.device_slot
    assert spec.reward is not None
    models = spec.reward.scoring_models()
    identities = [[m.name, m.identity(spec.paths)] for m in models]
    table = load_rows(store, graded).to_arrow()
    label = shard.label(source_name) if shard.count > 1 else source_name

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        with track(STAGE, label, total=table.num_rows * len(models)) as unit:
            return _compute(unit)

    def _compute(unit: Unit) -> tuple[dict[str, Any], dict[str, Any]]:
        prompts, responses, convs, ok = scoring_inputs(table)
        texts = inputs_checksum(table)
        scores: dict[str, np.ndarray] = {}
        how: dict[str, str] = {}
        for mspec, (_, ident) in zip(models, identities):
            key = combine("rowscores", ident, texts, ROW_PROTOCOL)
            got = _cached_scores(store, key)
            if got is None or len(got) != len(prompts):
                slot = (device_slot(_planned_device(mspec, ident)) if device_slot
                        else contextlib.nullcontext())
                with slot:  # held while the model loads and scores
                    # a load takes seconds to minutes: the bar says so instead of "0/N, ETA ?"
                    unit.set_phase(f"loading reward model {mspec.name}")
                    try:
                        model = _model(mspec, spec, ident)
                    finally:
                        unit.set_phase(None)
                    got = score_inputs(model, prompts, responses, convs, ok, unit)
                blob = store.put_table(pa.table({"score": pa.array(got, pa.float64(),
                                                                   from_pandas=True)}))
                store.set_ref(f"assay-rowscores/{key}", blob,
                              {"model": mspec.name, "fingerprint": model.fingerprint,
                               "rows": len(prompts)})
                how[marker_name(mspec.name)] = "computed"
            else:
                how[marker_name(mspec.name)] = "cached"
                unit.advance(len(prompts))  # read whole from the row-score cache
            scores[marker_name(mspec.name)] = got
        out = attach_markers(table, scores, where=f"source {source_name!r}")
        return {"rows": Rows(out)}, {"rows": len(out), "scores": how,
                                     "unscored": int((~ok).sum())}

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
