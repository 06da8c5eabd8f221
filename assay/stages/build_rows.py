"""The build-rows stage: a source's ungraded (or given-score) rows, from its registered kind.

Keyed on the source's identity (its definition, file contents, code checksums), never its name.
"""

from __future__ import annotations

from typing import Any

from assay.errors import SpecError
from assay.sources.base import SourceSpec
from assay.spec import StudySpec
from assay.stages.cache import StageResult, cached_stage, define_stage
from assay.store import Store

STAGE = define_stage("build-rows", 1)


def source_named(spec: StudySpec, name: str) -> SourceSpec:
    """The spec's source called ``name``."""
    for s in spec.sources:
        if s.name == name:
            return s
    raise SpecError(f"no source named {name!r}; sources are {[s.name for s in spec.sources]}")


def run_build_rows(store: Store, spec: StudySpec, source_name: str, *,
                   progress: Any = None) -> StageResult:
    """Build one source's rows (cached on what determines them)."""
    source = source_named(spec, source_name)

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        r = source.build_rows(spec)
        return {"rows": r}, {"rows": len(r)}

    return cached_stage(store, STAGE, inputs=[], params=source.identity(spec), compute=compute,
                        label=source_name, progress=progress)
