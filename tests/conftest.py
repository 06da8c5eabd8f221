"""Session fixtures for the Prefect tests: one real `prefect server start` on 127.0.0.1.

Prefect reads its settings at import, so the environment is set here before any test imports it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.seaweed import S3Server

BIN = Path(sys.executable).parent

# What assay derives once per machine (assay.sources.lm_eval_group.cache_dir) goes to a folder of
# this test process's own, never the user's ~/.cache: a test never reads another run's records.
if "ASSAY_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["ASSAY_CACHE_DIR"] = tempfile.mkdtemp(prefix="assay-test-cache-")


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """API URL of a real Prefect server (own PREFECT_HOME, free port), stopped at session end."""
    from assay.flows.embedded import local_settings, wait_for
    from tests.helpers.ports import free_port

    if "prefect" in sys.modules and not os.environ.get("PREFECT_API_URL"):
        pytest.fail("prefect was imported before the prefect_server fixture; import it lazily")
    base = tmp_path_factory.mktemp("prefect")
    settings = {**local_settings(base / "home"), "PREFECT_SERVER_LOGGING_LEVEL": "WARNING"}
    saved = {k: os.environ.get(k) for k in [*settings, "PREFECT_API_URL"]}
    os.environ.update(settings)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    with open(base / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port),
             "--no-ui", "--analytics-off", "--no-scheduler", "--no-late-runs"],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    try:
        wait_for(url, timeout=120)
        os.environ["PREFECT_API_URL"] = url
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (SeaweedFS) for one test module, reached through the standard AWS_*
    variables only (set in os.environ while the module runs)."""
    from tests.helpers.seaweed import seaweed

    with seaweed(tmp_path_factory.mktemp("s3")) as server:
        saved = {k: os.environ.get(k) for k in server.env}
        os.environ.update(server.env)
        try:
            yield server
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture(autouse=True)
def _own_user_cache(tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test its own user cache (``ASSAY_CACHE_DIR``: the default store and Prefect home of
    a run outside a project, and the Prefect template), never the real ``~/.cache/assay``.
    The template migrated by one test is handed to the next (a fresh database migrates for
    seconds); nothing else is shared, so no test sees another's cached stages."""
    import shutil

    shared = tmp_path_factory.getbasetemp() / "shared-user-cache"
    shared.mkdir(exist_ok=True)
    own = tmp_path_factory.mktemp("user-cache")
    for db in shared.glob("prefect-*-empty.db"):
        shutil.copyfile(db, own / db.name)
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(own))
    store = os.environ.get("ASSAY_STORE")
    yield own
    # an in-process `assay run`/`nightly` exports its store for its workers: not to the next test
    if store is None:
        os.environ.pop("ASSAY_STORE", None)
    else:
        os.environ["ASSAY_STORE"] = store
    for db in own.glob("prefect-*-empty.db"):
        if not (shared / db.name).exists():
            tmp = shared / f".{db.name}.tmp"
            shutil.copyfile(db, tmp)
            os.replace(tmp, shared / db.name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with the most slow tests first: pytest-xdist hands each worker whole modules in this
    order (--dist loadscope), so the long ones start early and the short ones fill in at the
    end, instead of one worker finishing a long module alone (the suite's wall, not its work)."""
    from collections import Counter

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    slow = Counter(module(item) for item in items if item.get_closest_marker("slow") is not None
                   and item.get_closest_marker("skip") is None)
    items.sort(key=lambda item: -slow[module(item)])  # stable: a module's tests stay together


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """absl's log handler (absl comes in with lm-eval's metrics) keeps the stderr it met at
    import, here pytest's capture file, and closes that stream when logging's handlers are shut
    down (Prefect's logging setup at its first import does) unless it is ``sys.stderr`` at that
    moment; under a later test's ``capsys`` it is not, and pytest's own capture then fails every
    test after it ("I/O operation on closed file"). Point it at the process's stderr, which it
    never closes (pytest still captures it at the descriptor)."""
    absl = sys.modules.get("absl.logging")
    handler = getattr(absl, "_absl_handler", None)
    python_handler = getattr(handler, "python_handler", None)
    if python_handler is not None and sys.__stderr__ is not None:
        python_handler.stream = sys.__stderr__
