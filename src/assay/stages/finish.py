"""The run directory of a finished study run: report files, rows Parquet and run.json.

Written the same way whether the graph ran as a Prefect flow or was served from the store alone.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from assay.spec import StudySpec
from assay.stages.cache import StageResult, load_rows
from assay.stages.chain import StudyRun
from assay.stages.declare import the_stage, with_role
from assay.stages.generate import generation_facts
from assay.stages.measure import nothing_judged
from assay.stages.report import report_files
from assay.store import Store
from assay.store_files import atomic_write
from assay.unjudged import failed_samples
from assay.written import Manifest


def finish_run(store: Store, spec: StudySpec, run: StudyRun, out: Path,
               started: float | None = None, note: str | None = None,
               overrides: list[str] | None = None) -> dict[str, Any]:
    """Write the run directory (report files, rows Parquet, run.json) and return run.json.
    run.json lists the stage keys the run used: ``assay store gc`` keeps what kept runs list.

    A file the directory already holds for exactly these results (its manifest, ``.written.json``,
    records what each file was made from and its sha256) is neither rebuilt nor rewritten: an
    unchanged rerun loads no rows and writes only run.json; a missing or edited file is
    written again."""
    assert run.report is not None  # every study run ends with its report stage
    out.mkdir(parents=True, exist_ok=True)
    written = Manifest.load(out)
    files = report_files(store, run.report)
    for name, data in files.items():  # small: compared with what is there, written if not it
        written.write(out, name, data, ["report", run.report.key])
    outputs = _row_outputs(store, spec, run)
    # run.json's facts read the sources' rows: kept beside the files, under the identity of
    # the rows they were read from, so an unchanged rerun does not load the rows for them
    sources = [x.name for x in spec.sources if x.name in outputs]
    facts_of = [run.spec_checksum, {n: outputs[n][0] for n in sources}]
    facts = written.fact("run_facts", facts_of)
    seen = _FactRows() if facts is None else None
    for name, (identity, tables) in outputs.items():
        rel = f"rows/{name}.parquet"
        keep = written.kept(rel, identity)
        tally = seen if seen is not None and name in sources else None
        if keep and tally is None:
            continue
        # one shard's table at a time (a row group's worth at most: see write_rows)
        shards = (tally.add(name, t) for t in tables()) if tally is not None else tables()
        if keep:
            for _ in shards:
                pass
        else:
            buf = io.BytesIO()
            write_rows(shards, buf)
            written.write(out, rel, buf.getvalue(), identity)
    if seen is not None:
        # as JSON reads them back, so a first run and a rerun hand on the same values
        facts = json.loads(json.dumps(seen.facts(spec, sources)))
        written.set_fact("run_facts", facts_of, facts)
    assert facts is not None
    info: dict[str, Any] = {"study": spec.name, "spec_checksum": run.spec_checksum,
            "spec_definition": spec.definition_checksum(),
            "study_definition": spec.definition_content(),
            "cached": run.cached_stages, "computed": run.computed_stages,
            "store": store.describe(), "files": sorted(files),
            "stage_keys": sorted({r.key for r in run.results}),
            "started": started if started is not None else time.time()}
    if note:  # e.g. served from the store without a Prefect flow run
        info["orchestration"] = note
    failed = facts["failed_samples"]
    if failed:  # gen_error rows: the numbers cover fewer samples; `assay run` exits EXIT_PARTIAL
        info["failed_samples"] = failed
    unjudged = facts["nothing_judged"]
    if unjudged:  # not one row of these could be judged: `assay run` exits EXIT_PARTIAL too
        info["nothing_judged"] = unjudged
    made = [r for r in run.results if r.stage in with_role("completions")]
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
    written.save(out)
    # as assay.report.write_run_dir writes it; always: it holds this run's own facts (times)
    atomic_write(out / "run.json", (json.dumps(info, indent=2, sort_keys=True) + "\n").encode())
    return info


#: Rows per row group of a rows file: what the writer holds at once (pyarrow's default, 1Mi
#: rows, held every row of a 400k-row run: ~300 MB); the file's bytes are those one
#: ``pq.write_table(..., row_group_size=GROUP_ROWS)`` of every row writes.
GROUP_ROWS = 65536

#: What a rows file's identity adds to its content checksums: the writer (its bytes depend on
#: pyarrow's Parquet writer, which names its version in the file, and on the row groups).
_WRITER = ["parquet-zstd", pa.__version__, f"groups-{GROUP_ROWS}"]


def write_rows(tables: Iterable[pa.Table], sink: str | Path | BinaryIO) -> None:
    """Write ``tables`` (one source's shards, in order) as one zstd Parquet file, holding at
    most a row group's rows (:data:`GROUP_ROWS`) at a time: byte for byte what
    ``pq.write_table(pa.concat_tables(tables), sink, compression="zstd",
    row_group_size=GROUP_ROWS)`` writes (a column chunk's pages follow the table's chunks, so
    each group is cut from the same chunks).

    Example:
        >>> import io, assay
        >>> t = assay.rows(["q"], [["a", "b"]], [[1.0, 0.0]]).to_arrow()
        >>> a, b = io.BytesIO(), io.BytesIO()
        >>> write_rows([t.slice(0, 1), t.slice(1)], a)
        >>> pq.write_table(pa.concat_tables([t.slice(0, 1), t.slice(1)]), b, compression="zstd",
        ...                row_group_size=GROUP_ROWS)
        >>> a.getvalue() == b.getvalue()
        True
    """
    writer: pq.ParquetWriter | None = None
    held: list[pa.Table] = []
    have = 0
    for t in tables:
        if writer is None:
            writer = pq.ParquetWriter(sink, t.schema, compression="zstd")
        held.append(t)
        have += t.num_rows
        while have >= GROUP_ROWS:
            whole = pa.concat_tables(held)
            writer.write_table(whole.slice(0, GROUP_ROWS), row_group_size=GROUP_ROWS)
            rest = whole.slice(GROUP_ROWS)
            held, have = ([rest] if rest.num_rows else []), have - GROUP_ROWS
    if writer is None:
        raise ValueError("write_rows: no table to write")
    if held:
        writer.write_table(pa.concat_tables(held))
    writer.close()


#: The columns run.json's facts read (failed samples, unjudged rows and why; ``judge_meta``
#: tells a row reporting only lm-eval corpus items, judged without a reward, from an unjudged one).
_FACT_COLUMNS = ("reward", "judge_status", "reason", "task_id", "rollout_index", "judge_meta")


class _FactRows:
    """What run.json's facts read, gathered shard by shard: each source's row count and only its
    failed (``gen_error``) and unjudged (no reward) rows, projected on :data:`_FACT_COLUMNS`."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.kept: dict[str, list[pa.Table]] = {}

    def add(self, name: str, table: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        self.sizes[name] = self.sizes.get(name, 0) + table.num_rows
        t = table.select([c for c in _FACT_COLUMNS if c in table.column_names])
        bad = pc.is_null(t.column("reward")) if "reward" in t.column_names else None
        if "judge_status" in t.column_names:
            gen = pc.fill_null(pc.equal(t.column("judge_status"), "gen_error"), False)
            bad = gen if bad is None else pc.or_(bad, gen)
        self.kept.setdefault(name, []).append(t.filter(bad) if bad is not None else t)
        return table

    def facts(self, spec: StudySpec, sources: list[str]) -> dict[str, Any]:
        from assay.rows import Rows

        rows = {n: Rows(pa.concat_tables(self.kept[n])) for n in sources}
        return {"failed_samples": failed_samples(rows),
                "nothing_judged": nothing_judged(spec, rows, sizes=self.sizes)}


def _row_outputs(store: Store, spec: StudySpec, run: StudyRun
                 ) -> dict[str, tuple[list[object], Callable[[], Iterator[pa.Table]]]]:
    """``{name: (identity, tables)}`` of every ``rows/<name>.parquet``: the identity is what the
    file is made from (content checksums), ``tables()`` reads its rows from the store, one
    shard's table at a time."""
    def rows_of(parts: list[StageResult]) -> Callable[[], Iterator[pa.Table]]:
        return lambda: (load_rows(store, p).to_arrow() for p in parts)

    outs: dict[str, tuple[list[object], Callable[[], Iterator[pa.Table]]]] = {
        name: ([*_WRITER, "graded", [p.checksums["rows"] for p in parts]], rows_of(list(parts)))
        for name, parts in run.graded.items()}
    measured = next((r for r in run.results if r.stage == the_stage("measurements")), None)
    if measured is not None and "selected" in measured.outputs and spec.measure.select:
        # the rows select(mode="rl") kept: the training export carries only what a trainer may
        # see; the same rows with their references and verdict details stay under .graded
        sel = [measured.outputs["selected"], measured.checksums.get("selected")]
        src = spec.measure.select.source
        outs[f"selected-{src}"] = ([*_WRITER, "training", sel], lambda: iter([load_rows(
            store, measured, "selected").training_table()]))
        outs[f"selected-{src}.graded"] = ([*_WRITER, "selected", sel], lambda: iter([load_rows(
            store, measured, "selected").to_arrow()]))
    return outs


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

