"""Coverage: which of lm-eval's installed tasks ``kind: lm_eval`` runs, by output type, and why
it refuses the others — read from lm-eval's own task index, with assay's own checks.

Run: ``.venv/bin/python benchmarks/lmeval_coverage.py [--json OUT]`` (lm-eval is in the ``dev``
extra; no data is downloaded: only the YAML configs are read).

Each indexed task's config (includes merged, ``!function`` unresolved) goes through the same
checks a source runs before loading data (:mod:`assay.sources.lm_eval_index`,
:mod:`assay.sources.lm_eval_metrics`): its output type, its own ``process_results``, its
``metric_list`` and aggregations, a ``filter_list``; a ``generate_until`` task's ``repeats``,
an aggregation function rows cannot name and its ``generation_kwargs``. "runs" means the
index check passes; a task can still be refused once its documents are read (multiple gold
targets, a rolling or loglikelihood ``process_results`` that does not give lm-eval's numbers,
an unreachable dataset; multiple-input tasks such as winogrande run). Python task classes are
only judged once loaded: counted apart. Also timed: building the index, and getting it again
from assay's per-process cache.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def _reason(why: str) -> str:
    """A refusal's short category (the metric's name where one is named)."""
    m = re.search(r"asks for '([^']+)'", why)
    if m:
        name = m.group(1)
        return f"metric {name}" if "/" not in name else "metric: a !function"
    for key, label in (("process_results", "own process_results"),
                       ("aggregated by", "aggregation assay does not compute"),
                       ("filter_list", "filter_list"),
                       ("Hugging Face evaluate", "HF evaluate metric"),
                       ("names no metric", "metric_list entry without metric"),
                       ("repeats", "repeats > 1 (votes over samples)"),
                       ("generation_kwargs", "generation kwargs assay does not pass")):
        if key in why:
            return label
    return why


def _decoding_refusal(cfg: dict[str, Any]) -> str | None:
    """A generate_until task's generation_kwargs that assay's generate stage cannot pass."""
    from assay.errors import SpecError
    from assay.sources.lm_eval_generate import sampling_of

    try:
        sampling_of(cfg.get("generation_kwargs"), "task")
    except SpecError as e:
        return str(e)
    return None


def survey() -> dict[str, Any]:
    from lm_eval.tasks._index import Kind

    from assay.sources.lm_eval_index import task_manager, yaml_config
    from assay.sources.lm_eval_metrics import COMPUTED, config_refusal, output_type

    t0 = time.perf_counter()
    tm = task_manager(None)
    built = time.perf_counter() - t0
    t1 = time.perf_counter()
    assert task_manager(None) is tm
    again = time.perf_counter() - t1
    kinds: Counter[str] = Counter()
    by_type: dict[str, Counter[str]] = defaultdict(Counter)
    for entry in tm.task_index.values():
        if entry.kind == Kind.GROUP:
            kinds["group"] += 1
            continue
        if entry.kind == Kind.TAG:
            kinds["tag"] += 1
            continue
        if entry.kind == Kind.PY_TASK:
            kinds["python task class (judged once loaded)"] += 1
            continue
        kinds["YAML task"] += 1
        cfg = yaml_config(entry)
        if cfg is None:
            by_type["(unreadable config)"]["refused: unreadable config"] += 1
            continue
        out = output_type(cfg)
        if out not in COMPUTED and out != "generate_until":
            by_type[out][f"refused: output type {out}"] += 1
            continue
        why = config_refusal(cfg)
        if why is None and out == "generate_until":
            why = _decoding_refusal(cfg)
        if why is None:
            own = " (own process_results, checked per document)" \
                if cfg.get("process_results") is not None else ""
            by_type[out]["runs" + own] += 1
        else:
            by_type[out][f"refused: {_reason(why)}"] += 1
    import lm_eval

    return {"lm_eval": getattr(lm_eval, "__version__", "?"), "index_build_s": round(built, 1),
            "index_again_s": round(again, 6), "entries": len(tm.task_index),
            "kinds": dict(kinds),
            "by_output_type": {k: dict(v.most_common()) for k, v in sorted(by_type.items())}}


def table(res: dict[str, Any]) -> str:
    lines = [f"lm-eval {res['lm_eval']}: {res['entries']} index entries "
             f"({'; '.join(f'{k}: {n}' for k, n in sorted(res['kinds'].items()))}); "
             f"index built in {res['index_build_s']} s, from the cache in "
             f"{res['index_again_s'] * 1e6:.0f} µs", "",
             "| output type | YAML tasks | runs | refused: reason (tasks) |",
             "| --- | ---: | ---: | --- |"]
    for out, counts in res["by_output_type"].items():
        total = sum(counts.values())
        runs = sum(n for k, n in counts.items() if k.startswith("runs"))
        refused = [(k.removeprefix("refused: "), n) for k, n in counts.items()
                   if k.startswith("refused")]
        own = sum(n for k, n in counts.items() if k.startswith("runs ("))
        runs_s = f"{runs}" + (f" ({own} with their own process_results)" if own else "")
        shown = "; ".join(f"{k} ({n})" for k, n in refused[:8])
        rest = sum(n for _, n in refused[8:])
        if rest:
            shown += f"; {len(refused) - 8} other reasons ({rest})"
        lines.append(f"| {out} | {total} | {runs_s} | {shown or '-'} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the counts here")
    args = ap.parse_args()
    res = survey()
    print(table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
