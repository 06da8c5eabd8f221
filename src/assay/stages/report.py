"""The report stage: report.md, report.json and the plots, as stored blobs.

The run directory is written from them afterwards; nothing here depends on wall-clock time.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from assay.errors import StoreVanishedError
from assay.report import WARM_IMPORTS
from assay.stages.cache import (
    StageResult,
    cached_stage,
    graded_checksums,
    load_doc,
    shard_tables,
)
from assay.stages.declare import RunContext, Stage, declare
from assay.stages.modes import needs_model
from assay.stages.seams import Computed
from assay.store import Store

if TYPE_CHECKING:
    import pyarrow as pa
    from pydantic import BaseModel

    from assay.models.specs import GenerateSpec
    from assay.rows import Rows
    from assay.sources.base import SourceSpec

STAGE = "report"  # declared at the end


def run_report(ctx: RunContext, graded: Mapping[str, Sequence[StageResult]],
               measured: StageResult | None, decon: StageResult | None,
               audits: Sequence[StageResult]) -> StageResult:
    """report.md / report.json / PNGs as stored blobs (written to the run dir afterwards)."""
    from assay.report import build_report
    from assay.stages.build_rows import source_info
    from assay.unjudged import unjudged_summary

    store, spec = ctx.store, ctx.spec
    ups = [p.checksums for p in (measured, decon, *audits) if p is not None]
    inputs = graded_checksums(graded, list(graded)) + [ups]
    spec_doc = {"name": spec.name, "description": spec.description, "checksum": spec.checksum()}

    def compute() -> Computed:
        sources = []
        for s in spec.sources:
            gen = GenerationTally(s.generate) if s.generate is not None else None
            counts = source_counts(store, graded[s.name], gen)
            entry = {"name": s.name, "rows": counts.rows, "tasks": counts.tasks,
                     "verifier": f"log-likelihood ({_scored_by(s)})"
                     if needs_model(s, "scorer")
                     else s.verifier.label() if s.verifier else "given scores",
                     "guard_stopped": counts.guards}
            if s.verifier is not None:
                entry["unjudged"] = unjudged_summary(counts.unjudged)
            if gen is not None:
                entry["generation"] = gen.summary()
            info = source_info(store, spec, s.name)
            if info:
                entry["data"] = info
            sources.append(entry)
        files = build_report(
            spec_doc, sources,
            load_doc(store, measured, "measurements") if measured else [],
            load_doc(store, decon, "contamination") if decon else [],
            [load_doc(store, a, "audit") for a in audits])
        return {f"file:{k}": v for k, v in files.items()}, {"files": sorted(files)}

    return cached_stage(store, STAGE, inputs=inputs, params=spec_doc, compute=compute,
                        label=spec.name, progress=ctx.progress)


@dataclass
class SourceCounts:
    """What the report says of a source's rows, read shard by shard: rows, distinct tasks,
    rows stopped per grading guard, and the unjudged rows (no reward) for their reasons."""

    rows: int
    tasks: int
    guards: dict[str, int]
    unjudged: Rows


#: The columns :func:`assay.unjudged.unjudged_summary` reads.
_UNJUDGED_COLUMNS = ("reward", "judge_status", "reason", "task_id", "rollout_index")


def source_counts(store: Store, parts: Sequence[StageResult],
                  generation: GenerationTally | None = None) -> SourceCounts:
    """:class:`SourceCounts` of one source's shards, holding one shard's table at a time and
    the task ids (a set) and unjudged rows across them; the same numbers as over all rows at
    once (guard counts add up per guard; a task split across shards counts once).
    ``generation``: a :class:`GenerationTally` fed each shard in the same pass."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from assay.report import guard_counts
    from assay.rows import Rows

    n, tasks, unjudged = 0, set(), []
    guards: dict[str, int] = {}
    for t in shard_tables(store, parts):
        n += t.num_rows
        if generation is not None:
            generation.add(t)
        tasks.update(pc.unique(t.column("task_id")).to_pylist())
        for g, c in guard_counts(Rows(t)).items():
            guards[g] = guards.get(g, 0) + c
        kept = t.select([c for c in _UNJUDGED_COLUMNS if c in t.column_names])
        unjudged.append(kept.filter(pc.is_null(t.column("reward"))))
    return SourceCounts(n, len(tasks), dict(sorted(guards.items())),
                        Rows(pa.concat_tables(unjudged)))


def _scored_by(s: SourceSpec) -> str | None:
    """The model that scores a choices: or perplexity: source, or None."""
    m = s.scoring_model
    return None if m is None else f"{m.kind} {_model_name(m)}"


def _model_name(m: BaseModel) -> str:
    """What a model entry names (a server's model, a local path, a callable), from its fields:
    a plugin backend's entry may have any of them."""
    d = m.model_dump()
    return str(d.get("model") or d.get("path") or d.get("callable") or "")


