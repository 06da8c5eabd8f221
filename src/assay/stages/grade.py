"""The grade stage: one shard of a source's rows graded by its verifier (the resume unit).

Shards never split a task; each is cached on its own rows' checksum and the verifier's identity.
"""

from __future__ import annotations

from typing import Any

from assay.hashing import code_checksum
from assay.progress import track
from assay.spec import StudySpec
from assay.stages.cache import ShardRows, StageResult, cached_stage
from assay.stages.declare import RunContext, Shard, Stage, declare
from assay.stages.declare import shard_bounds as shard_bounds  # cut by the shard: re-exported
from assay.stages.seams import Computed
from assay.verify.spec import VerifierSpec

STAGE = "grade"  # declared at the end


def verifier_fingerprint(vspec: VerifierSpec, spec: StudySpec | None = None) -> dict[str, Any]:
    """The verifier's identity for cache keys: kind, params, and the checksum of the module
    that implements it (editing a verifier's code recomputes its grades). A verifier class with
    ``cache_identity(**params)`` adds what its params cannot say (the model judge: what its
    server reports for the judge model), so a new judge checkpoint re-grades; one with
    ``spec_fingerprint`` (``function``: your grader's module source, or its ``version``) adds
    what it says."""
    base = spec.base_dir if spec is not None else None
    obj = vspec._impl(base)
    fp = {"kind": vspec.kind, "params": vspec.params, "code": code_checksum(obj.__module__)}
    ident = getattr(obj, "cache_identity", None)
    if callable(ident):
        fp["identity"] = ident(**vspec.params)
    own = getattr(obj, "spec_fingerprint", None)
    if callable(own):
        fp["own"] = own(vspec, base)
    return fp


def run_grade_shard(ctx: RunContext, rows: StageResult, shard: Shard) -> StageResult:
    """Grade rows ``shard.bounds`` of source ``ctx.source`` with its verifier (on
    ``ctx.workers`` processes); cached per shard content."""
    from assay.grading import grade

    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    vspec = spec.source(source_name).verifier
    assert vspec is not None  # the modes grade only the sources that name a verifier
    lo, hi = shard.bounds
    part = ShardRows(store, rows, shard.bounds, shard.checksum)  # read only if it computes
    label = shard.label(source_name)

    def compute() -> Computed:
        from assay.unjudged import check_shard

        verifier = vspec.build(spec.base_dir)
        known = None
        if ahead is not None:  # verdicts given while the shard was generating (stream.py)
            from assay.rows import table_to_records

            known = ahead.known(source_name, shard.index,
                                lambda: table_to_records(part.rows.to_arrow()))
        with track(STAGE, label, total=len(part.rows)):  # grading advances it per row
            graded = grade(part.rows, verifier, workers=ctx.workers, known=known)
        check_shard(graded, getattr(verifier, "name", None) or vspec.kind,
                    f"grade[{source_name}] shard {shard.index + 1}/{shard.count}", offset=lo)
        return {"rows": graded}, {"rows": len(graded)}

    # The shard's own content is its input, so a filter that keeps this shard's rows as they
    # were (e.g. a longer slice) does not re-grade it.
    ahead = ctx.pregrader  # the run's, if it grades ahead (a copy of ctx carries the same)
    try:
        return cached_stage(store, STAGE, inputs=[part.checksum()],
                            params={"verifier": verifier_fingerprint(vspec, spec)},
                            compute=compute, label=label,
                            progress=ctx.progress)
    finally:
        if ahead is not None:
            ahead.drop(source_name, shard.index)


def _cores(spec: StudySpec, item: str) -> tuple[str, ...]:
    """Grading uses every core (its own worker processes): one shard at a time."""
    return ("cores",)


declare(Stage(STAGE, 1, "shard", run_grade_shard, reads=("filter-rows", "generate"),
              slots=_cores, grades_ahead=True))
