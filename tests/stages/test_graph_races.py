"""Graph nodes side by side in one process never see another's half-done library state (issue
39): the issue's two repros and pairs of source kinds, each in fresh interpreters, end rc 0 with
the bytes of the one-at-a-time run; the full matrix runs under ``make test-stress``.

``ASSAY_STRESS_MATRIX=1`` (set by ``make test-stress``) adds every combination of two and three
kinds (tests/helpers/race_specs.py), ``ASSAY_STRESS_MATRIX_RUNS`` times each (default 2).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import race_specs
from helpers.openai_server import OpenAIServer

STRESS = os.environ.get("ASSAY_STRESS_MATRIX") == "1"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return race_specs.build(tmp_path_factory.mktemp("races"))


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    server = OpenAIServer(["m"]).start()
    try:
        yield server.base_url
    finally:
        server.stop()


def _same_as_one_at_a_time(data: Path, served: str, name: str, parts: tuple[str, ...],
                           runs: int) -> None:
    """``runs`` fresh runs at the default max_parallel: each rc 0 with the bytes of a
    ``max_parallel=1`` run (rows and report)."""
    spec = data / f"{name}.yaml"
    spec.write_text(race_specs.spec_text(name, parts, data, served))
    rc, want, err = race_specs.run_fresh(spec, data / f"{name}-serial", max_parallel=1)
    assert rc == 0 and want, err[-3000:]
    for i in range(runs):
        rc, got, err = race_specs.run_fresh(spec, data / f"{name}-{i}")
        assert rc == 0, f"run {i + 1} of {runs}: {err[-3000:]}"
        assert got == want, f"run {i + 1} of {runs}: bytes differ from the one-at-a-time run"


@pytest.mark.slow
def test_two_hf_dataset_sources_over_one_saved_dataset_dict(data: Path, served: str) -> None:
    # the first repro: both build-rows nodes load the folder at once
    _same_as_one_at_a_time(data, served, "two-hf", race_specs.REPROS["two_hf_datasets"], 3)


@pytest.mark.slow
def test_an_hf_dataset_next_to_a_model_scored_source(data: Path, served: str) -> None:
    # the second repro (MMLU from a folder, ARC as choices: both scored by an LM):
    # without libguard every run fails with "module 'transformers' has no attribute
    # 'PreTrainedTokenizerBase'"
    _same_as_one_at_a_time(data, served, "hf-and-lm", race_specs.REPROS["hf_dataset_and_model"],
                           2)


# Two datasets loads meet inside tqdm's lock set-up, made certain: the first load to create the
# lock waits (bounded) for a second to arrive. Unguarded, both create and both delete it: the
# issue's "type object 'tqdm' has no attribute '_lock'". Guarded, the second cannot arrive.
_MEET = """
import contextlib, sys, threading
from assay import libguard
from assay.sources.hub import load_dataset_records
if sys.argv[2] == "off":
    libguard.LIBRARIES = contextlib.nullcontext()
from datasets.utils.tqdm import tqdm as hf_tqdm
real = hf_tqdm.get_lock.__func__
second = threading.Event()
waiting = []
def get_lock(cls):
    if not waiting:  # the first: wait while the lock is not there yet
        waiting.append(True)
        second.wait(float(sys.argv[3]))
        waiting[0] = False
    elif waiting[0]:  # another load while the first is still inside
        second.set()
    return real(cls)
hf_tqdm.get_lock = classmethod(get_lock)
errors = []
def load():
    try:
        load_dataset_records(sys.argv[1], where="w")
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")
threads = [threading.Thread(target=load) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
print("errors", errors, "met", second.is_set())
"""


@pytest.mark.parametrize("guard", ["on", "off"])
def test_two_dataset_loads_never_meet_in_tqdms_lock(data: Path, guard: str) -> None:
    # "off" shows the instrument reproduces the race whenever two loads overlap; its wait
    # only has to outlast the second thread's start. "on" waits its bound for nothing.
    wait = "2" if guard == "on" else "60"
    # one split's folder: one lock set-up per load, so the two are the only ones that meet
    out = subprocess.run([sys.executable, "-c", _MEET, str(data / "gsm" / "test"), guard, wait],
                         capture_output=True, text=True, timeout=180,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}).stdout
    if guard == "on":
        assert out.strip() == "errors [] met False", out
    else:
        assert "has no attribute '_lock'" in out and "met True" in out, out


# A few representative pairs and a triple in the normal suite; every one under make test-stress.
PAIRS = [("gen_openai", "hf_numeric"), ("humaneval", "reward"), ("perplexity", "judge"),
         ("choices", "file", "gen_openai")]


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


@pytest.mark.slow
@_only_stress
@pytest.mark.parametrize("parts", MATRIX[0::4], ids="+".join)
class TestMatrix0(_Matrix):
    pass


@pytest.mark.slow
@_only_stress
@pytest.mark.parametrize("parts", MATRIX[1::4], ids="+".join)
class TestMatrix1(_Matrix):
    pass


@pytest.mark.slow
@_only_stress
@pytest.mark.parametrize("parts", MATRIX[2::4], ids="+".join)
class TestMatrix2(_Matrix):
    pass


@pytest.mark.slow
@_only_stress
@pytest.mark.parametrize("parts", MATRIX[3::4], ids="+".join)
class TestMatrix3(_Matrix):
    pass
