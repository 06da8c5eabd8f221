"""The nightly evaluates tonight's checkpoint, against a real OpenAI-protocol server on 127.0.0.1
that can swap the weights behind a served name: the gate fires on a planted regression between
checkpoints named in the spec, on the command line, and behind one unchanged served name; it
stays quiet for two checkpoints of the same quality; a night never reuses another night's
completions of an unproven model, while a rerun of the same night asks only what is missing
(requests counted at the server); an alert goes out once per night and verdict."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.openai_server import Fault, OpenAIServer  # noqa: E402
from helpers.webhook_receiver import webhook_receiver  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
N_TASKS, K = 30, 2
#: Share of wrong answers per set of weights; "good" and "twin" are the same quality with
#: different mistakes (their own hash salt), "bad" is the planted regression.
ERROR_RATE = {"good": 10, "twin": 10, "bad": 65}


class Weights:
    """What stands behind each served name; tests swap it between nights."""

    def __init__(self, **served: str) -> None:
        self.served = dict(served)

    def policy(self, body: dict[str, Any]) -> str:
        w = self.served[body["model"]]
        q = body["messages"][-1]["content"]
        a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", q).groups())
        h = int(hashlib.sha256(f"{w}|{q}|{body['seed']}".encode()).hexdigest()[:8], 16)
        return f"The answer is {a + b + (h % 100 < ERROR_RATE[w])}."


@pytest.fixture
def served() -> Iterator[tuple[OpenAIServer, Weights]]:
    weights = Weights(**{"ckpt-1": "good", "ckpt-2": "bad", "ckpt-3": "twin", "latest": "good"})
    srv = OpenAIServer(list(weights.served), policy=weights.policy).start()
    yield srv, weights
    srv.stop()


def write_spec(tmp: Path, base_url: str, model: str, extra: str = "") -> Path:
    with open(tmp / "prompts.jsonl", "w") as f:
        for i in range(N_TASKS):
            f.write(json.dumps({"id": f"t{i}", "q": f"What is {i} + {2 * i + 1}?",
                                "gold": str(3 * i + 1)}) + "\n")
    p = tmp / "spec.yaml"
    p.write_text(f"""
name: ckpts
sources:
  - name: model
    kind: file
    path: prompts.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{base_url}", model: {model}}}
      k: {K}
      params: {{temperature: 0.7, max_tokens: 32}}
      max_connections: 1
    verifier: {{kind: numeric}}
