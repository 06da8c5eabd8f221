"""assay's vectorized resampling of lm-eval's corpus metrics (mcc, binary f1) against lm-eval's
own functions: every resample's value, and lm-eval's bootstrap stderr replayed on its draws."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("sklearn")


@pytest.mark.parametrize(("agg", "labels"), [("matthews_corrcoef", 2),
                                             ("matthews_corrcoef", 3), ("f1", 2)])
def test_resampled_equals_lm_evals_function(agg: str, labels: int) -> None:
    """Each resample (one-class resamples included) equals lm-eval's aggregation called on it;
    the stderr equals lm-eval's bootstrap_stderr over the same 1000 draws (single process)."""
    import os
    import warnings

    from lm_eval.api import metrics as lm
    from lm_eval.api.registry import get_aggregation

    from assay.measure.lm_eval_bootstrap import _resampled

    rnd = random.Random(3)
    items = [(rnd.randrange(labels), rnd.randrange(labels)) for _ in range(9)]
    items[0] = (labels - 1, labels - 1)  # the positive class is there
    fn = get_aggregation(agg)
    idx = np.random.default_rng(1).integers(0, len(items), size=(300, len(items)))
    got = _resampled(agg, fn, items, idx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.array([fn([items[i] for i in row]) for row in idx])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert len(set(np.round(want, 9))) > 5  # the resamples differ (not all 0)
    if agg == "f1" or labels == 2:
        from assay.measure.lm_eval_bootstrap import LM_EVAL_DRAWS
        from assay.measure.lm_eval_bootstrap import corpus_bootstrap as _corpus_spread
        from assay.results import Interval

        old = os.environ.get("DISABLE_MULTIPROC")
        os.environ["DISABLE_MULTIPROC"] = "1"  # lm-eval's single-process path: same seeds
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = lm.bootstrap_stderr(fn, items, iters=LM_EVAL_DRAWS)
        finally:
            if old is None:
                del os.environ["DISABLE_MULTIPROC"]
            else:
                os.environ["DISABLE_MULTIPROC"] = old
        se, iv = _corpus_spread(agg, fn, items, 0.95, Interval)
        assert se == pytest.approx(ref, abs=1e-12)
        assert iv is not None and iv.low <= fn(items) <= iv.high
