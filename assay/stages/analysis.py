"""The stages after grading: decontaminate, score-reward-model (audit), measure, report.

Each reads graded rows by their stored pointers and stores small JSON result documents.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from assay.errors import SpecError, StoreError
from assay.rows import Rows, as_table
from assay.stages.cache import StageResult, cached_stage, load_doc
from assay.stages.sources import concat_rows
from assay.store import Store


def _graded_checksums(graded: Mapping[str, Sequence[StageResult]], names: Sequence[str]) -> list[Any]:
    return [[n, [p.checksums["rows"] for p in graded[n]]] for n in names]


def run_decontaminate(store: Store, spec: Any, graded: Mapping[str, Sequence[StageResult]], *,
                      progress: Any = None) -> StageResult:
    """Eval-side contamination of each checked source against the spec's corpus, with pass@1
    on the full set and on the clean subset."""
    from assay.report import collect_estimates, result_doc
    from assay.spec import file_checksum

    d = spec.decontaminate
    names = d.sources or [s.name for s in spec.sources]
    params = d.model_dump(mode="json", exclude={"corpus", "sources"})
    corpus_sums = [file_checksum(spec.resolve(c)) for c in d.corpus]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        import assay.decontam as dc

        paths = [str(spec.resolve(c)) for c in d.corpus]
        docs, n_rows = [], 0
        for name in names:
            rows = concat_rows(store, graded[name])
            n_rows += len(rows)
            rep = dc.contamination(rows, paths, n=d.n, text_field=d.text_field,
                                   id_field=d.id_field, store=store, **d.params)
            extra: dict[str, Any] = {"source": name}
            if hasattr(rep, "rescore"):  # pass@1 on the full set next to the clean subset
                split = rep.rescore(rows)
                extra["clean_report"] = split.report() if hasattr(split, "report") else str(split)
                extra["clean_estimates"] = collect_estimates(getattr(split, "clean", None))
            docs.append(result_doc("contamination", f"contamination[{name}]", rep, **extra))
        return {"contamination": docs}, {"rows": n_rows}

    return cached_stage(store, "decontaminate", inputs=_graded_checksums(graded, names) + corpus_sums,
                        params=params, compute=compute, label=",".join(names), progress=progress)


# ------------------------------------------------------------------------------- reward models


def make_reward_model(mspec: Any, spec: Any) -> Any:
    """A reward model adapter from its spec entry."""
    from assay import reward

    if mspec.kind == "embedding":
        return reward.EmbeddingRewardModel(**mspec.params)
    if mspec.kind == "hf":
        path = mspec.path
        local = spec.resolve(path)
        if local.exists():
            path = str(local)
        return reward.HFRewardModel(path, revision=mspec.revision, **mspec.params)
    mod, _, attr = mspec.function.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise SpecError(f"reward model {mspec.name!r}: cannot import {mspec.function!r} ({e})") from None
    return reward.FunctionRewardModel(fn, **mspec.params)


def reward_views(spec: Any) -> dict[str, Any]:
    """The audited views: the diagnostic set's dimensions, each with the spec's steps applied."""
    from assay.data import apply_derivation, load_diagnostic_v3

    d = spec.reward.data
    views = load_diagnostic_v3()
    dims = d.dimensions or list(views)
    unknown = [x for x in dims if x not in views]
    if unknown:
        raise SpecError(f"reward.data.dimensions: unknown {unknown}; the set has {list(views)}")
    return {k: apply_derivation(views[k], d.steps) if d.steps else views[k] for k in dims}


def model_identity(mspec: Any, spec: Any) -> dict[str, Any]:
    """What identifies a reward model's outputs, computed without loading it (so a cached rerun
    never imports torch): adapter kind and arguments plus the digest of every weight,
    tokenizer and template file for local models; hub id and revision otherwise. The loaded
    model's own ``fingerprint`` is stored with the results."""
    from assay.reward.runtime import dir_digest

    ident: dict[str, Any] = {"kind": mspec.kind, "params": mspec.params}
    if mspec.kind == "embedding":
        from assay.reward.embedding import bundled_model_path

        path = mspec.params.get("path")
        ident["files"] = dir_digest(spec.resolve(path) if path else bundled_model_path())
    elif mspec.kind == "hf":
        local = spec.resolve(mspec.path)
        if local.is_dir():
            ident["files"] = dir_digest(local)
        else:  # a hub id: pin `revision` to a commit hash for a key that cannot go stale
            ident["hub"] = {"id": mspec.path, "revision": mspec.revision}
    else:
        import hashlib
        import inspect

        mod, _, attr = mspec.function.partition(":")
        fn = getattr(importlib.import_module(mod), attr, None)
        try:
            src = inspect.getsource(fn)
        except (TypeError, OSError):
            src = repr(fn)
        ident["function"] = {"name": mspec.function,
                             "source": hashlib.sha256(src.encode()).hexdigest()}
    return ident


