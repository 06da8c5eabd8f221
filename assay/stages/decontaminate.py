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
    define_stage,
    graded_checksums,
)
from assay.store import Store

STAGE = define_stage("decontaminate", 1)


def run_decontaminate(store: Store, spec: StudySpec, graded: Mapping[str, Sequence[StageResult]], *,
                      progress: Any = None) -> StageResult:
    """Eval-side contamination of each checked source against the spec's corpus, with pass@1
    on the full set and on the clean subset."""
    from assay.report import collect_estimates, result_doc

    d = spec.decontaminate
    assert d is not None  # the plan runs this stage only when the spec has decontaminate:
    names = d.sources or [s.name for s in spec.sources]
    params = d.model_dump(mode="json", exclude={"corpus", "sources"})
    corpus_sums = [file_checksum(spec.resolve(c)) for c in d.corpus]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
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
                        params=params, compute=compute, label=",".join(names), progress=progress)
