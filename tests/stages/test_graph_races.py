"""Graph nodes side by side in one process never see another's half-done library state (issue
39): the issue's two repros, each in fresh interpreters, end rc 0 with the bytes of the
one-at-a-time run, and the first race's interleaving made certain (it fails unguarded). Pairs of
kinds and the full matrix: test_graph_race_matrix.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import race_specs

data = race_specs.data
served = race_specs.served
_same_as_one_at_a_time = race_specs.same_as_one_at_a_time


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


# Two datasets loads meeting inside tqdm's lock set-up, where the issue's "type object 'tqdm'
# has no attribute '_lock'" comes from (one load deletes the class lock the other uses): the
# first load to get there waits (bounded) for a second to arrive. Unguarded, the second arrives
# (whether the error then shows is the threads' timing); guarded, it cannot.
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
    # "off" shows the instrument sees two loads overlap there; its wait only has to outlast the
    # second thread's start. "on" waits its bound for nothing.
    wait = "2" if guard == "on" else "60"
    # one split's folder: one lock set-up per load, so the two are the only ones that meet
    out = subprocess.run([sys.executable, "-c", _MEET, str(data / "gsm" / "test"), guard, wait],
                         capture_output=True, text=True, timeout=180,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}).stdout
    if guard == "on":
        assert out.strip() == "errors [] met False", out
    else:
        assert "met True" in out, out
