"""The metrics of an lm-eval ``loglikelihood`` task (lambada_openai: ``perplexity``, ``acc``) from
its scored rows, aggregated as lm-eval aggregates them, beside lm-eval's own stderr.

``acc`` is the mean of each document's ``is_greedy`` (assay's interval over documents, lm-eval's
``mean_stderr``); ``perplexity`` is lm-eval's corpus-level ``exp(-mean log-likelihood)`` (no
interval: it is not a mean of [0, 1] verdicts) with lm-eval's bootstrap stderr: 100,000
resamples drawn by Python's ``random.Random(i)`` per chunk of 1,000 as lm-eval draws them,
replayed here with numpy's Mersenne Twister in the same state (the same indices; on
lambada's 5,153 documents 16-20 s on a loaded 2-core VM, where lm-eval's single-process loop
takes about 115 s).

Example:
    >>> rows = [{"task_id": str(i), "reward": float(i < 2),
    ...          "judge_meta": {"loglik": [-1.0 - i], "is_greedy": [i < 2],
    ...                         "loglikelihood": ["perplexity", "acc"]}} for i in range(4)]
    >>> r = lm_eval_loglik_means(rows)
    >>> [(e.name, round(e.value, 4)) for e in r.metrics]
    [('perplexity,none', 12.1825), ('acc,none', 0.5)]
"""

from __future__ import annotations

import json
import math
import random
from typing import TYPE_CHECKING

import numpy as np

from assay.errors import MeasureError
from assay.intervals import task_interval
from assay.measure.lm_eval_means import BOOTSTRAP_ITERS, LmEvalMeans
from assay.results import Estimate

if TYPE_CHECKING:
    from assay.rows import RowsLike

#: lm-eval's ``bootstrap_stderr`` draws its resamples in chunks of this many, chunk ``i`` from
#: ``random.Random(i)``
CHUNK = 1000


def is_loglik_rows(rows: RowsLike) -> bool:
    """Whether graded rows come from an lm-eval loglikelihood task (``judge_meta`` names the
    metrics it reports)."""
    from assay.rows import as_table

    table = as_table(rows, require=())
    if table.num_rows == 0 or "judge_meta" not in table.column_names:
        return False
    meta = table.column("judge_meta")[0].as_py()
    meta = json.loads(meta) if isinstance(meta, str) else meta
    return isinstance(meta, dict) and "loglikelihood" in meta


def perplexity_stderr(lls: list[float], iters: int = BOOTSTRAP_ITERS) -> float:
    """lm-eval's ``bootstrap_stderr(perplexity, lls, iters)``: the same resamples (chunk ``i``
    drawn by ``random.Random(i).choices``, i.e. ``floor(random() * n)``, whose doubles numpy's
    ``RandomState`` in that generator's state gives bit for bit), each replicate's
    ``exp(-mean)``, their sample standard deviation.

    Example:
        >>> round(perplexity_stderr([-1.0, -2.0, -4.0], iters=2000), 4)
        10.8127
    """
    x = np.asarray(lls, dtype=np.float64)
    n = len(x)
    chunk = min(CHUNK, iters)
    reps = []
    for i in range(iters // chunk):
        # Python's own generator state for Random(i), handed to numpy's MT19937: the same
        # stream, and random_sample's doubles are random()'s (both genrand_res53)
        state = random.Random(i).getstate()[1]
        rs = np.random.RandomState()
        # (has_gauss 0, cached gaussian 0.0: unused by random_sample)
        rs.set_state(("MT19937", np.array(state[:-1], dtype=np.uint32), state[-1], 0, 0.0))
        u = rs.random_sample(chunk * n)
        idx = np.floor(u * float(n)).astype(np.int64).reshape(chunk, n)
        reps.append(np.exp(-x[idx].sum(axis=1) / n))
    r = np.concatenate(reps)
    return float(np.std(r, ddof=1))


def lm_eval_loglik_means(rows: RowsLike, *, level: float = 0.95,
                         iters: int = BOOTSTRAP_ITERS) -> LmEvalMeans:
    """The metrics the rows' task reports (``judge_meta.loglikelihood``, lm-eval's order) under
    lm-eval's names (``perplexity,none``, ``acc,none``), each with lm-eval's stderr (module
    docstring); one row per document."""
    from lm_eval.api.metrics import mean, perplexity, stderr_for_metric

    from assay.rows import as_table

    table = as_table(rows, require=())
    if table.num_rows == 0:
        raise MeasureError("lm_eval_metrics: no rows")
    metas = [json.loads(m) if isinstance(m, str) else m
             for m in table.column("judge_meta").to_pylist()]
    tids = table.column("task_id").to_pylist()
    if len(set(tids)) != len(tids):
        raise MeasureError("lm_eval_metrics: a loglikelihood task has one row per document; "
                           "some documents have several")
    names = metas[0].get("loglikelihood") or []
    lls = [float(m["loglik"][0]) for m in metas]
    greedy = [float(bool(m["is_greedy"][0])) for m in metas]
    n = len(lls)
    ests, errs = [], []
    for name in names:
        if name == "perplexity":
            value = float(perplexity(lls))  # lm-eval's own aggregation
            se = perplexity_stderr(lls, iters) if n > 1 and iters > 0 else None
            iv = None
        else:  # acc: the mean of is_greedy
            value = float(mean(greedy))
            fn = stderr_for_metric(mean, iters)
            se = float(fn(greedy)) if fn is not None and n > 1 else None
            iv = task_interval(np.asarray(greedy), floor=1.0, level=level)
        note = f"lm-eval stderr {se:.4f}" if se is not None and math.isfinite(se) else None
        ests.append(Estimate(f"{name},none", value, iv, n, unit="documents", n_rows=n,
                             note=note))
        errs.append(se)
    if not ests:
        raise MeasureError("lm_eval_metrics: the rows name no lm-eval loglikelihood metric")
    warnings = (f"only {n} documents: intervals are wide",) if n < 10 else ()
    return LmEvalMeans(tuple(ests), tuple(errs), n, n, warnings)
