"""lm-eval aggregations that are not a mean over documents (bleu, chrf, ter, f1, mcc, a task's
own ``!function``): named so rows can carry them, and computed from each document's item.

Why a name and not a number per row: bleu over a corpus is not a mean of per-document scores,
so a row keeps what the task's ``process_results`` returned (bleu's (reference, prediction)
pair) and the aggregation's name; the measure stage calls lm-eval's very function on the items
in lm-eval's document order. A name is a registry name (``bleu``) or ``module:qualname`` of an
importable function (afrixnli's ``lm_eval.utils:weighted_f1_score``), checked to resolve to the
same object lm-eval chose.

Example:
    >>> from lm_eval.api.metrics import bleu
    >>> aggregation_ref(bleu), aggregation_ref(lambda xs: 0.0)
    ('bleu', None)
    >>> resolve("lm_eval.utils:weighted_f1_score").__name__
    'weighted_f1_score'
    >>> lm_eval_draws("bleu"), lm_eval_draws("f1")
    (100, 1000)
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from assay.jsontypes import JSONValue
from assay.measure.lm_eval_bootstrap import LM_EVAL_DRAWS, corpus_bootstrap

if TYPE_CHECKING:
    from assay.results import Interval
    from assay.rows import RowsLike

#: lm-eval's aggregation of a metric's per-document items (mean, f1, bleu...): one number
Aggregation: TypeAlias = Callable[[list[object]], float]
#: (lm-eval's stderr or None, assay's interval or None, a note)
Spread: TypeAlias = "tuple[float | None, Interval | None, str]"

#: lm-eval's evaluator bootstraps these metrics (by name) with at most 100 draws
#: (``evaluator_utils``: ``min(bootstrap_iters, 100)``), one chunk seeded 0: replayed exactly
FEW_DRAWS_METRICS = ("bleu", "chrf", "chrf++", "ter")
FEW_DRAWS = 100


def aggregation_ref(fn: object) -> str | None:
    """The name rows carry for lm-eval's aggregation function ``fn``: its registry name, else
    ``module:qualname`` where importing that gives ``fn`` itself; None otherwise (a function
    defined in a task's own file, which only lm-eval's loader can import)."""
    from lm_eval.api.registry import AGGREGATION_REGISTRY

    for name, f in AGGREGATION_REGISTRY.items():
        if f is fn:
            return str(name)
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    # every part an identifier: a fresh process (the measure stage) can import it by name
    if not mod or not qual or not all(p.isidentifier() for p in f"{mod}.{qual}".split(".")):
        return None
    try:
        got = resolve(f"{mod}:{qual}")
    except Exception:  # noqa: BLE001 (not importable here: not a name rows can carry)
        return None
    return f"{mod}:{qual}" if got is fn else None


def resolve(ref: str) -> Aggregation:
    """The aggregation function a :func:`aggregation_ref` name stands for."""
    from lm_eval.api.registry import get_aggregation

    if ":" not in ref:
        fn = get_aggregation(ref)
        if fn is None:
            raise KeyError(f"lm-eval has no aggregation {ref!r}")
        return fn
    mod, _, qual = ref.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def json_item(v: object) -> JSONValue:
    """A document's item as JSON holds it (tuples become lists), or ValueError when JSON
    cannot hold it (then the rows could not carry it)."""
    try:
        return json.loads(json.dumps(v, allow_nan=False, default=_plain))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{v!r:.60} is not JSON ({e})") from None


def _plain(x: object) -> object:
    """A numpy scalar as its Python value (lm-eval's argmax gives ``np.int64``)."""
    item = getattr(x, "item", None)
    if callable(item) and getattr(x, "shape", None) == ():
        return item()
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def from_json(item: object) -> object:
    """An item back in lm-eval's shape: a pair was a tuple (``zip(*items)`` reads either; f1's
    sklearn call needs tuples to stack)."""
    return tuple(item) if isinstance(item, list) else item


def lm_eval_draws(metric: str) -> int:
    """How many of lm-eval's bootstrap draws assay replays for ``metric``'s stderr: all 100
    for bleu/chrf/ter (simple_evaluate's figure exactly), else lm-eval's first chunk of 1000
    (its default 100,000 draws take minutes; ``simple_evaluate(bootstrap_iters=1000)``'s)."""
    return FEW_DRAWS if metric in FEW_DRAWS_METRICS else LM_EVAL_DRAWS


#: corpus_spread's last answers by what they depend on: the measure stage asks twice for each
#: group member's corpus metric (its own lm_eval_metrics entry, then the group's member list),
#: and bleu's 300 sacrebleu runs over a corpus take tens of seconds
_SPREADS: dict[str, Spread] = {}
_SPREADS_KEPT = 64


def corpus_spread(key: str, ref: str, items: list[object], level: float) -> Spread:
    """``(lm-eval's stderr or None, assay's interval or None, a note)`` for the corpus
    metric ``key`` (``metric,filter``) aggregated by ``ref``: the stderr is what
    ``stderr_for_metric`` gives in simple_evaluate (a bootstrap replayed on lm-eval's own draws,
    None where lm-eval has none: "N/A"); the interval a seeded percentile bootstrap over
    documents (Efron & Tibshirani 1993, ch. 13). Both are deterministic: an answer is kept
    (by the items' content) and given again for the same question."""
    import hashlib

    memo = hashlib.sha256(json.dumps([key, ref, level, items], default=_plain)
                          .encode()).hexdigest()
    if memo in _SPREADS:
        return _SPREADS[memo]
    got = _corpus_spread_of(key, ref, items, level)
    if len(_SPREADS) >= _SPREADS_KEPT:
        _SPREADS.pop(next(iter(_SPREADS)))  # the oldest
    _SPREADS[memo] = got
    return got


def _corpus_spread_of(key: str, ref: str, items: list[object], level: float) -> Spread:
    from lm_eval.api.metrics import stderr_for_metric

    from assay.results import Interval

    fn = resolve(ref)
    metric = key.partition(",")[0]
    if len(items) < 2:
        return None, None, "lm-eval stderr N/A (one document)"
    draws = lm_eval_draws(metric)
    lm_has = stderr_for_metric(fn, draws) is not None
    se, iv = corpus_bootstrap(ref, fn, items, level, Interval, draws=draws if lm_has else None)
    if not lm_has:
        return None, iv, "lm-eval stderr N/A (lm-eval has none for this aggregation)"
    if se is None or not math.isfinite(se):
        return se, iv, "lm-eval stderr N/A"
    return se, iv, (f"lm-eval bootstrap stderr {se:.4f} ({draws} draws: "
                    + ("simple_evaluate's)" if draws == FEW_DRAWS else
                       f"simple_evaluate(bootstrap_iters={draws})'s)"))


def corpus_items(table: pa.Table) -> tuple[list[str], dict[str, tuple[str, list[object]]], int]:
    """From graded rows (an Arrow table): lm-eval's metric order (``keys``), each corpus
    metric's aggregation name and items in lm-eval's document order (by document id: its
    bootstrap draws depend on the order), and how many rows carry none (not graded).

    Example:
        >>> import pyarrow as pa
        >>> meta = lambda r, p: json.dumps({"lm_eval": {"keys": ["bleu,none"],
        ...     "items": {"bleu,none": [r, p]}, "aggregation": [["bleu,none", "bleu"]]}})
        >>> t = pa.table({"task_id": ["1", "0", "2"],
        ...               "judge_meta": [meta("a b", "a b"), meta("c", "d"), None]})
        >>> keys, got, missing = corpus_items(t)
        >>> keys, got["bleu,none"][1], missing
        (['bleu,none'], [('c', 'd'), ('a b', 'a b')], 1)
    """
    per: dict[str, dict[int, object]] = {}
    refs: dict[str, str] = {}
    keys: dict[str, None] = {}
    missing = 0
    for tid, meta in zip(table.column("task_id").to_pylist(),
                         table.column("judge_meta").to_pylist()):
        g = json.loads(meta) if isinstance(meta, str) else dict(meta or {})
        le = g.get("lm_eval") if isinstance(g, dict) else None
        if not isinstance(le, dict) or "keys" not in le:
            missing += 1
            continue
        keys.update(dict.fromkeys(le["keys"]))
        for k, ref in le["aggregation"]:
            refs.setdefault(k, ref)
            per.setdefault(k, {}).setdefault(int(tid), from_json(le["items"][k]))
    got = {k: (refs[k], [per[k][d] for d in sorted(per[k])]) for k in per}
    return list(keys), got, missing


def non_mean_items(table: pa.Table) -> dict[str, tuple[str, list[object]]]:
    """From graded rows (an Arrow table) of either task shape, each metric lm-eval aggregates
    other than by mean: its aggregation name and items in lm-eval's document order. A
    generate_until row keeps only those (:func:`corpus_items`); a multiple_choice row keeps
    every metric's item (:mod:`assay.sources.lm_eval_mc`), its means also as markers.

    Example:
        >>> import pyarrow as pa
        >>> meta = lambda g, p: json.dumps({"lm_eval": {"items": {"f1,none": [g, p],
        ...     "acc,none": 1.0 * (g == p)}, "aggregation": [["f1,none", "f1"],
        ...                                                 ["acc,none", "mean"]]}})
        >>> t = pa.table({"task_id": ["1", "0"], "judge_meta": [meta(1, 0), meta(1, 1)]})
        >>> non_mean_items(t)
        {'f1,none': ('f1', [(1, 1), (1, 0)])}
    """
    per: dict[str, dict[int, object]] = {}
    refs: dict[str, str] = {}
    for tid, meta in zip(table.column("task_id").to_pylist(),
                         table.column("judge_meta").to_pylist()):
        g = json.loads(meta) if isinstance(meta, str) else dict(meta or {})
        le = g.get("lm_eval") if isinstance(g, dict) else None
        if not isinstance(le, dict) or "aggregation" not in le:
            continue  # not graded, or a task whose every metric is a mean
        for k, ref in le["aggregation"]:
            if ref != "mean":
                refs.setdefault(k, ref)
                per.setdefault(k, {}).setdefault(int(tid), from_json(le["items"][k]))
    return {k: (refs[k], [per[k][d] for d in sorted(per[k])]) for k in per}


def corpus_only(rows: RowsLike) -> bool:
    """True when every row of graded ``rows`` carries lm-eval corpus items (a translation
    task's bleu, ter, chrf): such rows have no reward, yet they were judged."""
    from assay.rows import as_table

    table = as_table(rows, require=())
    if table.num_rows == 0 or "judge_meta" not in table.column_names:
        return False
    _, got, missing = corpus_items(table)
    return bool(got) and missing == 0