def generation_summary(rows: Rows, gspec: GenerateSpec | None) -> dict[str, Any]:
    """Per source: the model, completions, failed requests (and by cause: ``HTTP 503``,
    ``timeout``, ``circuit breaker``, ...), the truncated share (``length`` finishes, the cut-off
    the RL selection gates on) and tokens, from the rows. Retries and requests sent are facts
    of a run, not of its rows: they are in run.json, so this stays the same for the same rows.
    (:class:`GenerationTally` over one table; a run feeds it shard by shard.)

    Example:
        >>> import assay
        >>> r = assay.rows(["q"], [["a", "b"]],
        ...                markers=[[{"truncated": 1.0, "completion_tokens": 8.0},
        ...                          {"truncated": 0.0, "completion_tokens": 2.0}]])
        >>> generation_summary(r, None)["truncated_share"]
        0.5
    """
    tally = GenerationTally(gspec)
    tally.add(rows.to_arrow())
    return tally.summary()


class GenerationTally:
    """:func:`generation_summary` gathered one table (a shard) at a time, in row order: counts
    and each marker's values (8 bytes a row, summed once at the end, so every sum and mean is
    the one over all rows at once), not the rows.

    Example:
        >>> import assay
        >>> t = assay.rows(["q"], [["a", "b"]], markers=[[{"completion_tokens": 8.0},
        ...                                               {"completion_tokens": 3.0}]]).to_arrow()
        >>> g = GenerationTally(None)
        >>> g.add(t.slice(0, 1)); g.add(t.slice(1))
        >>> g.summary()["completion_tokens_mean"]
        5.5
    """

    _MEANS = ("prompt_tokens", "completion_tokens", "truncated")

    def __init__(self, gspec: GenerateSpec | None) -> None:
        self.gspec = gspec
        self.rows = 0
        self.causes: dict[str, int] = {}
        self.values = {k: array("d") for k in self._MEANS}  # of the answered rows that have it
        self.stop_trimmed, self.tokens = array("d"), array("d")  # 0 where a row has none
        # prompts (a task's rows with one prompt) whose answered samples differ at temperature 0
        # (task id, prompt) -> its answered samples' texts (a text is null where none came)
        self.texts: dict[tuple[str, str], set[str | None]] | None = None
        if gspec is not None and gspec.params.temperature == 0 and gspec.k > 1:
            self.texts = {}

    def add(self, t: pa.Table) -> None:
        from assay.models.base import failure_cause

        status = t.column("judge_status").to_pylist()
        self.rows += len(status)
        for st, why in zip(status, t.column("reason").to_pylist()):
            if st == "gen_error":
                c = failure_cause(why)
                self.causes[c] = self.causes.get(c, 0) + 1
        for m, st in zip(t.column("markers").to_pylist(), status):
            if st == "gen_error":
                continue
            m = dict(m or [])
            for k in self._MEANS:
                if k in m:
                    self.values[k].append(m[k])
            self.stop_trimmed.append(m.get("stop_trimmed", 0))
            self.tokens.append(m.get("completion_tokens", 0))
        if self.texts is not None:
            for tid, p, txt, st in zip(t.column("task_id").to_pylist(),
                                       t.column("prompt").to_pylist(),
                                       t.column("final_text").to_pylist(), status):
                if st != "gen_error":
                    self.texts.setdefault((tid, p), set()).add(txt)

    def summary(self) -> dict[str, Any]:
        gspec, ok = self.gspec, len(self.tokens)

        def mean(name: str) -> float | None:
            vals = self.values[name]
            return round(sum(vals) / len(vals), 1) if vals else None

        trunc = self.values["truncated"]
        differ = sum(len(v) > 1 for v in self.texts.values()) if self.texts is not None else 0
        model = None
        if gspec is not None:
            m = gspec.model
            model = f"{m.kind}:{_model_name(m)}"
            revision = m.model_dump().get("revision")
            if revision:
                model += f"@{revision}"
        sampling = None
        if gspec is not None:
            from assay.nightly.under_test import sampling_label

            sampling = sampling_label(gspec.params.model_dump(mode="json"), None)
        return {
            "model": model,
            "sampling": sampling,
            "k": gspec.k if gspec is not None else None,
            "completions": ok,
            "errors": self.rows - ok,
            "errors_by_cause": dict(sorted(self.causes.items())),
            "truncated_share": round(sum(trunc) / len(trunc), 4) if trunc else None,
            "stop_trimmed": int(sum(self.stop_trimmed)),
            "differ_at_t0": differ,
            "prompt_tokens_mean": mean("prompt_tokens"),
            "completion_tokens_mean": mean("completion_tokens"),
            "completion_tokens_total": int(sum(self.tokens)),
        }


def report_files(store: Store, report: StageResult) -> dict[str, bytes]:
    """The report stage's files, verified, as ``{name: bytes}``."""
    out = {}
    for k, key in report.outputs.items():
        data = store.get_bytes(key)
        if data is None:
            raise StoreVanishedError(f"report file {k} vanished from {store.location} after it "
                                     "was computed")
        out[k.removeprefix("file:")] = data
    return out


# 2: failed generations by cause; 3: model revision, sampling, judge
declare(Stage(STAGE, 3, "study", run_report,
              reads=("rows", "measure", "decontaminate", "score-reward-model"),
              results_role="report", warm_imports=WARM_IMPORTS))
