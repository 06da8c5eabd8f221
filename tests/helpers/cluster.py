"""A Dask cluster of separate processes for tests: `dask scheduler` and `dask worker`s, each
worker optionally in its own mount namespace with an empty tmpfs over a folder (as root), so it
shares no disk with the driver there, as on two machines without NFS. Bounded waits, killed.

Example::

    with dask_cluster(2, env, hide=run_dir) as address:
        ...  # execution.address: address
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers.ports import free_ports


def can_hide_folders() -> bool:
    """Whether workers can get a private view of a folder (root, and `unshare` present)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


@contextlib.contextmanager
def dask_cluster(n_workers: int, env: dict[str, str], *, cwd: Path, logs: Path,
                 hide: Path | None = None, nthreads: int = 1,
                 timeout: float = 90.0) -> Iterator[str]:
    """Start a scheduler and ``n_workers`` workers (``env``, working in ``cwd``); with ``hide``,
    each worker sees an empty ``hide``. Yields the scheduler address once every worker joined."""
    from distributed import Client

    dask = str(Path(sys.executable).with_name("dask"))
    (port,) = free_ports(1)
    address = f"tcp://127.0.0.1:{port}"
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []

    def start(cmd: list[str], name: str) -> None:
        with open(logs / f"{name}.log", "wb") as out:
            procs.append(subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True))

    try:
        start([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
              "scheduler")
        for i in range(n_workers):
            worker = [dask, "worker", address, "--nthreads", str(nthreads), "--no-dashboard",
                      "--name", f"w{i}", "--local-directory", str(logs / f"w{i}-scratch")]
            if hide is None:
                start(worker, f"w{i}")
                continue
            script = (f"mount -t tmpfs none {shlex.quote(str(hide))} && exec "
                      + " ".join(shlex.quote(a) for a in worker))
            start(["unshare", "-m", "--propagation", "private", "bash", "-c", script], f"w{i}")
        with Client(address, timeout=timeout) as client:
            client.wait_for_workers(n_workers, timeout=timeout)
        yield address
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


#: a small offline study for the cluster tests (format with ``name`` and ``execution``): the
#: shipped arithmetic completions, graded numerically, in shards of 40 rows
STUDY = """
name: {name}
sources:
  - name: model
    kind: file
    path: data/own_completions.jsonl
    fields: {{prompt: question, completion: response, reference: gold, task_id: id}}
    verifier: {{kind: numeric, params: {{tol: 1.0e-6}}}}
measure:
  pass_at: {{k: 4}}
execution: {execution}
"""


def write_study(folder: Path, name: str, execution: str) -> Path:
    """``folder/spec.yaml`` (:data:`STUDY`) beside a copy of its data file."""
    root = Path(__file__).resolve().parents[2]
    (folder / "data").mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "configs" / "data" / "own_completions.jsonl", folder / "data")
    spec = folder / "spec.yaml"
    spec.write_text(STUDY.format(name=name, execution=execution))
    return spec


def hold_gpu(log: str, name: str) -> None:
    """On a worker: hold the ``gpu`` slot for a second, logging when it was entered and left."""
    import time

    from assay.tasks.stages import gpu_slot

    with gpu_slot("cuda:0"):
        with open(log, "a") as f:
            f.write(f"enter {name}\n")
        time.sleep(1.0)
        with open(log, "a") as f:
            f.write(f"exit {name}\n")


def gpu_turns(log: Path) -> list[str]:
    """The enters and exits :func:`hold_gpu` logged, in order: one model per device means every
    enter is followed by its exit before the next enter."""
    return [w for w in log.read_text().split() if w in ("enter", "exit")]


def write_served_study(folder: Path, name: str, url: str, execution: str) -> Path:
    """``folder/spec.yaml``: 48 prompts (``folder/a.jsonl``) generated k=2 by the loopback
    server at ``url`` with ``max_connections: 4``, graded numerically; ``execution`` a YAML
    mapping."""
    from tests.helpers.openai_server import served_source

    with open(folder / "a.jsonl", "w") as f:
        for i in range(48):
            f.write(json.dumps({"id": f"t{i}", "q": f"What is {i} + {i + 1}?",
                                "gold": str(2 * i + 1)}) + "\n")
    spec = folder / "spec.yaml"
    spec.write_text(f"name: {name}\nsources:\n"
                    + served_source(4, "{{kind: numeric}}").format(url=url)
                    + "measure:\n  pass_at: {k: 2}\n" + f"execution: {execution}\n")
    return spec


def assert_cap_shared(run: subprocess.CompletedProcess[str], srv: Any) -> None:
    """The served study (:func:`write_served_study`) ran, every request reached the server
    (``srv``, an OpenAIServer), and never more than its ``max_connections: 4`` were in flight
    there at once, though 4 were: the cap is shared by the workers and reached."""
    assert run.returncode == 0, run.stderr[-4000:]
    assert srv.count() == 96  # 48 prompts, k=2: four shards of 24 rows on two workers
    assert srv.max_in_flight == 4, srv.max_in_flight


def local_reference(spec: Path, work: Path) -> dict[str, bytes]:
    """report.json and every source's rows/<source>.parquet of the same study run by the local
    runner in this process (fresh store under ``work``)."""
    from assay import stages
    from assay.spec import load_spec
    from assay.stages.finish import finish_run
    from assay.store import Store

    store = Store(work / "local-store")
    run = stages.run_study(load_spec(spec), store, progress=None)
    finish_run(store, load_spec(spec), run, work / "local-out", 0.0)
    out = work / "local-out"
    return {f: (out / f).read_bytes()
            for f in ["report.json", *sorted(str(p.relative_to(out))
                                            for p in (out / "rows").glob("*.parquet"))]}