measure:
  pass_at: {{k: 1}}
{extra}""")
    return p


def night(spec: Path, tmp: Path, date: str, **kw: Any) -> dict[str, Any]:
    """One night through the flow; the summary, also when the night regressed."""
    from assay.flows.nightly import NightlyRegression, nightly

    try:
        return nightly(specs=[str(spec)], root=str(tmp / "nights"), night=date,
                       store_root=str(tmp / "store"), **kw)
    except NightlyRegression as e:
        return e.summary


def nightly_doc(tmp: Path, date: str) -> dict[str, Any]:
    return json.loads((tmp / "nights" / "ckpts" / date / "nightly.json").read_text())


def run_info(tmp: Path, date: str) -> dict[str, Any]:
    return json.loads((tmp / "nights" / "ckpts" / date / "run.json").read_text())


@pytest.mark.server
@pytest.mark.slow
def test_checkpoint_in_the_spec_keeps_the_history_and_gates(prefect_server: str, tmp_path: Path,
                                                            served: Any) -> None:
    srv, _ = served
    first = night(write_spec(tmp_path, srv.base_url, "ckpt-1"), tmp_path, "2026-12-01")
    assert first["regressions"] == [] and srv.count() == N_TASKS * K
    # tomorrow's spec names the next checkpoint: the same study, so the gate compares them
    second = night(write_spec(tmp_path, srv.base_url, "ckpt-2"), tmp_path, "2026-12-02")
    assert second["regressions"] == ["ckpts/model/pass@1"]
    assert second["studies"]["ckpts"]["baseline"] == {"model": "2026-12-01"}
    assert run_info(tmp_path, "2026-12-01")["spec_definition"] == \
        run_info(tmp_path, "2026-12-02")["spec_definition"]
    doc = nightly_doc(tmp_path, "2026-12-02")
    (src,) = doc["sources"]
    assert src["under_test"]["model"] == "ckpt-2"
    assert src["baseline_under_test"]["model"] == "ckpt-1"
    assert any(c.startswith("model: ckpt-1 -> ckpt-2") for c in src["model_changes"])
    md = (tmp_path / "nights" / "ckpts" / "2026-12-02" / "nightly.md").read_text()
    assert "| tonight | ckpt-2 |" in md and "| baseline 2026-12-01 | ckpt-1 |" in md
    assert "k=2 T=0.7 top_p=1 max_tokens=32" in md
    assert "worse by the two-sided exact sign-flip test over 30 paired tasks" in md


@pytest.mark.server
@pytest.mark.slow
def test_checkpoint_from_the_command_line(prefect_server: str, tmp_path: Path, served: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from assay.cli import main

    srv, _ = served
    spec = write_spec(tmp_path, "http://127.0.0.1:9/v1", "no-such-ckpt")  # all from the flags
    args = ["nightly", str(spec), "--root", str(tmp_path / "nights"), "--store",
            str(tmp_path / "store"), "--set", f"generate.model.base_url={srv.base_url}"]
    assert main([*args, "--night", "2026-12-01", "--model", "ckpt-1"]) == 0
    capsys.readouterr()
    # a same-quality checkpoint: quiet
    assert main([*args, "--night", "2026-12-02", "--model", "ckpt-3"]) == 0
    out = capsys.readouterr()
    assert "ckpts: no gated regression (model vs 2026-12-01)" in out.out
    assert "model: ckpt-1 -> ckpt-3" in out.err
    # the planted regression, as cron runs it, with an alert target that is down: exit 3, one
    # readable block and one line for the failed alert; Prefect's records go to the night's run.log
    from tests.helpers.ports import free_port

    dead = f"http://127.0.0.1:{free_port()}/hook"
    p = subprocess.run([str(BIN / "assay"), *args, "--night", "2026-12-03", "--model", "ckpt-2",
                        "--revision", "step-7000", "--set", f"nightly.notify={dead}"],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 3, p.stderr[-3000:]
    assert "error: REGRESSION" not in p.stderr and "ERROR" not in p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert "ckpts: REGRESSION on night 2026-12-03" in p.stderr
    assert ("ckpts: generation: 60 samples asked: 60 completions, 0 failed; 60 HTTP requests; "
            "60 rows in all") in p.stderr
    assert "ckpts/model/pass@1: delta -" in p.stderr and "vs 2026-12-02: worse by the" in p.stderr
    (failed,) = [ln for ln in p.stderr.splitlines() if "alert" in ln]
    assert failed.startswith("alert NOT delivered: nightly.notify: posting the regression "
                             f"alert to {dead}")
    log = (tmp_path / "nights" / "ckpts" / "2026-12-03" / "run.log").read_text()
    assert "REGRESSION ckpts/model/pass@1" in log and "NotifyError" in log
    info = run_info(tmp_path, "2026-12-03")
    assert info["under_test"]["model"]["model"] == "ckpt-2"
    assert info["under_test"]["model"]["revision"] == "step-7000"
    assert info["overrides"][:2] == ["generate.model.@checkpoint=ckpt-2",
                                     "generate.model.revision=step-7000"]
    # the history names each night's checkpoint, in aligned columns
    assert main(["history", str(tmp_path / "nights" / "ckpts")]) == 0
    table = capsys.readouterr().out.splitlines()
    pass_rows = [ln for ln in table[2:] if "pass@1*" in ln]
    assert [re.search(r"ckpt-\d(@step-7000)?", ln).group(0) for ln in pass_rows] == \
        ["ckpt-1", "ckpt-3", "ckpt-2@step-7000"]
    col = table[0].index("model")
    assert all(ln[col:].startswith("ckpt-") for ln in pass_rows)
    assert len({ln.index("k=2 T=0.7") for ln in pass_rows}) == 1


@pytest.mark.server
def test_new_weights_behind_one_served_name_are_evaluated_not_read_from_cache(
        prefect_server: str, tmp_path: Path, served: Any) -> None:
    srv, weights = served
    with webhook_receiver() as hook:
        spec = write_spec(tmp_path, srv.base_url, "latest",
                          f"nightly: {{notify: '{hook['url']}'}}\n")
        assert night(spec, tmp_path, "2026-12-01")["regressions"] == []
        assert srv.count() == N_TASKS * K
        # the same served name, same /v1/models answer, new (worse) weights behind it
        weights.served["latest"] = "bad"
        before = srv.count()
        second = night(spec, tmp_path, "2026-12-02")
        assert srv.count() - before == N_TASKS * K  # asked afresh, not last night's answers
        assert second["regressions"] == ["ckpts/model/pass@1"] and second["alerts"] == [hook["url"]]
        tested = run_info(tmp_path, "2026-12-02")["under_test"]["model"]
        assert tested["scope"] == "night:2026-12-02"
        # rerunning the same night: every completion from that night's cache, said so; the
        # alert for this verdict is not sent again
        before = srv.count()
        again = night(spec, tmp_path, "2026-12-02")
        assert srv.count() == before and again["regressions"] == ["ckpts/model/pass@1"]
        assert again["alerts"] == [] and again["alerts_already_sent"] == [hook["url"]]
        assert hook["requests"] == 1
        info = run_info(tmp_path, "2026-12-02")
        assert info["sent"] == 0
        assert all(g["sent"] == 0 for g in info["generation"]["shards"].values())
        md = (tmp_path / "nights" / "ckpts" / "2026-12-02" / "nightly.md").read_text()
        assert "0 requests sent: all 60 completions served from the cache" in md


@pytest.mark.server
@pytest.mark.slow
def test_resume_within_a_night_asks_only_what_is_missing(prefect_server: str, tmp_path: Path,
                                                         served: Any) -> None:
    from assay.errors import GenerationError

    srv, _ = served
    spec = write_spec(tmp_path, srv.base_url, "latest")
    # the 26th request gets a 400: the run stops there, after 25 committed answers
    srv.faults = lambda n, body: Fault(400, message="injected stop") if n == 25 else None
    with pytest.raises(GenerationError):
        night(spec, tmp_path, "2026-12-01")
    assert srv.count() == 26
    srv.faults = []
    assert night(spec, tmp_path, "2026-12-01")["regressions"] == []
    assert srv.count() - 26 == N_TASKS * K - 25  # only the 35 never answered
    # the next night asks everything again (the served identity proves nothing) ...
    before = srv.count()
    night(spec, tmp_path, "2026-12-02")
    assert srv.count() - before == N_TASKS * K
    # ... unless the user vouches for the weights: reuse across nights, nothing asked
    before = srv.count()
    night(spec, tmp_path, "2026-12-03", overrides=["generate.reuse=across_nights"])
    night(spec, tmp_path, "2026-12-04", overrides=["generate.reuse=across_nights"])
    assert srv.count() - before == N_TASKS * K
    assert run_info(tmp_path, "2026-12-04")["sent"] == 0


@pytest.mark.server
def test_changed_study_definition_starts_a_new_history_unless_carried_over(
        prefect_server: str, tmp_path: Path, served: Any) -> None:
    srv, _ = served
    spec = write_spec(tmp_path, srv.base_url, "ckpt-1")
    night(spec, tmp_path, "2026-12-01")
    old_def = run_info(tmp_path, "2026-12-01")["spec_definition"]
    # a different filter of the prompts: another study definition
    text = spec.read_text().replace(
        "    verifier:", "    steps: [{op: slice, start: 0, stop: 20}]\n    verifier:")
    spec.write_text(text)
    res = night(spec, tmp_path, "2026-12-02", model="ckpt-2")
    assert res["regressions"] == [] and res["studies"]["ckpts"]["baseline"] == {"model": None}
    note = res["studies"]["ckpts"]["new_history"]
    assert note.startswith("New history: the study definition changed since night 2026-12-01")
    assert "; changed: sources[0].steps)" in note
    assert f"continues: [{old_def}]" in note
    md = (tmp_path / "nights" / "ckpts" / "2026-12-02" / "nightly.md").read_text()
    assert "New history" in md
    # carried over explicitly: compared with the earlier night, and the regression is caught
    res = night(spec, tmp_path, "2026-12-03", model="ckpt-2",
                overrides=[f"nightly.continues=[{old_def}]", "nightly.baseline=2026-12-01"])
    assert res["regressions"] == ["ckpts/model/pass@1"]
    assert res["studies"]["ckpts"]["baseline"] == {"model": "2026-12-01"}
