"""Adversarial suite for CodeExec: exit tricks, fork bombs, loops, memory, escapes, secrets."""

from __future__ import annotations

import os
import time

import psutil
import pytest

import assay
from assay.verify import CodeExec, sandbox
from assay.verify.code import extract_code
from assay.verify.sandbox import SandboxPool, job

CHECK = {"test": "def check(f):\n    assert f(2) == 4\n    assert f(-3) == 9\n",
         "entry_point": "sq"}
GOOD = "def sq(x):\n    return x * x\n"
MARK = "987654.25"  # a unique sleep duration: finds leaked sleepers by their command line


def _leaked() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "uids"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            uid = p.info["uids"].real if p.info["uids"] else 0
        except (psutil.Error, TypeError):
            continue
        if MARK in cmd or uid in sandbox.issued_uids():
            out.append(p)
    return out


def _descendants() -> set[int]:
    """This process's descendants, less CodeExec's warm sandbox servers (kept between grade
    calls by design); each of those must be idle: no candidate or anything it started is left."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if any("forkserver.py" in part for part in p.cmdline()):
                assert p.children(recursive=True) == [], \
                    f"sandbox server {p.pid} still has children"
                continue
        except psutil.NoSuchProcess:
            continue
        out.add(p.pid)
    return out


def _grade(candidates, **kw):
    rows = assay.rows(["sq"] * len(candidates), candidates, CodeExec(**kw),
                      references=[CHECK] * len(candidates))
    return list(rows)


ADVERSARIAL = {
    "sys_exit_0": GOOD + "import sys\nsys.exit(0)\n",
    "os_exit_0": GOOD + "import os\nos._exit(0)\n",
    "raise_systemexit": "raise SystemExit(0)\n",
    "print_passed": "print('PASSED')\nprint('all tests passed')\nimport os\nos._exit(0)\n",
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + GOOD,
    "kill_all": ("import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n"
                 "    pass\nos._exit(0)\n"),
    "exit_in_check": GOOD + ("import builtins\nbuiltins.__dict__['assert_'] = None\ndef sq(x):\n"
                             "    raise SystemExit(0)\n"),
    "atexit_trick": ("import atexit, os\natexit.register(lambda: os._exit(0))\n"
                     "raise RuntimeError('boom')\n"),
    "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                  "        pass\n"),
    "infinite_loop": "def sq(x):\n    while True:\n        pass\n",
    "memory_hog": "x = bytearray(8 * 1024 ** 3)\n" + GOOD,
    "memory_grow": "x = []\nwhile True:\n    x.append(bytearray(50 * 1024 ** 2))\n",
    "huge_output": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "huge_file": ("with open('big', 'wb') as f:\n    while True:\n"
                  "        f.write(b'x' * 1024 ** 2)\n"),
    "many_files": "fs = [open(f'f{i}', 'w') for i in range(10000)]\n" + GOOD,
}
# Honest code that also leaves processes behind: may pass, but nothing it starts may survive.
CONTAINED = {
    "sleeper_setsid": ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                       f"        os.execv('/bin/sleep', ['sleep', '{MARK}'])\n"
                       "    os._exit(0)\n" + GOOD),
    "sleeper_popen": (f"import subprocess\nsubprocess.Popen(['sleep', '{MARK}'], "
                      "start_new_session=True)\n" + GOOD),
    "python_sleeper": ("import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                       "    time.sleep(1000)\n" + GOOD),
}
ADVERSARIAL |= {
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)\n" + GOOD,
    "network_dns": "import socket\nsocket.getaddrinfo('example.com', 80)\n" + GOOD,
}


#: Candidates whose verdict the tests name exactly (they pass, or fail with a given reason):
#: graded with a timeout far above what they need, so a loaded machine cannot turn them into
#: timeouts. The rest only must not pass; a timeout is one way of not passing.
EXACT = ("memory_hog", *CONTAINED)


@pytest.fixture(scope="module")
def adversarial():
    before = _descendants()
    loose = {n: c for n, c in ADVERSARIAL.items() if n not in EXACT}
    exact = {n: c for n, c in (ADVERSARIAL | CONTAINED).items() if n in EXACT}
    rows = _grade(list(loose.values()), timeout=2.0, memory_mb=512, file_mb=4)
    rows += _grade(list(exact.values()), timeout=120.0, memory_mb=512, file_mb=4)
    return dict(zip([*loose, *exact], rows)), _descendants() - before


def test_honest_candidate_passes_and_meta_records_isolation():
    r = _grade([GOOD, "def sq(x):\n    return x + x\n"])
    assert [x["reward"] for x in r] == [1.0, 0.0]
    assert r[0]["judge_status"] == "ok" and r[0]["judge_name"] == "CodeExec"
    sandbox = r[0]["judge_meta"]["sandbox"]
    assert set(sandbox) >= {"netns", "mountns", "uid_drop"}
    assert r[1]["reason"] == "failed: AssertionError"


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_candidate_never_passes(adversarial, name):
    rows, _ = adversarial
    row = rows[name]
    assert row["reward"] != 1.0, (name, row["reason"], row["judge_meta"])
    # A sandbox that itself fails (e.g. fork refused on a saturated machine) is an "error" row,
    # never a pass; that case is reported, and any other outcome must be a judged failure.
    if row["judge_status"] == "error":
        assert row["reward"] is None and row["reason"], row
    else:
        assert row["reward"] == 0.0 and row["judge_status"] == "ok", \
            (name, row["reason"], row["judge_meta"])


def test_adversarial_suite_is_bounded_and_leaves_no_process(adversarial):
    rows, new_children = adversarial  # bounded: every job has a timeout (no wall-clock check)
    assert not new_children
    if os.geteuid() == 0:  # the candidates ran as throwaway uids handed out in this process
        assert sandbox.issued_uids()
    assert not _leaked()
    assert rows["infinite_loop"]["judge_meta"]["outcome"] == "timeout"
    assert rows["fork_bomb"]["judge_meta"]["outcome"] in ("timeout", "failed", "killed")
    assert rows["memory_hog"]["reason"] == "failed: MemoryError"
    for name in CONTAINED:
        assert "left_over_processes" not in rows[name]["judge_meta"]
    # a function-call candidate may fork but not start programs (a started program would not
    # carry the guard on open(), so it could read the hidden tests from disk)
    # (sleeper_setsid passes: its exec, in a grandchild, is refused there and starts nothing)
    for name in ("python_sleeper", "sleeper_setsid"):
        assert rows[name]["reward"] == 1.0, rows[name]["reason"]
    assert rows["sleeper_popen"]["reward"] == 0.0
    assert "subprocess.Popen (refused)" in rows["sleeper_popen"]["reason"]
    assert rows["sleeper_popen"]["judge_meta"]["guard"] == "sandbox"


def test_sleepers_are_killed_even_when_the_candidate_passes():
    before = _descendants()
    honest_but_leaky = [
        GOOD + f"import subprocess\nsubprocess.Popen(['sleep', '{MARK}'], "
               "start_new_session=True)\n",
        GOOD + "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(1000)\n",
    ]
    rows = _grade(honest_but_leaky, timeout=120.0)  # a bound, not a margin: they take ms
    # the tests did pass for the forking one; the leftovers die anyway. Starting a program is
    # refused to a function-call candidate; a whole program (below) may, and its sleeper dies too
    assert [r["reward"] for r in rows] == [0.0, 1.0]
    assert "subprocess.Popen (refused)" in rows[0]["reason"]
    with SandboxPool(1) as pool:
        out = pool.run([job(honest_but_leaky[0] + "assert sq(3) == 9\n", timeout=120.0)])
    assert out[0]["status"] == "passed" and out[0]["left_over"] == 0
    assert not _leaked()
    assert _descendants() <= before


def test_scrubbed_environment(monkeypatch):
    monkeypatch.setenv("ASSAY_TEST_SECRET", "hunter2")
    probe = GOOD + "import os\nassert 'hunter2' not in repr(dict(os.environ))\n"
    assert _grade([probe])[0]["reward"] == 1.0
    leak = GOOD + "import os\nassert os.environ.get('ASSAY_TEST_SECRET') == 'hunter2'\n"
    assert _grade([leak])[0]["reward"] == 0.0


def test_no_write_outside_the_temp_dir(tmp_path):
    target = tmp_path / "escape.txt"
    shared_tmp = f"/tmp/assay-escape-{os.getpid()}.txt"
    writers = [
        GOOD + f"open({str(target)!r}, 'w').write('x')\n",
        GOOD + f"open({shared_tmp!r}, 'w').write('x')\n",
        GOOD + "open('inside.txt', 'w').write('x')\nassert open('inside.txt').read() == 'x'\n",
    ]
    with SandboxPool(1) as pool:
        iso = pool.isolation
    rows = _grade(writers)
    assert not target.exists()
    assert not os.path.exists(shared_tmp)
    assert rows[2]["reward"] == 1.0  # its own temp dir is writable
    if iso["uid_drop"]:
        assert rows[0]["reward"] == 0.0
    if not iso["mountns"] and not iso["uid_drop"]:
        pytest.skip("neither a mount namespace nor a dropped uid: writes are not confined here")


def test_network_namespace_when_available():
    with SandboxPool(1) as pool:
        iso = pool.isolation
    if not iso["netns"]:
        pytest.skip(f"no network namespace here: {iso['notes']}")
    probe = GOOD + ("import socket\ns = socket.socket()\ns.settimeout(1)\n"
                    "try:\n    s.connect(('1.1.1.1', 53))\n    ok = True\nexcept OSError:\n"
                    "    ok = False\nassert not ok\n")
    assert _grade([probe])[0]["reward"] == 1.0


def test_nonce_is_not_in_the_candidates_memory():
    # every frame above the candidate (the harness, the fork server's job loop) and the
    # server's globals: no 48-hex-digit token (the nonce's shape) may be reachable. (Proved
    # able to fail: with the nonce drawn before fork() it finds it in the job loop's locals.)
    probe = GOOD + (
        "import re, sys\n"
        "pat = re.compile('[0-9a-f]{48}')\n"
        "def scan(v):\n"
        "    if isinstance(v, bytes):\n"
        "        v = v.decode('latin-1')\n"
        "    return isinstance(v, str) and pat.search(v) is not None\n"
        "hits, f = [], sys._getframe()\n"
        "while f is not None:\n"
        "    hits += [k for k, v in f.f_locals.items() if scan(v)]\n"
        "    f = f.f_back\n"
        "hits += [k for k, v in list(vars(sys.modules['__main__']).items()) if scan(v)]\n"
        "assert not hits, hits\n"
    )
    assert _grade([probe])[0]["reward"] == 1.0


def test_plain_tests_and_test_functions():
    v = CodeExec(tests="assert add(1, 2) == 3\ndef test_more():\n    assert add(-1, 1) == 0\n")
    rows = assay.rows(["add"], [["def add(a, b):\n    return a + b\n",
                                "def add(a, b):\n    return a + b if a > 0 else 1\n"]], v)
    assert [r["reward"] for r in rows] == [1.0, 0.0]


def test_fenced_code_is_extracted():
    text = "Sure!\n```python\ndef sq(x):\n    return x * x\n```\nThis squares x."
    assert extract_code(text).startswith("def sq")
    assert _grade([text])[0]["reward"] == 1.0


def test_bad_tests_are_an_error_not_a_fail():
    rows = assay.rows(["x"], [["pass"]], CodeExec(), references=[{"tests": "oops"}])
    assert rows[0]["reward"] is None and rows[0]["judge_status"] == "error"
    assert "test" in rows[0]["reason"]
    rows = assay.rows(["x"], [["pass"]], CodeExec())
    assert rows[0]["judge_status"] == "no_reference"


def test_sandbox_pool_direct():
    with SandboxPool(2) as pool:
        out = pool.run([job("assert 1 + 1 == 2"), job("assert 1 + 1 == 3"),
                        job("import os; os._exit(0)")])
    assert [r["status"] for r in out] == ["passed", "failed", "failed"]


def test_cleanup_without_a_dropped_uid():
    """The path a non-root caller takes: no throwaway uid, so the fork server's process-group
    kill and descendant sweep alone must stop fork bombs and sleepers."""
    kill_parent_leave_sleeper = (f"import os, signal, subprocess\n"
                                 f"subprocess.Popen(['sleep', '{MARK}'], "
                                 "start_new_session=True)\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                 "os._exit(0)\n")
    progs = [ADVERSARIAL["fork_bomb"], CONTAINED["sleeper_setsid"], CONTAINED["sleeper_popen"],
             ADVERSARIAL["os_exit_0"], GOOD + "\nassert sq(3) == 9\n", kill_parent_leave_sleeper]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with SandboxPool(2, drop_privileges=False) as pool:
        assert not pool.isolation["uid_drop"]
        # the fork bomb is stopped by its 2 s timeout; the others' verdicts are named exactly,
        # so their timeout only bounds them (a loaded machine must not turn them into timeouts)
        out = pool.run([job(p, timeout=2.0 if i == 0 else 120.0) for i, p in enumerate(progs)])
    assert [r["status"] for r in out][1:] == ["passed", "passed", "failed", "passed", "failed"]
    assert out[0]["status"] in ("timeout", "failed", "killed")
    assert all(r["left_over"] == 0 for r in out)
    assert not _leaked()
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_jobs_that_exit_at_once_are_failures_not_errors():
    """A candidate compiled before the fork can exit before the server writes its nonce; that
    write then meets a closed pipe. It must read as a failed job, never as a sandbox error."""
    progs = ["import os\nos._exit(1)\n", "raise ValueError('at once')\n",
             "import os\nos._exit(0)\n"]
    with SandboxPool(2) as pool:
        out = pool.run([job(progs[i % 3], timeout=120.0) for i in range(300)])
    assert [r["status"] for r in out] == ["failed"] * 300


def test_failure_traceback_quotes_the_candidate_line():
    """The compact traceback (built without traceback.format_exc) names the frames, quotes the
    candidate's failing line and ends with the exception, as Python's own does."""
    with SandboxPool(1) as pool:
        out = pool.run([job("def f(x):\n    return x[3]\n\nf([1])\n"),
                        job("def g(:\n    pass\n")])
    tail = out[0]["output_tail"]
    assert out[0]["status"] == "failed"
    assert 'File "candidate.py", line 4, in <module>\n    f([1])' in tail
    assert 'line 2, in f\n    return x[3]' in tail
    assert tail.rstrip().endswith("IndexError: list index out of range")
    assert out[1]["status"] == "failed" and "SyntaxError" in out[1]["output_tail"]


def test_warm_pool_is_reused_and_closed():
    """CodeExec keeps its sandbox servers between grade calls (same servers, fresh fork per
    candidate); shutdown_workers() stops them."""
    from assay.grading import shutdown_workers
    from assay.verify import sandbox

    shutdown_workers()
    v = CodeExec(workers=2)
    assert _grade_with(v, [GOOD, GOOD])[0]["reward"] == 1.0
    servers = {p.pid for p in psutil.Process().children()
               if "forkserver.py" in " ".join(p.cmdline())}
    assert len(servers) == 2
    assert [r["reward"] for r in _grade_with(v, [GOOD, "def sq(x):\n    return x\n"])] == [1.0, 0.0]
    again = {p.pid for p in psutil.Process().children() if "forkserver.py" in " ".join(p.cmdline())}
    assert again == servers
    with (sandbox.warm_pool(2, max_procs=v.max_procs) as a,
          sandbox.warm_pool(2, max_procs=v.max_procs) as b):
        assert a is not b  # a concurrent caller gets its own pool
    shutdown_workers()
    assert not {p.pid for p in psutil.Process().children() if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE and "forkserver.py" in " ".join(p.cmdline())}


def _grade_with(verifier, candidates):
    return list(assay.rows(["sq"] * len(candidates), candidates, verifier,
                           references=[CHECK] * len(candidates)))


def test_warm_pool_closes_promptly_while_a_forked_child_holds_its_pipes():
    """A process forked after the servers started (a grading worker) holds copies of their
    stdin pipes, so end-of-input never reaches them; closing must not wait for it."""
    from assay.verify import sandbox

    with sandbox.warm_pool(2) as pool:
        assert pool.run([job("pass")])[0]["status"] == "passed"
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    try:
        sandbox.close_idle_pools()  # waiting for end of input would block until the child ends
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # returned while it holds them
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_warm_pool_survives_the_thread_that_started_it():
    """A task runner's worker thread may start the servers and exit; the next grade call (any
    thread) must find them alive, not lose a job as ``server_died``."""
    import threading

    from assay.verify import sandbox

    sandbox.close_idle_pools()

    def first() -> None:
        with sandbox.warm_pool(2) as pool:
            pool.run([job("pass")])

    t = threading.Thread(target=first)
    t.start()
    t.join()
    time.sleep(1.0)
    with sandbox.warm_pool(2) as pool:
        out = pool.run([job("assert 1 + 1 == 2") for _ in range(4)])
    assert [r["status"] for r in out] == ["passed"] * 4
    sandbox.close_idle_pools()


def test_sandbox_server_exits_when_its_parent_process_dies():
    """With the parent SIGKILLed (and its pipes possibly held elsewhere), the idle servers go."""
    import subprocess
    import sys

    code = ("import os, sys, time\nfrom assay.verify import sandbox\n"
            "with sandbox.warm_pool(2) as p:\n    p.run([sandbox.job('pass')])\n"
            "print(' '.join(str(s.proc.pid) for s in p._servers), flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 60  # they poll their parent every 0.5 s; a bound, not a margin
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status()
                                              != psutil.STATUS_ZOMBIE for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids
                if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_server_that_died_while_idle_is_replaced_before_its_next_job():
    from assay.verify import sandbox

    with sandbox.warm_pool(2) as pool:
        pool.run([job("pass")])
    for s in pool._servers:
        s.proc.kill()
        s.proc.wait()
    with sandbox.warm_pool(2) as again:
        assert again is pool
        out = again.run([job("assert True") for _ in range(4)])
    assert [r["status"] for r in out] == ["passed"] * 4
    sandbox.close_idle_pools()
