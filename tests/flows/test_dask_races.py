"""The issue 39 repro on a Dask worker that runs two nodes at once (``threads_per_worker=2``, a
fresh worker process: cold imports): the first node imports what the spec needs before any
node's body runs (libguard.prepare_node), and the run gives the bytes of the one-at-a-time run
(report.json and every rows file; the worker runs torch at the nanny's one OpenMP thread, this
process at its own count: issue 52).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import race_specs


@pytest.fixture
def cluster(prefect_server: str) -> Iterator[str]:
    """A LocalCluster of one worker process with two threads (its address), closed at the end."""
    from distributed import LocalCluster

    c = LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                     dashboard_address=None, host="127.0.0.1")
    try:
        yield c.scheduler_address
    finally:
        c.close(timeout=60)


@pytest.mark.slow
def test_the_repro_on_a_two_thread_dask_worker(cluster: str, tmp_path: Path) -> None:
    from distributed import Client

    from assay import stages
    from assay.flows.study import run_spec
    from assay.spec import load_spec
    from assay.stages.finish import finish_run
    from assay.store import Store

    data = race_specs.build(tmp_path / "data")
    parts = race_specs.REPROS["hf_dataset_and_model"]
    spec = data / "spec.yaml"
    spec.write_text(race_specs.spec_text("dask-race", parts, data)
                    + f"execution: {{runner: dask, address: '{cluster}'}}\n")
    res = run_spec(str(spec), str(tmp_path / "out"), str(tmp_path / "store"), embedded=False,
                   publish=False, view=False)
    assert any(x.startswith("score-choices") for x in res["computed"]), res["computed"]
    with Client(cluster, timeout=60) as client:  # the nodes ran on the worker, not here
        (ran,) = client.run(lambda: __import__("assay.libguard").libguard.WARMED).values()
    assert "transformers:PreTrainedTokenizerBase" in ran and "datasets" in ran
    # the one-slot run in this process (whatever torch thread count earlier tests left), written
    # out as `assay run` writes: report.json and every rows file equal byte for byte (issue 52:
    # the arc rows once differed in a log-likelihood's last bits)
    serial = stages.run_study(load_spec(spec), Store(tmp_path / "serial"), progress=None,
                              max_parallel=1)
    finish_run(Store(tmp_path / "serial"), load_spec(spec), serial, tmp_path / "serial-out", 0.0)
    names = sorted(p.name for p in (tmp_path / "serial-out" / "rows").glob("*.parquet"))
    assert names == sorted(f"{n}.parquet" for n in serial.graded) == ["arc.parquet",
                                                                      "mmlu.parquet"]
    for f in ["report.json", *(f"rows/{n}" for n in names)]:
        assert (tmp_path / "out" / f).read_bytes() == (tmp_path / "serial-out" / f).read_bytes(), f
