"""Source kinds two and three at a time in one study (issue 39), each spec run in fresh
interpreters at the default max_parallel: rc 0 and the bytes of the one-at-a-time run. A few in
the normal suite; every combination under ``make test-stress``.

``ASSAY_STRESS_MATRIX=1`` (set by ``make test-stress``) adds every combination of two and three
kinds (tests/helpers/race_specs.py), ``ASSAY_STRESS_MATRIX_RUNS`` times each (default 2).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from helpers import race_specs

data = race_specs.data
served = race_specs.served
_same_as_one_at_a_time = race_specs.same_as_one_at_a_time
STRESS = os.environ.get("ASSAY_STRESS_MATRIX") == "1"


# A pair and a triple in the normal suite (the two repros have tests of their own:
# test_graph_races, test_prefect_races, test_dask_races); every one under make test-stress.
PAIRS = [("gen_openai", "hf_numeric"), ("choices", "file", "gen_openai")]


@pytest.mark.slow
@pytest.mark.parametrize("parts", PAIRS, ids="+".join)
def test_kinds_side_by_side(data: Path, served: str, parts: tuple[str, ...]) -> None:
    _same_as_one_at_a_time(data, served, "-".join(parts).replace("_", ""), parts, 1)


MATRIX = [c for n in (2, 3) for c in itertools.combinations(race_specs.KINDS, n)]


class _Matrix:
    def test_matrix(self, data: Path, served: str, parts: tuple[str, ...]) -> None:
        runs = int(os.environ.get("ASSAY_STRESS_MATRIX_RUNS", "2"))
        _same_as_one_at_a_time(data, served, "-".join(parts).replace("_", ""), parts, runs)


# Four classes, a quarter of the matrix each: pytest-xdist's loadscope gives each class to a
# worker of its own, so the matrix spreads over the cores.
_only_stress = pytest.mark.skipif(not STRESS, reason="the full matrix: ASSAY_STRESS_MATRIX=1 "
                                  "(make test-stress)")
for _i in range(4):
    _cls = type(f"TestMatrix{_i}", (_Matrix,), {})
    _mark = pytest.mark.parametrize("parts", MATRIX[_i::4], ids="+".join)
    globals()[_cls.__name__] = pytest.mark.slow(_only_stress(_mark(_cls)))
