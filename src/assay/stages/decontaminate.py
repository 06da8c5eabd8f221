"""The decontaminate stage: eval-side contamination of the sources' prompts against a corpus,
with pass@1 on the full set next to the clean subset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assay.hashing import file_checksum
from assay.progress import track
from assay.spec import StudySpec
from assay.stages.cache import (
    StageResult,
    cached_stage,
    concat_rows,
    graded_checksums,
)
from assay.stages.declare import RunContext, Stage, declare
from assay.stages.seams import Computed

STAGE = "decontaminate"  # declared at the end


def run_decontaminate(ctx: RunContext, graded: Mapping[str, Sequence[StageResult]]
                      ) -> StageResult:
    """Eval-side contamination of each checked source against the spec's corpus, with pass@1
    on the full set and on the clean subset (``graded``: the checked sources' graded rows)."""
    from assay.report import collect_estimates, result_doc

    store, spec = ctx.store, ctx.spec
    d = spec.decontaminate
    assert d is not None  # the plan runs this stage only when the spec has decontaminate:
    names = _checked(spec)
    params = d.model_dump(mode="json", exclude={"corpus", "sources"})
    corpus_sums = [file_checksum(spec.resolve(c)) for c in d.corpus]

    def compute() -> Computed:
        import assay.decontam as dc

        paths = [str(spec.resolve(c)) for c in d.corpus]
        docs, n_rows = [], 0
        with track(STAGE, ",".join(names), total=len(names)) as unit:  # one per source checked
            for name in names:
                rows = concat_rows(store, graded[name])
                n_rows += len(rows)
                rep = dc.contamination(rows, paths, n=d.n, text_field=d.text_field,
                                       id_field=d.id_field, store=store, **d.params)
                extra: dict[str, Any] = {"source": name}
                split = rep.rescore(rows)  # pass@1 on the full set next to the clean subset
                extra["clean_report"] = split.report()
                extra["clean_estimates"] = collect_estimates(split.clean)
                docs.append(result_doc("contamination", f"contamination[{name}]", rep, **extra))
                unit.advance(1)
        return {"contamination": docs}, {"rows": n_rows}

    return cached_stage(store, STAGE, inputs=graded_checksums(graded, names) + corpus_sums,
                        params=params, compute=compute, label=",".join(names),
                        progress=ctx.progress)


def _checked(spec: StudySpec) -> list[str]:
    """The sources whose prompts are checked (``decontaminate.sources``, default all)."""
    assert spec.decontaminate is not None
    return list(spec.decontaminate.sources or [s.name for s in spec.sources])


def _wanted(spec: StudySpec) -> bool:
    return bool(spec.decontaminate)


def _cores(spec: StudySpec, item: str) -> tuple[str, ...]:
    return ("cores",)


declare(Stage(STAGE, 1, "study", run_decontaminate, reads=("graded",), slots=_cores,
              when=_wanted, sources=_checked))
