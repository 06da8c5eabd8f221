"""The GPU device check (benchmarks/device_check.py) cannot rot: its ``--cpu`` mode runs here in an
environment holding only what the device image has plus the wheels the check ships, ends in its
table and JSON, and exits non-zero when a check fails."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_check.py"
SECTIONS = {"reward_hf", "reward_minilm", "generate", "loglik", "study"}


@pytest.fixture(scope="module")
def dc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def device_site(dc: ModuleType, dest: Path) -> set[str]:
    """A folder of links to the installed distributions the device has (the issue's list and
    what they require) and the ones the check ships: with ``python -S`` and this folder on the
    path, importing anything else fails, as it would there."""
    import importlib.metadata as md

    allowed = dc.requirement_closure(list(dc.DEVICE_HAS)) | dc.requirement_closure(list(dc.SHIP))
    dest.mkdir(parents=True)
    for name in sorted(allowed):
        dist = md.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            src = Path(str(dist.locate_file(top)))
            if top in ("..", "bin") or top.endswith(".pth") or not src.exists():
                continue
            if not (dest / top).exists():
                (dest / top).symlink_to(src)
    return allowed


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def _table(stdout: str) -> list[str]:
    """The table: the lines from its header to the verdict, which must end the output."""
    lines = stdout.rstrip("\n").splitlines()
    head = max(i for i, line in enumerate(lines) if line.split()[:1] == ["what"])
    assert lines[-1].startswith("device check: "), lines[-3:]
    return lines[head:]


@pytest.mark.slow
def test_cpu_mode_passes_with_only_what_travels(tmp_path: Path, dc: ModuleType) -> None:
    from assay.reward.embedding import bundled_model_path

    travel = tmp_path / "minilm-int8"
    dc.pack_minilm(bundled_model_path(), travel)
    # the travel copy's weights, with the wheels measured 2026-12-07 (27.6 MiB), fit
    assert (travel / "model.safetensors").stat().st_size < 24 * 2**20
    allowed = device_site(dc, tmp_path / "site")
    out = tmp_path / "dc.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT / 'src'}"}
    p = _run(["-S", str(SCRIPT), "--cpu", "--minilm", str(travel), "--out", str(out)], env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    table = _table(p.stdout)
    assert table[0].split() == ["what", "cpu(a)", "cpu", "ratio", "pass"]
    assert table[-1].startswith("device check: PASS (0 failed of 13 checks)")
    doc = json.loads(out.read_text())
    assert doc["passed"] is True and doc["mode"] == "cpu" and set(doc["checks"]) == SECTIONS
    assert len(doc["table"]) == len(table) - 2  # one JSON row per table row
    for row, line in zip(doc["table"], table[1:-1]):
        assert line.startswith(row["what"])
        assert line.endswith({True: "pass", False: "FAIL", None: "-"}[row["pass"]])
    assert set(doc["imports"]) <= allowed | {"assay"}
    checks = doc["checks"]
    assert checks["reward_minilm"]["model"].startswith("the travel copy")
    # the timed call's batches alone hold every distinct item once (chosen and rejected)
    assert sum(checks["reward_hf"]["a"]["batch_sizes"]) == 2 * doc["sizes"]["pairs"]
    assert sum(checks["reward_minilm"]["a"]["batch_sizes"]) >= doc["sizes"]["pairs"]
    assert checks["generate"]["tokens_equal"]
    assert checks["study"]["a"]["max_at_once"] == 1
    assert checks["study"]["a"]["calls"]["HFBackend"] >= 2  # several generate shards ran
    assert 0 < checks["study"]["passed_rows"] < checks["study"]["rows"]  # mixed verdicts


@pytest.mark.slow
def test_a_difference_fails_the_run(tmp_path: Path) -> None:
    out = tmp_path / "dc.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = _run([str(SCRIPT), "--cpu", "--inject", "reward-hf", "--inject", "loglik",
              "--out", str(out)], env)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    table = _table(p.stdout)
    assert table[-1].startswith("device check: FAIL (")
    # the injected rows fail (a shifted score may move the rank statistics too), nothing else
    failed = [line for line in table if line.endswith("FAIL")]
    assert {f.split(":")[0] for f in failed} == {"reward hf", "loglik"}, failed
    assert any(f.startswith("reward hf: max |score diff|") for f in failed)
    assert any(f.startswith("loglik: max |logprob diff|") for f in failed)
    doc = json.loads(out.read_text())
    assert doc["passed"] is False and doc["inject"] == ["loglik", "reward-hf"]
    assert doc["checks"]["reward_hf"]["max_abs_diff"] >= 1.0
    assert doc["checks"]["loglik"]["max_abs_diff"] > 9e-3  # the 1e-2 added, after rounding


def test_minilm_travel_copy_scores_like_the_bundled_model(tmp_path: Path, dc: ModuleType
                                                          ) -> None:
    from assay.reward.embedding import EmbeddingRewardModel, bundled_model_path

    worst = dc.pack_minilm(bundled_model_path(), tmp_path / "travel")
    restored = dc.restore_minilm(tmp_path / "travel", tmp_path / "restored")
    assert json.loads((tmp_path / "travel" / "TRAVEL.json").read_text())[
        "max_abs_weight_change"] == worst
    prompts = ["What is the capital of France?", "How do plants make sugar?"] * 2
    answers = ["Paris is the capital.", "Photosynthesis turns light into sugar.",
               "I like turtles.", "The stock market fell today."]
    ref = EmbeddingRewardModel(device="cpu").score(prompts, answers)
    got = EmbeddingRewardModel(restored, device="cpu").score(prompts, answers)
    assert float(np.max(np.abs(got - ref))) < 0.02
    assert list(np.argsort(got)) == list(np.argsort(ref))


def test_reports_compare_outside_reward_numbers_and_spec_checksum(dc: ModuleType) -> None:
    def report(pass1: float, rm: float, checksum: str) -> dict:
        return {"study": {"name": "s", "checksum": checksum},
                "measurements": [
                    {"kind": "pass_at", "estimates": [{"name": "pass@1", "value": pass1}]},
                    {"kind": "reward_rows", "label": "rm:rm", "value": rm}]}

    base = report(0.5, 0.25, "spec:1")
    # a CUDA run: bf16 reward numbers and a spec naming another device
    assert dc.comparable(base) == dc.comparable(report(0.5, 0.2501, "spec:2"))
    assert dc.comparable(base) != dc.comparable(report(0.4, 0.25, "spec:1"))
    assert dc.comparable(base)["measurements"][0]["estimates"][0]["value"] == 0.5


def test_a_wrong_minilm_folder_is_one_error_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = _run([str(SCRIPT), "--cpu", "--minilm", str(tmp_path / "nothing"),
              "--out", str(tmp_path / "dc.json")], env)
    assert p.returncode == 2
    assert [line for line in p.stderr.splitlines() if line.strip()] == [
        f"error: --minilm: {tmp_path / 'nothing'} is neither a model folder (config.json) nor a "
        "travel copy (TRAVEL.json)"]
    assert not (tmp_path / "dc.json").exists()
