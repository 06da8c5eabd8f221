"""The score-reward-model stage: each reward model the spec names, audited on preference data
(the built-in diagnostic set, or your own pairs: one audit row per axis).

Keyed on the model's identity (weight, tokenizer and template digests; never its name) and the
audited views' checksums. The reward-model kinds live in ``assay.reward.kinds``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from assay.progress import track
from assay.spec import StudySpec
from assay.stages.cache import StageResult, cached_stage
from assay.stages.declare import RunContext, Stage, declare
from assay.stages.score_rows import model_identity
from assay.stages.seams import Computed
from assay.stages.slots import device_of, scoring_slots

if TYPE_CHECKING:
    from assay.reward.auditing import Audit
    from assay.reward.prefdata import PreferenceViews

STAGE = "score-reward-model"  # declared at the end


def preference_views(spec: StudySpec) -> PreferenceViews:
    """The audited views with what the report says about them (source, seed-id fallback)."""
    assert spec.reward is not None and spec.reward.data is not None
    return spec.reward.data.load(spec.paths)


def run_reward_audit(ctx: RunContext, model_name: str) -> StageResult:
    """Audit one reward model on the diagnostic set; keyed on the model's identity (weights,
    tokenizer, template digests) and the views' checksums, never on its name.

    ``ctx.device_slot(device)`` returns a context manager held while the model scores (the
    Prefect task passes a strict ``gpu`` concurrency slot; this core library never imports
    Prefect)."""
    from assay.report import result_doc

    store, spec, device_slot = ctx.store, ctx.spec, ctx.device_slot
    assert spec.reward is not None  # the chain audits only when the spec has reward models
    mspec = next(m for m in spec.reward.models if m.name == model_name)
    loaded = preference_views(spec)
    views = loaded.views
    inputs = [[k, v.checksum()] for k, v in views.items()]

    def compute() -> Computed:
        from assay.reward import audit

        with track(STAGE, model_name, total=sum(len(v) for v in views.values())) as unit:
            unit.set_phase(f"loading reward model {model_name}")  # not "0/N, ETA ?"
            try:
                model = mspec.build(spec.paths)
            finally:
                unit.set_phase(None)
            slot = (device_slot(device_of(model)) if device_slot
                    else contextlib.nullcontext())
            with slot:
                res = audit(model, views, store=store, unit=unit)  # advances per batch
        notes = loaded.notes()
        doc = result_doc("reward_audit", model_name, res, dimensions=_audit_dimensions(res),
                         fingerprint=model.fingerprint, notes=notes)
        if notes:
            doc["report"] += "".join(f"\nnote: {n}" for n in notes)
        return {"audit": doc}, {"rows": sum(len(v) for v in views.values())}

    # the scoring protocol of its kind too (hf: each input alone since issue 49's per-row
    # scores), so an audit scored the old way is scored again, as the row scores are
    return cached_stage(store, STAGE, inputs=inputs, params={"name": model_name},
                        fingerprint=model_identity(mspec, spec.paths), compute=compute,
                        label=model_name,
                        progress=ctx.progress)


def _audit_dimensions(res: Audit) -> list[dict[str, Any]]:
    """Per-dimension pair accuracy (with interval and n) and baseline, for the plot."""
    from assay.report import collect_estimates

    out = []
    for d in res.dimensions:
        name = d.dimension
        ests = collect_estimates(d)
        acc = next((e for e in ests if "acc" in e["name"] or "acc" in e["path"]), None)
        base = next((e for e in ests if "baseline" in e["name"] or "baseline" in e["path"]), None)
        if acc:
            out.append({**acc, "dimension": str(name), "baseline": base["value"] if base else None})
    return out


def _audited(spec: StudySpec) -> list[str]:
    """The reward models audited on the diagnostic set (``reward.data``): one node each."""
    return [m.name for m in spec.reward.models] if spec.reward and spec.reward.data else []


def _slots(spec: StudySpec, model_name: str) -> tuple[str, ...]:
    assert spec.reward is not None
    return scoring_slots([m for m in spec.reward.models if m.name == model_name])


declare(Stage(STAGE, 1, "study", run_reward_audit, slots=_slots, device=True, each=_audited))
