"""benchmarks/scale_generation.py cannot rot: at a tiny N it runs `assay run` against its server
and counts exactly N requests; inspect_ai's side runs only where its venv exists."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale_generation.py"
INSPECT = os.environ.get("ASSAY_INSPECT", "/tmp/inspect-venv/bin/inspect")

# A child that asks the benchmark server for N completions over one connection, then burns
# 0.3 s of CPU: the count and the CPU the harness reports are known in advance.
CLIENT = """
import sys, time, httpx
url, n = sys.argv[1], int(sys.argv[2])
with httpx.Client() as c:
    for i in range(n):
        c.post(url + "/chat/completions", json={"messages": [{"role": "user", "content": str(i)}]})
t = time.process_time()
while time.process_time() - t < 0.3:
    pass
"""


@pytest.fixture(scope="module")
def sg() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_generation", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_timed_counts_requests_and_child_cpu(sg: ModuleType, tmp_path: Path) -> None:
    proc, url = sg.client_cpu.start_server(sg.LATENCY)
    try:
        cmd = [sys.executable, "-c", CLIENT, url, "5"]
        got = sg.timed(url, cmd, tmp_path, dict(os.environ), 5)
        assert got["requests"] == 5
        assert got["cpu"] >= 0.3  # the child's own CPU, taken after it exited
        assert got["cpu_ms"] == pytest.approx(1000 * got["cpu"] / 5)
        assert 0 < got["busy"] <= 1
        # one request short of what the side must send: no figure is printed for it
        with pytest.raises(RuntimeError, match="5 of 6 requests"):
            sg.timed(url, cmd, tmp_path, dict(os.environ), 6)
    finally:
        proc.kill()
        proc.wait()


def test_samples_not_a_multiple_of_k(sg: ModuleType) -> None:
    with pytest.raises(SystemExit, match="error: --samples 42 is not a multiple of --k 4"):
        sg.main(["--samples", "42", "--k", "4", "--no-inspect"])


@pytest.mark.slow
def test_tiny_run_assay_side(sg: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    res = sg.main(["--samples", "40", "--k", "4", "--repeats", "1", "--no-inspect"])
    assert list(res) == [40] and list(res[40]) == ["assay"]
    (run,) = res[40]["assay"]
    assert run["requests"] == 40 and run["cpu"] > 0
    out = capsys.readouterr().out
    assert "32 connections" in out
    assert any(line.split()[:2] == ["40", "assay"] for line in out.splitlines())


@pytest.mark.slow
def test_tiny_run_against_inspect(sg: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path(INSPECT).exists():
        pytest.skip(f"inspect_ai's venv is not here ({INSPECT}; set ASSAY_INSPECT): "
                    "it pins other versions and is installed by hand for benchmarks")
    res = sg.main(["--samples", "8", "--k", "4", "--repeats", "1", "--inspect", INSPECT])
    assert [r["requests"] for r in res[8]["inspect_ai"]] == [8]
    assert "inspect_ai / assay" in capsys.readouterr().out


def test_help_runs() -> None:
    p = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert p.returncode == 0 and "--samples" in p.stdout
