"""The study stages as plain functions, each cached in the content store on its checksum chain.

Prefect tasks in ``tasks/`` wrap the ``run_*`` functions; ``run_study`` chains them directly.

Layout: ``cache`` (keys, pointers, verified loads, progress), ``sources`` (build-rows,
filter-rows, grade), ``analysis`` (decontaminate, score-reward-model, measure, report),
``chain`` (``run_study``).

Example:
    >>> import assay
    >>> r = assay.rows(["a", "b", "c"], [["x", "y"], ["z"], ["w"]], [[1, 0], [1], [0]])
    >>> len(apply_row_steps(r, [{"op": "slice", "start": 1, "stop": 3}]))
    2
    >>> stage_key("grade", ["rows:1"], {}) != stage_key("grade", ["rows:2"], {})
    True
"""

from assay.stages.analysis import (
    make_reward_model,
    model_identity,
    report_files,
    reward_views,
    run_decontaminate,
    run_measure,
    run_report,
    run_reward_audit,
)
from assay.stages.cache import (
    STAGE_ORDER,
    STAGE_VERSIONS,
    StageResult,
    cached_stage,
    load_doc,
    load_rows,
    lookup,
    print_progress,
    stage_key,
    summarize,
)
from assay.stages.chain import StudyRun, direct_call, direct_map, run_study
from assay.stages.sources import (
    apply_row_steps,
    build_source_rows,
    code_checksum,
    concat_rows,
    make_verifier,
    rows_from_records,
    run_build_rows,
    run_filter_rows,
    run_grade_shard,
    shard_bounds,
    source_params,
    verifier_fingerprint,
)

__all__ = [
    "STAGE_ORDER", "STAGE_VERSIONS", "StageResult", "StudyRun", "apply_row_steps",
    "build_source_rows", "cached_stage", "code_checksum", "concat_rows", "direct_call",
    "direct_map", "load_doc", "load_rows", "lookup", "make_reward_model", "make_verifier",
    "model_identity", "print_progress", "report_files", "reward_views", "rows_from_records",
    "run_build_rows", "run_decontaminate", "run_filter_rows", "run_grade_shard", "run_measure",
    "run_report", "run_reward_audit", "run_study", "shard_bounds", "source_params", "stage_key",
    "summarize", "verifier_fingerprint",
]
