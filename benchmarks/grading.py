"""Benchmark: grading throughput of assay's CodeExec, MathEqual and ExactMatch next to whileai's.

Same rows, same machine, same run. For each of ``--repeats`` fresh seeded workloads, whileai
(in its own interpreter) and assay grade it in turn, each after an untimed warm-up on the first
rows; the median rows/second is reported with the ratio assay / whileai.

Workloads:
- CodeExec: HumanEval, every canonical solution plus one broken variant per problem (no
  infinite loops, of any variant kind: a timeout measures the clock, not the grader). whileai
  gets the same programs as whole files with ``check(entry_point)`` appended to the tests, since
  it has no HumanEval mode.
- MathEqual: GSM8K-style prose ending "The answer is 1,200." / "#### 1200" and MATH-style
  derivations ending in ``\\boxed{}`` (fractions, surds, pi, intervals, pairs; equivalent and wrong
  forms), k = 4 samples per problem, about 60% right (``--math-data fractions``: the earlier
  all-fractions workload).
- ExactMatch: short seeded strings, half matching.

Reading the numbers on a shared machine: Linux's autogroup scheduler shares the CPU between
sessions, and every CodeExec candidate runs in its own session (setsid, for process-group
isolation), so under load from other sessions assay's sandboxes get more CPU than whileai's
subprocesses, which share this script's session. MathEqual's worker processes share this
script's session like whileai's threads, so under load neither gets more than one session's
share; the pool's advantage (two cores where the GIL allows one) only shows on an idle machine.
assay keeps its grading workers between calls: each repeat stops them first, so, like the
peer's fresh interpreter, they are warmed only by that repeat's untimed first rows.

The peer runs in its own interpreter (/work/peers/bin/python); this file is also its driver
(``--role peer``), importing only the standard library and whileai there. whileai's MathEqual
needs math-verify in the peer environment (the same version as assay's).

Measured 2026-11-30 on the 2-core dev VM (medians of 3): CodeExec 229 vs 56 rows/s (4.09x;
3.4-3.9x in other runs; target 3x), MathEqual 275 vs 63 rows/s (4.33x; target 2x), ExactMatch
14,834 vs 5,000 rows/s; CodeExec and MathEqual give the peer's rewards on every row.

The boundary's cost (``boundary cost`` line): the same HumanEval rows graded the way CodeExec
did before the plain-data boundary (candidate and tests in one sandboxed process), on the same
warm pool. Measured 2026-12-01 on the 2-core dev VM under load from other sessions (load
average 6-15), medians of 3: CodeExec with the boundary 59.5 rows/s, whileai 5.3 rows/s
(11.2x; target 3x), one shared process 169 rows/s: the boundary costs 2.8x the time per row
(a second process per candidate, which a loaded scheduler starts late, and a pipe round trip
per call, ~50 us of CPU); same rewards on every row. whileai's rows that differ (0.3%) are
canonical solutions it timed out under that load.

Usage:
    .venv/bin/python benchmarks/grading.py               # all three, 3 repeats
    .venv/bin/python benchmarks/grading.py --only code --repeats 5
    .venv/bin/python benchmarks/grading.py --only code \\
        --peer-python /work/scratch/<you>/peer/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

PEER_PYTHON = "/work/peers/bin/python"
SEED = 20261130
TARGETS = {"code": 3.0, "math": 2.0, "exact": None}


def workloads(only: list[str], math_rows: int, exact_rows: int, seed: int = SEED,
              math_data: str = "realistic") -> dict[str, dict]:
    """The rows each tool grades: prompts, completions, references (assay and peer forms).
    Each repeat gets its own seed, so no tool is timed on answers it has already cached."""
    rng = random.Random(seed)
    out: dict[str, dict] = {}
    if "code" in only:
        from assay.offline import VARIANT_KINDS, broken_variant, humaneval

        prompts, comps, refs, peer_comps, peer_refs = [], [], [], [], []
        kinds = [k for k in VARIANT_KINDS if k != "infinite_loop"]
        for i, p in enumerate(humaneval()):
            variant = None
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
                variant = broken_variant(p, kind, seed=seed)
                if variant is not None and _finishes(p.prompt + variant + "\n" + p.test,
                                                     p.entry_point):
                    break
                variant = None
            if variant is None:
                continue
            for c in (p.canonical_solution, variant):
                prompts.append(p.prompt)
                comps.append(c)
                refs.append(p.reference)
                peer_comps.append(p.prompt + c)
                peer_refs.append(p.test + f"\ncheck({p.entry_point})\n")
        out["code"] = {"prompts": prompts, "completions": comps, "references": refs,
                       "peer_completions": peer_comps, "peer_references": peer_refs}
    if "math" in only:
        out["math"] = (math_fractions if math_data == "fractions"
                       else math_realistic)(math_rows, rng)
    if "exact" in only:
        words = ["alpha", "beta", "gamma", "delta", "Paris", "New York", "-5", "3.14", "forty two"]
        prompts, comps, refs = [], [], []
        for i in range(exact_rows):
            ref = rng.choice(words)
            comps.append(ref if rng.random() < 0.5 else rng.choice(words) + "!")
            prompts.append(f"q{i}")
            refs.append(ref)
        out["exact"] = {"prompts": prompts, "completions": comps, "references": refs}
    return out


# GSM8K-style problems: (question template, answer as a function of the drawn numbers).
_GSM = [
    ("{a} boxes hold {b} apples each; {c} apples are eaten. How many are left?",
     lambda a, b, c: a * b - c),
    ("A shop sells {a} pens a day for {b} days, then {c} more. How many pens in all?",
     lambda a, b, c: a * b + c),
    ("A ticket costs ${b}. {a} friends buy one each and get ${c} back in total. What did they pay?",
     lambda a, b, c: a * b - c),
]


def math_realistic(n: int, rng: random.Random) -> dict:
    """GSM8K- and MATH-style completions, k = 4 samples per problem, about 40% wrong.

    GSM8K half: integer references ("1200"), completions that reason in prose with intermediate
    numbers and end "The answer is 1,200." / "#### 1200" / "... so $1,200 in total.".
    MATH half: LaTeX references (fractions, surds, multiples of pi, integers, intervals, pairs),
    completions with a derivation and a ``\\boxed{}`` answer, sometimes in an equivalent form
    (an unsimplified fraction, a decimal) and sometimes wrong (off by one, a sign, a wrong
    surd)."""
    prompts, comps, refs = [], [], []
    for i in range(n):
        if i % 4 == 0:  # a new problem every k = 4 samples
            gsm = rng.random() < 0.5
            a, b, c = rng.randint(2, 60), rng.randint(3, 90), rng.randint(1, 50)
            if gsm:
                tmpl, f = rng.choice(_GSM)
                question, answer = tmpl.format(a=a, b=b, c=c), f(a, b, c)
                ref = str(answer)
            else:
                kind = rng.randrange(6)
                p, q = rng.randint(1, 30), rng.randint(2, 30)
                g = __import__("math").gcd(p, q)
                p, q = p // g, q // g
                if q == 1:
                    kind = 3
                ref, forms, wrong = {
                    0: (f"\\frac{{{p}}}{{{q}}}",
                        [f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{2 * p}}}{{{2 * q}}}", f"{p / q:.4f}"],
                        [f"\\frac{{{p + 1}}}{{{q}}}", f"\\frac{{{q}}}{{{p}}}",
                         f"-\\frac{{{p}}}{{{q}}}"]),
                    1: (f"{a}\\sqrt{{{c + 1}}}",
                        [f"{a}\\sqrt{{{c + 1}}}", f"\\sqrt{{{a * a * (c + 1)}}}"],
                        [f"{a}\\sqrt{{{c + 2}}}", f"{a + 1}\\sqrt{{{c + 1}}}"]),
                    2: (f"\\frac{{{p}\\pi}}{{{q}}}",
                        [f"\\frac{{{p}\\pi}}{{{q}}}", f"\\frac{{{p}}}{{{q}}}\\pi"],
                        [f"\\frac{{{p + 1}\\pi}}{{{q}}}", f"{p}\\pi"]),
                    3: (str(a * b - c), [str(a * b - c)], [str(a * b - c + 1), str(-(a * b - c))]),
                    4: (f"({p}, {a}]", [f"({p}, {a}]", f"\\left({p}, {a}\\right]"],
                        [f"[{p}, {a}]", f"({p}, {a + 1}]"]),
                    5: (f"({p}, -{c})", [f"({p}, -{c})", f"\\left({p},-{c}\\right)"],
                        [f"({p}, {c})", f"(-{c}, {p})"]),
                }[kind]
                question = f"MATH problem {i // 4} (kind {kind})"
        right = rng.random() < 0.6
        xs = [(rng.randint(2, 99), rng.randint(2, 9)) for _ in range(rng.randint(1, 3))]
        if gsm:
            steps = " ".join(f"{x} * {y} = {x * y}." for x, y in [(a, b)] + xs[1:])
            val = answer if right else answer + rng.choice([-10, -2, -1, 1, 3, 12])
            end = rng.choice([f"The answer is {val:,}.", f"#### {val}",
                              f"So the total is {val:,}, and that is the final answer."])
            comps.append(f"Let me work through it. {question} {steps} {end}")
        else:
            steps = " ".join(f"Step {k + 1}: ${x} \\times {y} = {x * y}$."
                             for k, (x, y) in enumerate(xs))
            ans = rng.choice(forms if right else wrong)
            comps.append(f"We set up the problem. {steps} Therefore the answer is "
                         f"$\\boxed{{{ans}}}$.")
        prompts.append(question)
        refs.append(ref)
    return {"prompts": prompts, "completions": comps, "references": refs}


def math_fractions(n: int, rng: random.Random) -> dict:
    """The earlier synthetic workload, kept for comparison: every reference a fraction
    a/b; answers as a boxed fraction, a 6-digit decimal, or "x = a/b"; half right."""
    prompts, comps, refs = [], [], []
    for i in range(n):
        if i % 4 == 0:  # k = 4 samples per problem
            a, b = rng.randint(1, 999), rng.randint(2, 600)
        right = rng.random() < 0.5
        num = a if right else a + rng.randint(1, 5)
        form = i % 3
        if form == 0:
            comps.append(f"We simplify and get $\\boxed{{\\frac{{{num}}}{{{b}}}}}$.")
        elif form == 1:
            comps.append(f"The answer is {num / b:.6f}")
        else:
            comps.append(f"So x = {num}/{b}, which is the final result.")
        prompts.append(f"math problem {i // 4}")
        refs.append(f"\\frac{{{a}}}{{{b}}}")
    return {"prompts": prompts, "completions": comps, "references": refs}


def _finishes(program: str, entry_point: str, seconds: float = 2.0) -> bool:
    """Whether a program and its tests end (pass or fail) within ``seconds`` in a forked child.
    Some broken variants loop forever without being the ``infinite_loop`` kind (``//`` turned
    into ``/`` leaves ``while div: div -= 1`` spinning on a float); like the infinite loops,
    they would time the timeout, so the workload uses the next kind instead."""
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            os.dup2(1, 2)
            ns: dict = {"__name__": "__candidate__"}
            exec(compile(program, "candidate.py", "exec"), ns)
            ns["check"](ns[entry_point])
        finally:
            os._exit(0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
        time.sleep(0.005)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return False


def _head(w: dict, n: int) -> dict:
    return {k: v[:n] for k, v in w.items()}


def run_assay(name: str, w: dict) -> tuple[float, list]:
    """Seconds to grade workload ``w`` (after grading its first rows once, untimed)."""
    import assay
    from assay.verify import CodeExec, ExactMatch, MathEqual

    make = {"code": lambda: CodeExec(timeout=3.0), "math": MathEqual, "exact": ExactMatch}[name]
    try:  # start every repeat cold, like the peer's fresh interpreter: no workers warmed by
        from assay.grading import shutdown_workers  # an earlier repeat's whole workload
        shutdown_workers()
    except ImportError:  # an older assay without shared workers
        pass

    def go(x: dict) -> list:
        return [r["reward"] for r in assay.rows(x["prompts"], x["completions"], make(),
                                                references=x["references"],
                                                task_ids=[f"t{i}"
                                                          for i in range(len(x["prompts"]))])]
    go(_head(w, 24))
    start = time.perf_counter()
    rewards = go(w)
    return time.perf_counter() - start, rewards


def run_shared_process(w: dict) -> tuple[float, list]:
    """The boundary's cost: the same HumanEval rows graded the way CodeExec did before the
    plain-data boundary (candidate and tests in one sandboxed process: raw jobs of prompt +
    completion + tests), on the same warm sandbox pool, same workers, same warm-up."""
    from assay.verify.code import extract_code
    from assay.verify.sandbox import default_workers, job, warm_pool

    def jobs(x: dict) -> list:
        return [job(r["prompt"] + extract_code(c) + "\n\n" + r["test"] + "\n",
                    entry_point=r["entry_point"], timeout=3.0)
                for c, r in zip(x["completions"], x["references"])]
    n = 2 * default_workers()  # CodeExec's default
    with warm_pool(min(n, 24), max_procs=32) as pool:
        pool.run(jobs(_head(w, 24)))
    todo = jobs(w)
    with warm_pool(min(n, len(todo)), max_procs=32) as pool:
        start = time.perf_counter()
        out = pool.run(todo)
        seconds = time.perf_counter() - start
    return seconds, [1.0 if o["status"] == "passed" else 0.0 for o in out]


def run_peer(name: str, w: dict) -> tuple[float, list]:
    """The same for whileai, run in the peer interpreter."""
    import whileai as wai

    make = {"code": lambda: wai.verify.CodeExec(timeout=3.0), "math": wai.verify.MathEqual,
            "exact": wai.verify.ExactMatch}[name]

    def go(x: dict) -> list:
        comps = x.get("peer_completions", x["completions"])
        refs = x.get("peer_references", x["references"])
        rows = wai.rows(x["prompts"], comps, make(), references=refs,
                        task_ids=[f"t{i}" for i in range(len(x["prompts"]))])
        return [None if r.get("reward") is None else float(r["reward"]) for r in rows]
    go(_head(w, 24))
    start = time.perf_counter()
    rewards = go(w)
    return time.perf_counter() - start, rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["main", "peer"], default="main")
    ap.add_argument("--only", default="code,math,exact")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--math-rows", type=int, default=600)
    ap.add_argument("--math-data", choices=["realistic", "fractions"], default="realistic",
                    help="GSM8K/MATH-style completions, or the earlier all-fractions workload")
    ap.add_argument("--exact-rows", type=int, default=20000)
    ap.add_argument("--data", help="(peer role) the workload file")
    ap.add_argument("--peer-python", default=os.environ.get("ASSAY_PEER_PYTHON", PEER_PYTHON),
                    help="interpreter with whileai installed (outside the repo); default "
                         "$ASSAY_PEER_PYTHON or " + PEER_PYTHON)
    ap.add_argument("--name", help="(peer role) the workload to run")
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s]
    if args.role == "peer":
        with open(args.data) as f:
            w = json.load(f)
        print(json.dumps(run_peer(args.name, w)))
        return

    cores = len(os.sched_getaffinity(0))
    ours: dict[str, tuple[list[float], list]] = {}
    peer: dict[str, tuple[list[float], list]] | None = (
        {} if os.path.exists(args.peer_python) else None)
    shared: tuple[list[float], list] = ([], [])
    data: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Alternate the tools repeat by repeat, so both see the same load on a shared machine.
        for r in range(args.repeats):
            for n, w in workloads(only, args.math_rows, args.exact_rows, SEED + r,
                                  args.math_data).items():
                data.setdefault(n, []).append(w)
                if peer is not None:
                    path = os.path.join(tmp, f"{n}{r}.json")
                    with open(path, "w") as f:
                        json.dump(w, f)
                    proc = subprocess.run([args.peer_python, __file__, "--role", "peer", "--data",
                                           path, "--name", n], capture_output=True, text=True)
                    if proc.returncode != 0:
                        print("peer failed:", proc.stderr[-2000:], file=sys.stderr)
                        peer = None
                    else:
                        t, rw = json.loads(proc.stdout.strip().splitlines()[-1])
                        peer.setdefault(n, ([], []))[0].append(t)
                        peer[n] = (peer[n][0], rw)
                t, rw = run_assay(n, w)
                ours.setdefault(n, ([], []))[0].append(t)
                ours[n] = (ours[n][0], rw)
                if n == "code":
                    t, rw = run_shared_process(w)
                    shared = (shared[0] + [t], rw)

    print(f"grading throughput, rows/second (median of {args.repeats}, tools alternated, each "
          f"warmed up; {cores} cores)")
    print(f"{'verifier':<11}{'rows':>7}{'assay':>10}{'whileai':>10}{'ratio':>8}{'target':>8}  "
          "agreement")
    for n, ws in data.items():
        rows = len(ws[-1]["prompts"])
        a_rate = rows / statistics.median(ours[n][0])
        if peer and n in peer:
            p_rate = rows / statistics.median(peer[n][0])
            agree = sum((x == y) for x, y in zip(ours[n][1], peer[n][1])) / rows
            ratio = f"{a_rate / p_rate:7.2f}x"
            p_txt = f"{p_rate:10.1f}"
            agree_txt = f"{agree:.1%} same rewards"
        else:
            ratio, p_txt, agree_txt = "    n/a", "       n/a", "peer unavailable"
        target = f"{TARGETS[n]:.0f}x" if TARGETS[n] else "-"
        print(f"{n:<11}{rows:>7}{a_rate:>10.1f}{p_txt}{ratio}{target:>8}  {agree_txt}")
    if shared[0]:
        rows = len(data["code"][-1]["prompts"])
        with_b, without = (rows / statistics.median(ours["code"][0]),
                           rows / statistics.median(shared[0]))
        same = sum(x == y for x, y in zip(ours["code"][1], shared[1])) / rows
        print(f"boundary cost (CodeExec): {with_b:.1f} rows/s with the plain-data boundary, "
              f"{without:.1f} rows/s with candidate and tests in one process: "
              f"{with_b / without:.2f}x the throughput ({(without / with_b - 1) * 100:+.0f}% time "
              f"per row); {same:.1%} same rewards")
    print("raw seconds:", json.dumps({n: {"assay": [round(t, 3) for t in ours[n][0]],
                                          "whileai": [round(t, 3) for t in peer[n][0]]
                                          if peer and n in peer else None}
                                      for n in data}
                                     | ({"code_shared_process": [round(t, 3) for t in shared[0]]}
                                        if shared[0] else {})))


if __name__ == "__main__":
    main()
