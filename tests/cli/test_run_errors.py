"""What a user sees when `assay run` fails or is interrupted (issue 19), on real subprocesses.

An input error: one ``error:`` line saying where and how to fix it, exit 2; an unexpected
exception: one line naming the stage and the log file, exit 1; tracebacks only in
OUTPUT/run.log (and on the terminal with ``--debug``); a failed rerun marks the old report stale;
Ctrl-C while a sandbox waits on a long timeout exits at once with 130 and leaves no process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from assay.cli import STALE_MARK, main

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def _env(extra_path: Path | None = None, *, embedded: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if embedded:
        env.pop("PREFECT_API_URL", None)
    paths = [str(ROOT)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                        else paths)
    return env


def _run(tmp: Path, spec: Path, *extra: str,
         env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "assay"), "run", str(spec), "--store", str(tmp / "store"),
                           "--output", str(tmp / "out"), *extra],
                          capture_output=True, text=True, timeout=300, cwd=tmp, env=env)


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _terminal_noise(stderr: str) -> list[str]:
    """stderr lines that are neither our progress lines nor the one error line."""
    return [ln for ln in stderr.splitlines()
            if not ln.startswith(("[prefect] embedded API server", "[build-rows]", "[filter-rows]",
                                  "[grade]", "[measure]", "[report]", "[score-reward-model]",
                                  "error: ", "store: "))]


@pytest.mark.slow
def test_user_error_foreign_error_debug_and_stale_report(prefect_server: str,
                                                         tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    _write(data, [{"prompt": f"p{i}", "completion": "x", "r": i % 2} for i in range(6)])
    spec = tmp_path / "s.yaml"
    spec.write_text("name: demo\nsources:\n  - {name: m, kind: file, path: d.jsonl, fields: "
                    "{reward: r}}\n")
    env = _env(tmp_path)
    ok = _run(tmp_path, spec, env=env)
    assert ok.returncode == 0, ok.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert not report.startswith(STALE_MARK)

    # an input error at run time: one error line naming file, record and field; exit 2
    _write(data,
           [{"prompt": "p0", "completion": "x", "r": 1},
            {"prompt": "p1", "completion": "y", "r": "high"}])
    bad = _run(tmp_path, spec, env=env)
    assert bad.returncode == 2, bad.stderr
    # found before Prefect starts, as `assay validate` finds it: the spec's line, the record
    errors = [ln for ln in bad.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {spec} has 1 problem(s)"), bad.stderr
    assert (f"source 'm' ({data}): record 2, field 'r' (fields.reward): reward must be a number, "
            "got str 'high'") in bad.stderr
    # the error's own listed problems are indented under it; nothing else reaches the terminal
    listed = "\n".join(ln for ln in bad.stderr.splitlines() if not ln.startswith("  "))
    assert _terminal_noise(listed) == [] and "Traceback" not in bad.stderr
    assert len(bad.stderr.splitlines()) <= 4, bad.stderr
    log = (tmp_path / "out" / "run.log").read_text()
    assert "reward must be a number" in log
    # the old report is kept, marked stale, and `assay report RUN/report.md` prints it
    marked = (tmp_path / "out" / "report.md").read_text()
    assert marked.startswith(STALE_MARK) and marked.endswith(report)
    assert "failed: SpecError" in marked.splitlines()[0]  # the file's error, in the banner

    # an exception that is not ours: the stage and the log file, exit 1
    _write(data, [{"prompt": f"p{i}", "completion": "x", "r": i % 2} for i in range(6)])
    (tmp_path / "brokenrm.py").write_text("def score(prompts, responses):\n"
                                          "    raise RuntimeError('cannot load the weights')\n")
    spec.write_text(spec.read_text() + "reward:\n  models:\n    - {name: f, kind: function, "
                                       "function: 'brokenrm:score'}\n  data: {dataset: "
                                       "diagnostic_v3, dimensions: [verbosity]}\n")
    foreign = _run(tmp_path, spec, env=env)
    assert foreign.returncode == 1, foreign.stderr
    errors = [ln for ln in foreign.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: score-reward-model (f) failed: "
        "RuntimeError: cannot load the weights"), foreign.stderr
    assert str(tmp_path / "out" / "run.log") in errors[0]
    assert _terminal_noise(foreign.stderr) == [] and "Traceback" not in foreign.stderr
    assert "RuntimeError: cannot load the weights" in (tmp_path / "out" / "run.log").read_text()
    # one banner however many failures
    assert (tmp_path / "out" / "report.md").read_text().count(STALE_MARK) == 1

    # --debug: the traceback on the terminal too
    debug = _run(tmp_path, spec, "--debug", env=env)
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert "brokenrm.py" in debug.stderr


def test_report_accepts_the_report_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").write_text("# Study `x`\n")
    (run / "report.json").write_text('{"report_version": 1}\n')
    assert main(["report", str(run / "report.md")]) == 0
    assert capsys.readouterr().out == "# Study `x`\n"
    assert main(["report", "--json", str(run / "report.md")]) == 0
    assert capsys.readouterr().out == '{"report_version": 1}\n'


def test_mark_stale_keeps_one_banner(tmp_path: Path) -> None:
    from assay.cli import mark_stale

    assert not mark_stale(tmp_path, "failed: x")  # no report: nothing to mark
    (tmp_path / "report.md").write_text("# Study `x`\n\nbody\n")
    assert mark_stale(tmp_path, "failed: first")
    assert mark_stale(tmp_path, "interrupted")
    text = (tmp_path / "report.md").read_text()
    assert (text.count(STALE_MARK) == 1 and "(interrupted)" in text
            and text.endswith("# Study `x`\n\nbody\n"))


SLEEPY = """name: sleepy
sources:
  - name: m
    kind: file
    path: d.jsonl
    fields: {reference: reference}
    verifier: {kind: code_exec, params: {timeout: 600}}
