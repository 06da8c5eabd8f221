"""The score-choices stage: a choice source's prompt rows become graded rows, one per question,
by the model's log-likelihood of each choice; cached per shard, each answer journalled.

Keyed on the shard's prompt rows, the delimiter and the scorer's identity (the model files'
checksum): a new checkpoint under the same path recomputes, a killed run resumes from the journal.

Each row's completion is the choice with the highest log-likelihood; ``reward`` is 1 when it is
the gold one (lm-eval's ``acc``); markers ``acc_norm`` and ``acc_bytes`` grade the choice with
the highest log-likelihood per character and per UTF-8 byte of the choice text (lm-eval's
``acc_norm`` and ``acc_bytes``); a row with ``privileged.loglikelihood`` (an lm-eval loglikelihood
task's one continuation) is graded by whether that continuation is greedy, and one with
``privileged.contexts`` (a multiple-input task) scores each choice's context with the shared
``privileged.continuation``. ``judge_meta`` keeps every choice's log-likelihood, raw and
normalized, its token count and whether it is the greedy continuation; an lm_eval source's
multiple_choice rows also get the task's own per-document metric items
(:mod:`assay.sources.lm_eval_mc`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from assay.rows import Rows, to_json
from assay.sources.base import ChoicesSource
from assay.stages.cache import ShardRows, StageResult, cached_stage
from assay.stages.declare import RunContext, Shard, Stage, declare
from assay.stages.seams import Computed
from assay.stages.slots import device_of, scoring_model_slots

if TYPE_CHECKING:
    from assay.store import Store

STAGE = "score-choices"  # declared at the end


def grade_choices(lls: list[float], choices: list[str], gold: int) -> dict[str, Any]:
    """The predictions and verdicts of one question from its choices' log-likelihoods (first
    maximum wins ties, as ``numpy.argmax`` in lm-eval).

    Example:
        >>> g = grade_choices([-4.0, -6.0], ["no", "maybe"], 1)
        >>> g["pred"], g["pred_norm"], g["acc"], g["acc_norm"]
        (0, 1, 0.0, 1.0)
        >>> grade_choices([-1.0, -2.0], ["", "x"], 0)["loglik_per_char"]
        [None, -2.0]
    """
    from assay.models.loglik import normalized
    from assay.results import finite_or_none

    ll = np.asarray(lls, dtype=np.float64)
    by_chars = [normalized(x, c, "chars") for x, c in zip(lls, choices)]
    by_bytes = [normalized(x, c, "bytes") for x, c in zip(lls, choices)]
    pred, pn, pb = int(np.argmax(ll)), int(np.argmax(by_chars)), int(np.argmax(by_bytes))
    return {"pred": pred, "pred_norm": pn, "pred_bytes": pb, "gold": gold,
            "acc": float(pred == gold), "acc_norm": float(pn == gold),
            "acc_bytes": float(pb == gold),
            "loglik": [float(x) for x in lls],
            # an empty choice text has no length: -inf in the argmax, null in JSON
            "loglik_per_char": [finite_or_none(x) for x in by_chars],
            "loglik_per_byte": [finite_or_none(x) for x in by_bytes]}


def score_choice_rows(rows: Rows, model: Any, *, target_delimiter: str = " ",
                      store: Store | None = None,
                      on_done: Callable[[int], None] | None = None) -> Rows:
    """Graded rows from choice prompt rows (``privileged`` holds ``choices`` and ``gold``, and
    may hold the ``delimiter`` that replaces ``target_delimiter``)."""
    import json

    from assay.models.loglik import loglikelihoods, shared_scorer

    table = rows.to_arrow()
    priv = [json.loads(p) for p in table.column("privileged").to_pylist()]
    prompts = table.column("prompt").to_pylist()
    pairs: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    for ctx, p in zip(prompts, priv):
        spans.append((len(pairs), len(pairs) + len(p["choices"])))
        # an lm_eval source's rows carry their task's own delimiter
        delim = p.get("delimiter", target_delimiter)
        if "contexts" in p:  # a multiple-input task (winogrande): a context per choice
            pairs += [(c, delim + p["continuation"]) for c in p["contexts"]]
        else:
            pairs += [(ctx, delim + c) for c in p["choices"]]
    scorer = shared_scorer(model)
    got = loglikelihoods(pairs, scorer, store=store, on_done=on_done)
    texts, rewards, metas = [], [], []
    markers: list[list[tuple[str, float]]] = []
    for (lo, hi), p in zip(spans, priv):
        g = grade_choices([a.logprob for a in got[lo:hi]], p["choices"], p["gold"])
        g["is_greedy"] = [a.is_greedy for a in got[lo:hi]]
        g["tokens"] = [a.tokens for a in got[lo:hi]]
        texts.append(p["choices"][g["pred"]])
        if "loglikelihood" in p:  # an lm-eval loglikelihood request: acc is is_greedy
            g = {k: g[k] for k in ("loglik", "is_greedy", "tokens")}
            g["acc"] = float(g["is_greedy"][0])
            g["loglikelihood"] = p["loglikelihood"]
            markers.append([])
        else:
            markers.append([("acc_norm", g["acc_norm"]), ("acc_bytes", g["acc_bytes"])])
        rewards.append(g["acc"])
        metas.append(to_json(g, "score-choices"))
    n = len(texts)
    ident = scorer.identity()
    name = f"loglik:{ident.get('path') or ident.get('model') or 'model'}"
    cols = {"final_text": pa.array(texts, pa.string()), "reward": pa.array(rewards, pa.float64()),
            "markers": pa.array(markers, table.schema.field("markers").type),
            "judge_name": pa.array([name] * n, pa.string()),
            "judge_status": pa.array(["ok"] * n, pa.string()),
            "judge_meta": pa.array(metas, pa.string())}
    for c, arr in cols.items():
        table = table.set_column(table.schema.get_field_index(c), c, arr)
    return Rows(table)


def run_score_choices(ctx: RunContext, filtered: StageResult, shard: Shard) -> StageResult:
    """Score the choices of prompt rows ``shard.bounds`` of choice source ``ctx.source``;
    cached per shard. ``ctx.device_slot(device)``: a context manager held while a local model
    scores (the Prefect task passes the ``gpu`` slot)."""
    from assay.models.loglik import shared_scorer

    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    device_slot = ctx.device_slot
    source = spec.source(source_name)
    # the mode table (assay.stages.modes) runs this stage for sources in choices mode only
    assert source.mode == "choices", source.mode
    cspec = cast(ChoicesSource, source).choices
    assert cspec is not None
    part = ShardRows(store, filtered, shard.bounds, shard.checksum)  # read if it computes
    scorer = shared_scorer(cspec.model)
    params: dict[str, Any] = {"target_delimiter": cspec.target_delimiter}
    lm_eval = source.lm_eval_task  # the task's files key the items: an edited
    if lm_eval:  # process_results recomputes them
        ident = source.identity(spec.paths)
        params["lm_eval_items"] = [ident.get("files"), ident.get("lm_eval")]

    label = shard.label(source_name)

    def compute() -> Computed:
        from assay.progress import track

        slot = (device_slot(device_of(scorer)) if device_slot is not None
                else contextlib.nullcontext())
        n_choices = sum(len(r["privileged"]["choices"]) for r in part.rows)
        with slot, track(STAGE, label, total=n_choices) as unit:
            out = score_choice_rows(part.rows, scorer, target_delimiter=cspec.target_delimiter,
                                    store=store, on_done=unit.advance)
        if lm_eval:  # the task's own metric items (lm-eval's process_results) per document
            from assay.sources.lm_eval_mc import add_lm_eval_items

            out = add_lm_eval_items(out, source, spec.paths)
        acc = out.to_arrow().column("reward").to_pylist()
        return {"rows": out}, {"rows": len(out), "choices": n_choices,
                               "acc": round(float(np.mean(acc)), 6)}

    return cached_stage(store, STAGE, inputs=[part.checksum()], params=params,
                        fingerprint=scorer.identity(), compute=compute,
                        label=label, progress=ctx.progress)


declare(Stage(STAGE, 1, "shard", run_score_choices, reads=("filter-rows",),
              slots=scoring_model_slots, device=True, asks_model=True))
