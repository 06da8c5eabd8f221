"""The run directory of a finished study run: report files, rows Parquet and run.json.

Written the same way whether the graph ran as a Prefect flow or was served from the store alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from assay.report import write_run_dir
from assay.spec import StudySpec
from assay.stages.cache import concat_rows, load_rows
from assay.stages.chain import StudyRun
from assay.stages.generate import generation_facts
from assay.stages.measure import nothing_judged
from assay.stages.report import report_files
from assay.store import Store
from assay.unjudged import failed_samples


def finish_run(store: Store, spec: StudySpec, run: StudyRun, out: Path,
               started: float | None = None, note: str | None = None,
               overrides: list[str] | None = None) -> dict[str, Any]:
    """Write the run directory (report files, rows Parquet, run.json) and return run.json.
    run.json lists the stage keys the run used: ``assay store gc`` keeps what kept runs list."""
    assert run.report is not None  # every study run ends with its report stage
    files = report_files(store, run.report)
    rows = {name: concat_rows(store, parts) for name, parts in run.graded.items()}
    measured = next((r for r in run.results if r.stage == "measure"), None)
    if measured is not None and "selected" in measured.outputs and spec.measure.select:
        # the rows select(mode="rl") kept: the training export carries only what a trainer may
        # see; the same rows with their references and verdict details stay under .graded
        selected = load_rows(store, measured, "selected")
        rows[f"selected-{spec.measure.select.source}"] = selected.training_table()
        rows[f"selected-{spec.measure.select.source}.graded"] = selected
    info: dict[str, Any] = {"study": spec.name, "spec_checksum": run.spec_checksum,
            "spec_definition": spec.definition_checksum(),
            "study_definition": spec.definition_content(),
            "cached": run.cached_stages, "computed": run.computed_stages,
            "store": store.describe(), "files": sorted(files),
            "stage_keys": sorted({r.key for r in run.results}),
            "started": started if started is not None else time.time()}
    if note:  # e.g. served from the store without a Prefect flow run
        info["orchestration"] = note
    failed = failed_samples({x.name: rows[x.name] for x in spec.sources if x.name in rows})
    if failed:  # gen_error rows: the numbers cover fewer samples; `assay run` exits EXIT_PARTIAL
        info["failed_samples"] = failed
    unjudged = nothing_judged(spec, rows)
    if unjudged:  # not one row of these could be judged: `assay run` exits EXIT_PARTIAL too
        info["nothing_judged"] = unjudged
    made = [r for r in run.results if r.stage == "generate"]
    if made:  # requests sent this run and their latency: wall-clock facts, not the report's
        # a stage served from the cache sent nothing this run, whatever its first run sent
        info["generation"] = generation_facts(made)
        info["sent"] = sum(g.get("sent") or 0 for g in info["generation"]["shards"].values())
        info["completions"] = sum(int(r.summary.get("rows") or 0) for r in made)
    info.update(run.facts)  # e.g. graded_ahead: rows graded while their shard generated
    if overrides:
        info["overrides"] = list(overrides)
    if spec.night is not None:
        info["night"] = spec.night
    tested = spec.model_under_test()
    if tested:
        from assay.nightly.under_test import records_of

        info["under_test"] = records_of(tested, info.get("generation", {}).get("shards", {}))
    write_run_dir(out, files, rows, info)
    return info


def outcome(info: dict[str, Any]) -> tuple[list[str], int]:
    """What ``assay run`` says after its ``done`` line about a finished run (from its run.json),
    and its exit status: ``EXIT_PARTIAL`` when samples failed or a source had no row judged.

    Example:
        >>> outcome({"nothing_judged": {"m": {"rows": 8, "reasons": [["no_verdict", 8]]}}})[1]
        4
        >>> outcome({})
        ([], 0)
    """
    from assay.errors import EXIT_OK, EXIT_PARTIAL

    lines = []
    failed = info.get("failed_samples") or {}
    if failed:
        what = "; ".join(f"{src}: {f['samples']} sample(s) of {f['tasks']} task(s)"
                         for src, f in sorted(failed.items()))
        lines.append(f"partial: the model gave no completion for {what} (gen_error rows, listed "
                     "in run.json failed_samples); the numbers leave them out; rerun to ask them "
                     f"again (exit {EXIT_PARTIAL})")
    for src, u in sorted((info.get("nothing_judged") or {}).items()):
        why = "; ".join(f"{r} ({n})" for r, n in u["reasons"])
        lines.append(f"partial: no row of {src} could be judged ({u['rows']} rows; {why}); its "
                     "measurements say 'not measured'; the rows and their reasons are in the "
                     f"run's rows/{src}.parquet and view; fix the verifier and rerun "
                     f"(exit {EXIT_PARTIAL})")
    return lines, EXIT_PARTIAL if lines else EXIT_OK

