"""The scoring worker: models built and run in a spawned process, scores back as the same bytes;
its failures named; a stuck or orphaned worker never outlives its bound.

References: the same adapter called in this process; the worker's pid and exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.worker_models import Adapter, ChatAdapter, Entry

from assay.reward.base import RewardModelError
from assay.reward.worker import RemoteModel, ScoringWorker

PROMPTS = ["What is 2 + 2?", "Name a colour.", ""]
RESPONSES = ["4", "Blue, or maybe green.", "nothing"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_scores_cross_the_process_as_the_same_bytes():
    with ScoringWorker() as w:
        plain, chat = w.load(Entry("plain"), None), w.load(Entry("chat", "chat"), None)
        assert isinstance(plain, RemoteModel) and (plain.mid, chat.mid) == (0, 1)
        assert (plain.fingerprint, plain.device, plain.name) == ("rm:test-worker", "cpu", "plain")
        assert w._proc.pid != os.getpid() and w._proc.poll() is None
        ref = Adapter("ok").score(PROMPTS, RESPONSES)
        assert plain.score(PROMPTS, RESPONSES).tobytes() == ref.tobytes()
        assert not hasattr(plain, "score_conversations")
        convs = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]
        assert chat.score_conversations(convs, ["ok"]).tobytes() == \
            ChatAdapter("chat").score_conversations(convs, ["ok"]).tobytes()
        proc = w._proc
    assert proc.returncode == -signal.SIGKILL  # stopped at once, and reaped
    with pytest.raises(RewardModelError, match="closed"):
        plain.score(PROMPTS, RESPONSES)


def test_a_failed_load_raises_the_models_own_error():
    with ScoringWorker() as w:
        with pytest.raises(RewardModelError, match="broken: cannot load"):
            w.load(Entry("broken", "fail_build"), None)
        assert w.load(Entry("fine"), None).score(["a"], ["b"]).shape == (1,)  # still serving


def test_a_worker_that_dies_is_named_with_its_exit_code():
    with ScoringWorker() as w:
        rm = w.load(Entry("dies", "exit"), None)
        with pytest.raises(RewardModelError, match=r"died \(exit code 3\)"):
            rm.score(PROMPTS, RESPONSES)
        with pytest.raises(RewardModelError, match="died"):  # and every later call
            rm.score(PROMPTS, RESPONSES)


def test_close_kills_a_call_that_never_returns():
    w = ScoringWorker()
    rm = w.load(Entry("stuck", "hang"), None)
    pid = w._proc.pid
    errors: list[BaseException] = []

    def call() -> None:
        try:
            rm.score(PROMPTS, RESPONSES)
        except BaseException as e:  # noqa: BLE001 - kept for the assertion
            errors.append(e)

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + 60  # a bound for the call to be in flight, not a margin
    while not w._lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    w.close(grace_s=0.5)  # the lock is held by the call: the process is killed under it
    t.join(60)
    assert not t.is_alive() and (not _pid_alive(pid) or _zombie(pid))
    assert len(errors) == 1 and "died" in str(errors[0])


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False


def test_a_sigkilled_parent_leaves_no_worker(tmp_path):
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
            "from helpers.worker_models import Entry; "
            "from assay.reward.worker import ScoringWorker; "
            "w = ScoringWorker(); w.load(Entry('x'), None); "
            "print(w._proc.pid, flush=True); time.sleep(3600)")
    tests = str(Path(__file__).resolve().parents[1])
    p = subprocess.Popen([sys.executable, "-c", code, tests], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline())
        assert _pid_alive(pid)
        p.send_signal(signal.SIGKILL)
        p.wait(60)
        deadline = time.monotonic() + 60  # watch_parent looks every 0.25 s: a bound
        while _pid_alive(pid) and not _zombie(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _pid_alive(pid) or _zombie(pid)
    finally:
        p.kill()


def test_a_script_without_a_main_guard_is_not_run_again_by_the_worker(tmp_path):
    # A multiprocessing spawn re-imports the parent's __main__: a user's script without the
    # `if __name__ == "__main__"` guard would run again (its study, its side effects). And a
    # folder named `assay` in the working directory does not shadow the package in the worker.
    marker = tmp_path / "ran.txt"
    (tmp_path / "s").mkdir()
    script = tmp_path / "s" / "script.py"
    (tmp_path / "w" / "assay").mkdir(parents=True)
    (tmp_path / "w" / "assay" / "__init__.py").write_text("raise ImportError('a decoy')\n")
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        f"open({str(marker)!r}, 'a').write('ran\\n')\n"
        "from helpers.worker_models import Entry\n"
        "from assay.reward.worker import ScoringWorker\n"
        "with ScoringWorker() as w:\n"
        "    print(w.load(Entry('x'), None).score(['a'], ['b']).tolist())\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path / "w")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[0.47619047619047616]"
    assert marker.read_text() == "ran\n"


def test_warm_imports_ahead_without_a_reply_and_a_failing_one_is_left_to_the_load():
    with ScoringWorker() as w:
        w.warm(["no_such_module_for_assay_tests", "helpers.worker_models"])
        pid = w._proc.pid
        # the next call gets its own reply (a warm message answered would shift every reply)
        m = w.load(Entry("plain"), None)
        assert w._proc.pid == pid and m.mid == 0
        assert m.score(PROMPTS, RESPONSES).tobytes() == Adapter("ok").score(
            PROMPTS, RESPONSES).tobytes()
        mods = w.call("score", 0, ["x"], ["y"])  # still in step
        assert mods.shape == (1,)
    w.warm(["json"])  # closed: nothing starts
    assert w._proc is None
