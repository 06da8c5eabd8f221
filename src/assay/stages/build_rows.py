"""The build-rows stage: a source's ungraded (or given-score) rows, from its registered kind.

Keyed on the source's identity (its definition, file contents, code checksums), never its name.
"""

from __future__ import annotations

from typing import Any

from assay.spec import StudySpec
from assay.stages.cache import StageResult, cached_stage, lookup, stage_key
from assay.stages.declare import RunContext, Stage, declare
from assay.stages.seams import Computed
from assay.store import Store

STAGE = "build-rows"  # declared at the end


def run_build_rows(ctx: RunContext) -> StageResult:
    """Build source ``ctx.source``'s rows (cached on what determines them)."""
    store, spec, source_name = ctx.store, ctx.spec, ctx.source
    source = spec.source(source_name)

    def compute() -> Computed:
        r, info = source.build_stored(spec.paths)
        out: dict[str, object] = {"rows": r}
        if info:  # what was read (a dataset's revision, its records' checksum): for the report
            out["source_info"] = info
        return out, {"rows": len(r)}

    return cached_stage(
        store,
        STAGE,
        inputs=[],
        params=source.identity(spec.paths),
        compute=compute,
        label=source_name,
        progress=ctx.progress,
    )


def source_info(store: Store, spec: StudySpec, source_name: str) -> dict[str, Any] | None:
    """What a built source read (``SourceSpec.build``'s second value), from its stored
    build-rows entry; None when the source says nothing beyond its spec or was not built."""
    source = spec.source(source_name)
    doc = lookup(store, stage_key(STAGE, [], source.identity(spec.paths)))
    if doc is None or "source_info" not in doc["outputs"]:
        return None
    return store.get_json(doc["outputs"]["source_info"])


declare(Stage(STAGE, 1, "source", run_build_rows))
