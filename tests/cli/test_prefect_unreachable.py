"""An unreachable ``PREFECT_API_URL`` is found by one request before the study starts: one
``error:`` line naming the URL, exit 1, and the model under test is asked nothing (the head
start used to send it hundreds of requests before Prefect's client gave up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.openai_server import OpenAIServer, served_source
from helpers.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("command", ["run", "nightly"])
def test_no_prefect_api_is_one_line_exit_1_and_no_model_request(command: str,
                                                                tmp_path: Path) -> None:
    srv = OpenAIServer().start()
    try:
        (tmp_path / "a.jsonl").write_text("".join(
            json.dumps({"id": f"t{i}", "q": f"What is {i} + {i + 1}?", "gold": str(2 * i + 1)})
            + "\n" for i in range(40)))
        (tmp_path / "s.yaml").write_text(
            "name: noapi\nsources:\n" + served_source(8, "{{kind: numeric}}").format(
                url=srv.base_url) + "measure: {pass_at: {k: 2}}\n")
        api = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PREFECT_API_URL": api,
               "ASSAY_PREFECT_CHECK_S": "1"}
        env.pop("ASSAY_STORE", None)
        extra = ["--output", "out"] if command == "run" else ["--root", "nights"]
        p = subprocess.run([str(BIN / "assay"), command, "s.yaml", *extra], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
        sent = srv.settle()
    finally:
        srv.stop()
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: PREFECT_API_URL {api}: no Prefect "
                                                   "API answers"), lines
    assert sent == 0
