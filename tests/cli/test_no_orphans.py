"""No orphans and bounded runs (issue 24), on real `assay run` / `assay nightly` subprocesses.

Each test starts the command in its own session, waits until a stage is running with its
children alive (the embedded Prefect server, sandbox servers and the candidates they run,
grading worker processes), kills it (SIGKILL, or SIGTERM) and lists what is left of every
process it ever had below it. The waits are for events (a line on stderr, a process appearing),
each with a generous bound; none of the assertions depends on how fast the machine is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from assay.errors import EXIT_STOPPED

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

#: a plugin next to the spec: a model that never answers, a parallel verifier and a reward
#: model that never finish (each stage then waits with its children alive)
PLUGIN = '''
import time

def never(prompts):
    time.sleep(600)

class SlowCheck:
    """A parallel verifier: grade runs it on forked worker processes."""
    parallel = True

    def check(self, candidate, reference=None, row=None):
        time.sleep(600)
        return 1.0

def slow_rm(prompts, responses):
    time.sleep(600)
'''

SANDBOX = """name: {name}
sources:
  - name: m
    kind: file
    path: d.jsonl
    fields: {{reference: reference}}
    verifier: {{kind: code_exec, params: {{timeout: 300}}}}
{extra}"""

WORKERS = """name: workers
sources:
  - name: m
    kind: file
    path: d.jsonl
    fields: {reference: reference}
    verifier: {kind: "slowplug:SlowCheck"}
execution: {workers: 2}
"""

GENERATE = """name: gen
sources:
  - name: m
    kind: file
    path: p.jsonl
    fields: {prompt: q, reference: a}
    generate:
      model: {kind: function, callable: "slowplug:never"}
      k: 2
    verifier: {kind: exact_match}
"""

# a source graded in-process in milliseconds, then one whose candidates never finish
STALL = """name: stall
sources:
  - name: fine
    kind: file
    path: ok.jsonl
    fields: {reference: reference}
    verifier: {kind: exact_match}
  - name: m
    kind: file
    path: d.jsonl
    fields: {reference: reference}
    verifier: {kind: code_exec, params: {timeout: 300}}
execution: {stall_after: 20s}
"""

# graded by CodeExec (warm sandbox servers stay alive), then scored by a model that never ends
SCORING = """name: scoring
sources:
  - name: m
    kind: file
    path: d2.jsonl
    fields: {reference: reference}
    verifier: {kind: code_exec, params: {timeout: 5}}
reward:
  models:
    - {name: slow, kind: function, function: "slowplug:slow_rm"}
  score: {sources: [m]}
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PREFECT_HOME for the module: its database is made once (the first start)."""
    return tmp_path_factory.mktemp("prefect-home")


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "slowplug.py").write_text(PLUGIN)
    sleeper = "import time\ntime.sleep(600)\n"
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": sleeper, "reference": "assert True"}) + "\n"
        for i in range(3)))
    (tmp_path / "d2.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": "x = 1\n", "reference": "assert x == 1"})
        + "\n" for i in range(4)))
    (tmp_path / "p.jsonl").write_text("".join(
        json.dumps({"q": f"q{i}", "a": "1"}) + "\n" for i in range(3)))
    return tmp_path


class Watched:
    """A command in its own session; remembers every process ever seen below it."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.p = subprocess.Popen(args, cwd=cwd, env={**_env(), "PYTHONPATH": os.pathsep.join(
            [str(cwd), _env()["PYTHONPATH"]])}, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        self.seen: dict[tuple[int, float], psutil.Process] = {}
        self._new_line = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:  # every process that ever runs below the command, until it ends
        while self.p.poll() is None:
            self.look()
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            with self._new_line:
                self.lines.append(line)
                self._new_line.notify_all()
        with self._new_line:
            self.lines.append("")  # end of output
            self._new_line.notify_all()

    def look(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.p.pid).children(recursive=True)
        except psutil.Error:
            return []
        for c in kids:
            try:
                self.seen[(c.pid, c.create_time())] = c
            except psutil.Error:
                pass
        return kids

    def wait_line(self, pred: Callable[[str], bool], bound: float = 240.0) -> str:
        end = time.monotonic() + bound
        with self._new_line:
            i = 0
            while True:
                while i < len(self.lines):
                    if pred(self.lines[i]):
                        return self.lines[i]
                    if self.lines[i] == "":
                        pytest.fail("exited before the expected line:\n" + "".join(self.lines))
                    i += 1
                if not self._new_line.wait(timeout=max(0.0, end - time.monotonic())):
                    pytest.fail("the expected line never came:\n" + "".join(self.lines))

    def wait_children(self, pred: Callable[[list[psutil.Process]], bool],
                      bound: float = 120.0) -> list[psutil.Process]:
        end = time.monotonic() + bound
        while time.monotonic() < end:
            kids = self.look()
            if pred(kids):
                return kids
            time.sleep(0.1)
        pytest.fail(f"children never appeared: {[_name(k) for k in self.look()]}")

    def left_after(self, seconds: float = 5.0) -> list[str]:
        """Processes seen below the command still alive ``seconds`` after it ended."""
        procs = list(self.seen.values())
        _, alive = psutil.wait_procs(procs, timeout=seconds)
        return [f"{p.pid} {_name(p)}" for p in alive if _alive(p)]

    def stop(self) -> None:
        for p in [*self.seen.values()]:
            try:
                p.kill()
            except psutil.Error:
                pass
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return " ".join(os.path.basename(a) for a in p.cmdline()[:6])
    except psutil.Error:
        return "?"