def run_reward_audit(store: Store, spec: Any, model_name: str, *, progress: Any = None,
                     device_slot: Any = None) -> StageResult:
    """Audit one reward model on the diagnostic set; keyed on the model's identity (weights,
    tokenizer, template digests) and the views' checksums, never on its name.

    ``device_slot(device)`` returns a context manager held while the model scores (the Prefect
    task passes a strict ``gpu`` concurrency slot; this core library never imports Prefect)."""
    from assay.report import result_doc

    mspec = next(m for m in spec.reward.models if m.name == model_name)
    views = reward_views(spec)
    inputs = [[k, v.checksum()] for k, v in views.items()]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        from assay.reward import audit

        model = make_reward_model(mspec, spec)
        slot = device_slot(str(getattr(model, "device", "cpu"))) if device_slot else contextlib.nullcontext()
        with slot:
            res = audit(model, views, store=store) if _accepts(audit, "store") else audit(model, views)
        doc = result_doc("reward_audit", model_name, res, dimensions=_audit_dimensions(res),
                         fingerprint=model.fingerprint)
        return {"audit": doc}, {"rows": sum(len(v) for v in views.values())}

    return cached_stage(store, "score-reward-model", inputs=inputs, params={"name": model_name},
                        fingerprint=model_identity(mspec, spec), compute=compute, label=model_name,
                        progress=progress)


def _accepts(fn: Any, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _audit_dimensions(res: Any) -> list[dict[str, Any]]:
    """Per-dimension pair accuracy (with interval and n) and baseline, for the plot."""
    from assay.report import collect_estimates

    out = []
    dims = getattr(res, "dimensions", None)
    items = dims.items() if isinstance(dims, Mapping) else (
        [(getattr(d, "dimension", getattr(d, "name", str(i))), d) for i, d in enumerate(dims)]
        if dims else [])
    for name, d in items:
        ests = collect_estimates(d)
        acc = next((e for e in ests if "acc" in e["name"] or "acc" in e["path"]), None)
        base = next((e for e in ests if "baseline" in e["name"] or "baseline" in e["path"]), None)
        if acc:
            out.append({**acc, "dimension": str(name), "baseline": base["value"] if base else None})
    return out


# ------------------------------------------------------------------------------- measure


def run_measure(store: Store, spec: Any, graded: Mapping[str, Sequence[StageResult]], *,
                progress: Any = None) -> StageResult:
    """The measurements the spec asks for, over the graded rows of each source."""
    import assay
    from assay.report import result_doc

    m = spec.measure
    names = [s.name for s in spec.sources]

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        rows = {n: concat_rows(store, graded[n]) for n in names}
        docs: list[dict[str, Any]] = []
        outputs: dict[str, Any] = {}
        if m.pass_at is not None:
            for n in m.pass_at.sources or names:
                docs.append(result_doc("pass_at", f"pass_at[{n}]", assay.pass_at(rows[n], k=m.pass_at.k),
                                       source=n))
        for c in m.compare:
            res = assay.compare(rows[c.before], rows[c.after], proxy=c.proxy, metrics=c.metrics,
                                alpha=c.alpha)
            docs.append(result_doc("compare", f"compare[{c.before} -> {c.after}]", res,
                                   before=c.before, after=c.after))
        if m.eval_variance is not None:
            for n in m.eval_variance.sources or names:
                docs.append(result_doc("eval_variance", f"eval_variance[{n}]",
                                       assay.eval_variance(rows[n]), source=n))
        if m.holdout_size is not None:
            h = m.holdout_size
            res = assay.holdout_size(h.effect, before=rows[h.before] if h.before else None,
                                     after=rows[h.after] if h.after else None, power=h.power,
                                     alpha=h.alpha)
            docs.append(result_doc("holdout_size", "holdout_size", res))
        if m.select is not None:
            res = assay.select(rows[m.select.source], mode="rl", band=tuple(m.select.band))
            kept = getattr(res, "rows", None)
            if kept is not None:
                outputs["selected"] = Rows(as_table(kept, require=()))
            docs.append(result_doc("select", f"select[{m.select.source}]", res,
                                   source=m.select.source))
        outputs["measurements"] = docs
        return outputs, {"rows": sum(len(r) for r in rows.values())}

    return cached_stage(store, "measure", inputs=_graded_checksums(graded, names),
                        params=m.model_dump(mode="json"), compute=compute,
                        label=",".join(names), progress=progress)


# ------------------------------------------------------------------------------- report


def run_report(store: Store, spec: Any, graded: Mapping[str, Sequence[StageResult]],
               measured: StageResult | None, decon: StageResult | None,
               audits: Sequence[StageResult], *, progress: Any = None) -> StageResult:
    """report.md / report.json / PNGs as stored blobs (written to the run dir afterwards)."""
    from assay.report import build_report, guard_counts

    ups = [p.checksums for p in (measured, decon, *audits) if p is not None]
    inputs = _graded_checksums(graded, list(graded)) + [ups]
    spec_doc = {"name": spec.name, "description": spec.description, "checksum": spec.checksum()}

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        sources = []
        for s in spec.sources:
            r = concat_rows(store, graded[s.name])
            sources.append({"name": s.name, "rows": len(r),
                            "tasks": len(set(r.to_arrow().column("task_id").to_pylist())),
                            "verifier": s.verifier.kind if s.verifier else "given scores",
                            "guard_stopped": guard_counts(r)})
        files = build_report(
            spec_doc, sources,
            load_doc(store, measured, "measurements") if measured else [],
            load_doc(store, decon, "contamination") if decon else [],
            [load_doc(store, a, "audit") for a in audits])
        return {f"file:{k}": v for k, v in files.items()}, {"files": sorted(files)}

    return cached_stage(store, "report", inputs=inputs, params=spec_doc, compute=compute,
                        label=spec.name, progress=progress)


def report_files(store: Store, report: StageResult) -> dict[str, bytes]:
    """The report stage's files, verified, as ``{name: bytes}``."""
    out = {}
    for k, key in report.outputs.items():
        data = store.get_bytes(key)
        if data is None:
            raise StoreError(f"report file {k} vanished from {store.root}; rerun")
        out[k.removeprefix("file:")] = data
    return out
