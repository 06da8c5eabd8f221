"""The study stages as plain functions, one module per stage, each cached on its checksum chain.

``cache`` (keys, pointers, verified loads, progress), ``declare`` (what a stage declares:
:class:`Stage`, the :data:`STAGES` registry, the :class:`RunContext` and :class:`Shard` its
function takes), one module per stage (``build_rows``, ``filter_rows``, ``generate``,
``grade``, ``score_choices``, ``score_documents``, ``score_rows``, ``decontaminate``,
``score_reward_model``, ``measure``, ``report``), each ending with its declaration; ``modes``
(each source mode's shard stages), ``wiring`` (the study graph derived from both), ``graph``
(a small DAG runner and its start policy), ``plan`` (running a study: ``run_study``) and
``chain`` (the same graph one node at a time, ``run_chain``, the reference). The Prefect tasks
in ``tasks/`` are derived from :data:`STAGES` too.

Example:
    >>> import assay
    >>> r = assay.rows(["a", "b", "c"], [["x", "y"], ["z"], ["w"]], [[1, 0], [1], [0]])
    >>> len(apply_row_steps(r, [{"op": "slice", "start": 1, "stop": 3}]))
    2
    >>> stage_key("grade", ["rows:1"], {}) != stage_key("grade", ["rows:2"], {})
    True
"""

from assay.sources.records import rows_from_records
from assay.stages.build_rows import run_build_rows
from assay.stages.cache import (
    STAGE_VERSIONS,
    StageResult,
    cached_stage,
    concat_rows,
    define_stage,
    graded_checksums,
    load_doc,
    load_rows,
    lookup,
    print_progress,
    stage_key,
    summarize,
)
from assay.stages.chain import StudyRun, direct_call, run_chain
from assay.stages.declare import STAGES, RunContext, Shard, Stage, declare
from assay.stages.decontaminate import run_decontaminate
from assay.stages.filter_rows import apply_row_steps, run_filter_rows
from assay.stages.generate import generation_facts, run_generate_shard
from assay.stages.grade import run_grade_shard, shard_bounds, verifier_fingerprint
from assay.stages.graph import Graph, GraphRun, Node, ThreadExecutor, run_graph
from assay.stages.measure import run_measure
from assay.stages.plan import max_parallel_for, run_study
from assay.stages.report import report_files, run_report
from assay.stages.score_choices import run_score_choices
from assay.stages.score_documents import run_score_documents
from assay.stages.score_reward_model import run_reward_audit
from assay.stages.score_rows import run_score_rows
from assay.stages.wiring import study_graph

__all__ = [
    "STAGES", "STAGE_VERSIONS", "Graph", "GraphRun", "Node", "RunContext", "Shard", "Stage",
    "StageResult", "StudyRun", "ThreadExecutor",
    "apply_row_steps", "cached_stage", "concat_rows", "declare", "define_stage", "direct_call",
    "generation_facts", "graded_checksums", "load_doc", "load_rows", "lookup", "max_parallel_for",
    "print_progress", "report_files", "rows_from_records", "run_build_rows", "run_chain",
    "run_decontaminate", "run_filter_rows", "run_generate_shard", "run_graph", "run_grade_shard",
    "run_measure", "run_report", "run_reward_audit", "run_score_choices", "run_score_documents",
    "run_score_rows", "run_study", "shard_bounds", "study_graph",
    "stage_key", "summarize",
    "verifier_fingerprint",
]