def _is_candidate_tree(kids: list[psutil.Process]) -> bool:
    """Sandbox servers running their sleeping candidates (a server has children)."""
    try:
        pids = {k.pid for k in kids if _name(k).endswith("forkserver.py")}
        servers = [k for k in kids if k.pid in pids and k.ppid() not in pids]  # not their forks
        return bool(servers) and all(s.children() for s in servers)
    except psutil.Error:
        return False


@pytest.fixture()
def watched() -> Iterator[list[Watched]]:
    made: list[Watched] = []
    yield made
    for w in made:
        w.stop()


def _start(made: list[Watched], folder: Path, home: Path, spec: str, *,
           nightly: bool = False) -> Watched:
    (folder / "s.yaml").write_text(spec)
    args = ([str(BIN / "assay"), "nightly", "s.yaml", "--root", "runs"] if nightly else
            [str(BIN / "assay"), "run", "s.yaml", "--output", "out"])
    w = Watched(args + ["--store", "store", "--prefect-home", str(home)], folder)
    made.append(w)
    return w


POINTS = {
    "grading-sandboxes": (SANDBOX.format(name="sb", extra=""), "[grade]", _is_candidate_tree),
    "grading-workers": (WORKERS, "[grade]",
                        lambda ks: any("assay run" in _name(k) for k in ks)),  # forked workers
    "generation": (GENERATE, "[generate]", lambda ks: len(ks) >= 1),
    # the audit (independent of the rows) or score-rows, whichever holds the model slot first
    "scoring-with-warm-sandboxes": (SCORING, "[score-",
                                    lambda ks: any(_name(k).endswith("forkserver.py")
                                                   for k in ks)),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(POINTS))
def test_sigkill_of_run_leaves_nothing(point: str, folder: Path, home: Path,
                                       watched: list[Watched]) -> None:
    spec, stage, ready = POINTS[point]
    w = _start(watched, folder, home, spec)
    w.wait_line(lambda ln: ln.startswith(stage) and "running" in ln)
    w.wait_children(ready)
    w.look()
    assert w.seen, "nothing was started below the run: the test would prove nothing"
    os.kill(w.p.pid, signal.SIGKILL)  # the run only: its children must go by themselves
    w.p.wait(timeout=30)
    assert w.left_after() == []


@pytest.mark.slow
def test_sigterm_mid_grading_one_line_143_nothing_left(folder: Path, home: Path,
                                                        watched: list[Watched]) -> None:
    w = _start(watched, folder, home, SANDBOX.format(name="term", extra=""))
    w.wait_line(lambda ln: ln.startswith("[grade]") and "running" in ln)
    w.wait_children(_is_candidate_tree)
    os.kill(w.p.pid, signal.SIGTERM)  # as a scheduler stops a job: to the process only
    rc = w.p.wait(timeout=120)
    w.wait_line(lambda ln: ln == "")
    errors = [ln for ln in w.lines if ln.startswith("error: ")]
    assert rc == 128 + 15, "".join(w.lines)
    assert errors == ["error: terminated (SIGTERM); rerun the same command to resume from the "
                      "cached stages\n"], "".join(w.lines)
    assert "Traceback" not in "".join(w.lines)
    assert w.left_after() == []


@pytest.mark.slow
def test_sigkill_of_nightly_mid_grading(folder: Path, home: Path, watched: list[Watched]) -> None:
    w = _start(watched, folder, home, SANDBOX.format(name="nsb", extra=""), nightly=True)
    w.wait_children(_is_candidate_tree, bound=240)
    os.kill(w.p.pid, signal.SIGKILL)
    w.p.wait(timeout=30)
    assert w.left_after() == []


@pytest.mark.slow
def test_stall_stops_the_run_names_the_stage_and_leaves_nothing(
        folder: Path, home: Path, watched: list[Watched]) -> None:
    """Candidates that sleep far past the stall bound: exit 5 with one line naming the stage,
    the shard and what was in flight; every sandbox gone; the rerun with fixed data resumes
    (every stage the stopped run finished is served from the store; which ones finished
    depends on the graph's schedule, so the test reads them from the first run's lines)."""
    (folder / "ok.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": "1", "reference": "1"}) + "\n"
        for i in range(2)))
    spec = STALL
    w = _start(watched, folder, home, spec)
    rc = w.p.wait(timeout=300)
    w.wait_line(lambda ln: ln == "")
    out = "".join(w.lines)
    assert rc == EXIT_STOPPED, out
    errors = [ln for ln in w.lines if ln.startswith("error: ")]
    assert len(errors) == 1, out
    assert errors[0].startswith("error: grade (m): stopped by execution.stall_after (20s): "
                                "no progress for "), out
    assert "in flight: [grade] m shard 1/1: 0/3 done" in errors[0], out
    assert "Traceback" not in out
    assert w.left_after() == []
    # the rerun: the fixed source grades, the other one is not graded again
    (folder / "d.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": "x = 1\n", "reference": "assert x == 1"})
        + "\n" for i in range(3)))
    again = _start(watched, folder, home, spec)
    assert again.p.wait(timeout=300) == 0, "".join(again.lines)
    again.wait_line(lambda ln: ln == "")
    import re

    finished = [m.group(1) for ln in w.lines
                if (m := re.match(r"(\[[a-z-]+\] [^:]+): \d+ rows in ", ln))]
    assert "[build-rows] fine" in finished, out  # at least one stage finished before the stop
    for done in finished:  # source m's data changed; what the stopped run finished of fine stays
        if done.split("] ", 1)[1].split(" shard")[0] == "fine":
            assert f"{done}: cached\n" in again.lines, (done, "".join(again.lines))
