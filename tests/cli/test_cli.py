"""The assay command: validate/report/schema never import Prefect; errors carry YAML paths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assay.cli import main

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from assay.cli import main
rc = main(sys.argv[1:])
assert not any(m == "prefect" or m.startswith("prefect.") for m in sys.modules), "prefect imported"
assert "torch" not in sys.modules, "torch imported"
sys.exit(rc)
"""


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_validate_ok_and_no_prefect() -> None:
    p = _probe("validate", str(ROOT / "configs" / "own_completions.yaml"))
    assert p.returncode == 0, p.stderr
    assert "ok (sources: model)" in p.stdout and "checksum: spec:" in p.stdout


def test_validate_reports_every_problem_with_yaml_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsources:\n  - name: a\n    kind: humaneval\n    policy: {k: -1}\n"
                   "measure: {select: {source: a, band: [0.9, 0.1]}}\n")
    p = _probe("validate", str(bad))
    assert p.returncode == 2
    assert f"{bad}:5: sources[0].policy.k:" in p.stderr
    assert "measure.select.band: Value error" not in p.stderr
    assert "measure.select.band: band must satisfy 0 <= low <= high <= 1" in p.stderr


def test_validate_missing_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nsources:\n  - {name: a, kind: file, path: nope.jsonl, "
                    "fields: {reward: r}}\n")
    assert main(["validate", str(spec)]) == 2
    assert "sources[0].path: file not found" in capsys.readouterr().err
    assert main(["validate", "--no-files", str(spec)]) == 0


def test_validate_checks_verifier_params(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nsources:\n  - {name: a, kind: humaneval, "
                    "verifier: {kind: code_exec, params: {timout: 3}}}\n")
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "sources[0].verifier.params:" in err and "timout" in err and "timeout" in err


def test_report_reprints_without_prefect(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").write_text("# Study `x`\n\npass@1 0.500 [0.300, 0.700] (10 tasks)\n")
    (run / "report.json").write_text('{"report_version": 1}\n')
    p = _probe("report", str(run))
    assert p.returncode == 0 and p.stdout == (run / "report.md").read_text()
    p = _probe("report", "--json", str(run))
    assert p.returncode == 0 and p.stdout == '{"report_version": 1}\n'
    p = _probe("report", str(tmp_path / "nothing"))
    assert p.returncode == 2 and "not a finished run directory" in p.stderr


def test_schema_check(tmp_path: Path) -> None:
    assert main(["schema", "--check", str(ROOT / "configs" / "schema.json")]) == 0
    stale = tmp_path / "schema.json"
    stale.write_text("{}")
    assert main(["schema", "--check", str(stale)]) == 1
    assert main(["schema", "--output", str(stale)]) == 0
    assert main(["schema", "--check", str(stale)]) == 0


def test_run_refuses_dask_without_a_real_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """runner: dask needs PREFECT_API_URL: a clear error before any Prefect start-up."""
    from assay.flows.embedded import OrchestrationError, require_real_server

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with pytest.raises(OrchestrationError, match="needs a real Prefect server"):
        require_real_server("dask")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    monkeypatch.setenv("ASSAY_EMBEDDED_API", "1")  # our embedded server does not count
    with pytest.raises(OrchestrationError, match="needs a real Prefect server"):
        require_real_server("ray")
    monkeypatch.delenv("ASSAY_EMBEDDED_API")
    with pytest.raises(OrchestrationError, match="needs a real Prefect server"):
        require_real_server("dask", embedded=True)
    require_real_server("dask")
    require_real_server("local")
    # The command says so and exits 2 (the embedded server it launched is stopped again).
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nsources: [{name: a, kind: humaneval}]\nexecution: {runner: dask}\n")
    from assay.flows.embedded import local_settings

    for k in [*local_settings(tmp_path), "PREFECT_API_URL", "ASSAY_STORE"]:
        monkeypatch.delenv(k, raising=False)  # restored after the test, whatever run sets
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(spec), "--store", str(tmp_path / "st")]) == 2
    assert "needs a real Prefect server" in capsys.readouterr().err