"""


@pytest.mark.slow
def test_ctrl_c_while_sandboxes_wait_on_a_timeout(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C does, while every sandbox runs
    a candidate that sleeps far past the shard (timeout 600 s): rc 130 long before the
    candidates' timeout (so it did not wait for them), the friendly
    line, and no process of the run left (the embedded server, sandbox servers, candidates)."""
    _write(tmp_path / "d.jsonl",
           [{"prompt": f"p{i}", "completion": "import time\ntime.sleep(1200)\n",
             "reference": "assert True"} for i in range(3)])
    spec = tmp_path / "s.yaml"
    spec.write_text(SLEEPY)
    p = subprocess.Popen([str(BIN / "assay"), "run", str(spec), "--store", str(tmp_path / "store"),
                          "--output", str(tmp_path / "out")], stderr=subprocess.PIPE, text=True,
                         cwd=tmp_path, env=_env(embedded=True), start_new_session=True)
    try:
        seen = []
        for line in p.stderr:
            seen.append(line)
            if line.startswith("[grade]") and "running" in line:
                break
        else:
            pytest.fail("grading never started:\n" + "".join(seen))
        deadline = time.monotonic() + 120  # a bound: the candidates start in seconds
        while True:  # wait until a candidate runs: a sandbox server's forked child
            procs = psutil.Process(p.pid).children(recursive=True)
            servers = {c.pid for c in procs if _cmdline(c)[-1:] == ["forkserver.py"]}
            sleepers = [c for c in procs if _ppid(c) in servers]
            if sleepers or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sleepers, [(c.pid, _cmdline(c)) for c in procs]
        time.sleep(1.0)
        procs = psutil.Process(p.pid).children(recursive=True)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        rest = p.stderr.read()
        rc = p.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert rc == 130, "".join(seen) + rest
    assert took < 120.0, took  # not waiting for the 600 s timeout: no tighter margin
    assert "interrupted; rerun the same command to resume" in rest
    assert "Traceback" not in rest and "ConnectError" not in rest
    gone, alive = psutil.wait_procs(procs, timeout=2)
    assert [(c.pid, _cmdline(c)) for c in alive] == []


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return [os.path.basename(a) for a in p.cmdline()]
    except psutil.Error:
        return []


def _ppid(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None
