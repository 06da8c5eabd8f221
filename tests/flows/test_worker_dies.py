"""A worker SIGKILLed mid-shard: Dask runs the shard again on the other worker and the study
ends with the same bytes as a local run (a node's writes are idempotent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cluster import dask_cluster, local_reference, write_study
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]

#: the first grading call anywhere says where it runs (its process group: one worker) and waits
#: to be killed; every later call grades at once
GRADER = '''
import os, time

def grade(completion, reference):
    mark = os.environ.get("ASSAY_TEST_MARK")  # unset: the reference run in the test process
    try:
        fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY) if mark else -1
    except FileExistsError:
        fd = -1
    if fd >= 0:  # the first call anywhere: say where, then wait to be killed
        os.write(fd, str(os.getpgid(0)).encode())
        os.close(fd)
        time.sleep(120)  # killed long before this ends
    return float(completion.strip().endswith(str(reference) + "."))
'''


@pytest.mark.slow
def test_a_killed_worker_costs_a_rerun_of_its_shard_not_the_study(
        prefect_server: str, s3: S3Server, tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    (image / "killgrader.py").write_text(GRADER)
    mark = tmp_path / "first-grade.pgid"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server,
           "ASSAY_TEST_MARK": str(mark)}
    with dask_cluster(2, env, cwd=image, logs=tmp_path / "cluster") as address:
        spec = write_study(image, "killed",
                           f'{{runner: dask, address: "{address}", shard_rows: 40}}')
        spec.write_text(spec.read_text().replace(
            "verifier: {kind: numeric, params: {tol: 1.0e-6}}",
            'verifier: {kind: function, function: "killgrader:grade"}'))
        proc = subprocess.Popen([str(Path(sys.executable).with_name("assay")), "run", str(spec),
                                 "--store", s3.url("killed"), "--output", str(tmp_path / "out")],
                                cwd=image, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while not (mark.exists() and mark.read_text()):
                assert proc.poll() is None and time.monotonic() < deadline, (
                    proc.stderr.read()[-3000:] if proc.poll() is not None else "no shard graded")
                time.sleep(0.2)
            os.killpg(int(mark.read_text()), signal.SIGKILL)  # that worker, and all it started
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err[-4000:]
    want = local_reference(spec, tmp_path / "ref")
    for f, data in want.items():
        assert (tmp_path / "out" / f).read_bytes() == data, f
