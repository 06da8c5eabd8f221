"""`assay run` starts the study graph before Prefect is up (issue 43): the first request reaches
the model before the flow run exists, the flow run is still recorded (Completed, the generate
shards' artifacts on their task runs, the report's), and the results are the bytes a run
without Prefect writes. A new folder copies the user's migrated empty database."""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay import stages
from assay.rows import Rows
from assay.spec import load_spec
from assay.store import Store

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.openai_server import OpenAIServer  # noqa: E402

SPEC = """name: head
sources:
  - name: a
    kind: file
    path: p.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt}}
      k: 2
      max_connections: 4
    verifier: {{kind: numeric}}
execution: {{shard_rows: 8}}
"""


def _env(tmp: Path) -> dict[str, str]:
    # a user with no Prefect settings: the session's prefect_server fixture (run earlier in
    # this worker) leaves PREFECT_HOME and the API URL in os.environ
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ASSAY_CACHE_DIR"] = str(tmp / "user-cache")  # a user with no template yet
    return env


def _utc(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


@pytest.mark.slow
def test_first_request_before_the_flow_run_and_the_run_is_recorded(tmp_path: Path) -> None:
    srv = OpenAIServer().start()
    try:
        (tmp_path / "p.jsonl").write_text("".join(
            json.dumps({"id": f"t{i}", "q": f"What is {i} + {i + 1}?", "gold": str(2 * i + 1)})
            + "\n" for i in range(12)))
        (tmp_path / "s.yaml").write_text(SPEC.format(url=srv.base_url))
        env = _env(tmp_path)
        wall_minus_mono = time.time() - time.monotonic()
        p = subprocess.run([str(BIN / "assay"), "run", "s.yaml", "--output", "out", "--no-view"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        first = srv.requests[0]["_t"] + wall_minus_mono
        sent = srv.count()
        # the reference: the graph run in-process without Prefect, on its own store (the
        # loopback model is deterministic: asked again, it answers the same)
        ref_store = Store(tmp_path / "ref-store")
        ref = stages.run_study(load_spec(tmp_path / "s.yaml"), ref_store, progress=None)
    finally:
        srv.stop()
    assert sent == 24  # 12 prompts x k=2, each asked once: no node ran twice
    # no project .assay above the spec: the user's Prefect home (issue 49)
    with sqlite3.connect(tmp_path / "user-cache" / "prefect" / "prefect.db") as db:
        runs = db.execute("SELECT id, state_type, start_time FROM flow_run").fetchall()
        assert len(runs) == 1 and runs[0][1] == "COMPLETED", runs
        run_id, _, start = runs[0]
        arts = db.execute("SELECT key, type, task_run_id FROM artifact WHERE flow_run_id = ?",
                          (run_id,)).fetchall()
    # the model was asked before the flow run began: the graph did not wait for Prefect
    assert first < _utc(start), (first, start)
    # every generate shard's task run published its table (it recorded the head start's
    # result), and the flow its report
    assert sum(1 for k, t, tr in arts if t == "table" and tr is not None) == 3, arts
    assert ("head-report", "markdown") in {(k, t) for k, t, _ in arts}
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert info["sent"] == 24 and info["started"] <= first
    assert any(c.startswith("generate[") for c in info["computed"])
    files = stages.report_files(ref_store, ref.report)
    assert (tmp_path / "out" / "report.json").read_bytes() == files["report.json"]
    assert (tmp_path / "out" / "report.md").read_bytes() == files["report.md"]
    got = Rows.read_parquet(tmp_path / "out" / "rows" / "a.parquet").to_arrow()
    assert got.equals(stages.concat_rows(ref_store, ref.graded["a"]).to_arrow())
    # the first new folder made the user's template; the next one starts from a copy of it
    template = next((tmp_path / "user-cache").glob("prefect-*-empty.db"))
    with sqlite3.connect(template) as db:
        assert db.execute("SELECT count(*) FROM flow_run").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)


@pytest.mark.slow
def test_a_new_folder_starts_from_the_template(tmp_path: Path) -> None:
    """The template is written once the first server is healthy; a second home gets a copy
    before its server starts, and that server comes up on it and records a flow run."""
    env = _env(tmp_path)
    code = """
import os, sys
from pathlib import Path
from assay.flows.embedded import EmbeddedServer, apply_local_settings, template_path
home = Path(sys.argv[1])
os.environ["PREFECT_HOME"] = str(home)
apply_local_settings(home)
had = template_path().is_file()
s = EmbeddedServer().start()
copied = (home / "prefect.db").is_file()   # before the server ran at all
s.wait()
s.stop()
print(had, copied, template_path().is_file())
"""
    out = []
    for name in ("one", "two"):
        p = subprocess.run([sys.executable, "-c", code, str(tmp_path / name / ".prefect")],
                           env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        out.append(p.stdout.split())
    assert out == [["False", "False", "True"], ["True", "True", "True"]]


def test_the_embedded_servers_port_is_held_from_the_moment_it_is_made(tmp_path: Path,
                                                                      monkeypatch) -> None:
    """The port is bound in the parent and handed to the child, so nothing else can take it
    between choosing it and the server listening (CI lost a run to "address already in use"
    when a port was chosen, released, and bound by the child later)."""
    import errno
    import socket

    from assay.flows.embedded import EmbeddedServer

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / ".prefect"))
    s = EmbeddedServer()
    try:
        with socket.socket() as other, pytest.raises(OSError) as e:
            other.bind(("127.0.0.1", s.port))
        assert e.value.errno == errno.EADDRINUSE
        # a client may connect before the child starts: it waits in the backlog, not refused
        with socket.create_connection(("127.0.0.1", s.port), timeout=5):
            pass
    finally:
        s.stop()
    with socket.socket() as again:  # stop() without start() closes the listener
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", s.port))
