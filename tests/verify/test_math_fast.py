"""MathEqual's plain-number shortcuts give math-verify's own verdict: checked pair by pair
against math_verify.parse + verify on a seeded corpus of tricky numeric answers."""

from __future__ import annotations

import random
import time

import pytest
from math_verify import parse, verify

from assay.judging import Verifier
from assay.verify import MathEqual, Verdict
from assay.verify.symbolic import bare_number_verdict, parsed_verdict

TRICKY = [  # (candidate, reference)
    ("-0", "0"), ("0", "-0"), ("-0.0", "0"), ("1.0", "1"), ("1", "1.0"), ("1,000", "1000"),
    ("1000", "1,000"), ("1,000.5", "1000.5"), ("12,34", "12.34"), ("12,34", "1234"),
    ("3.14", "314"), ("314", "3.14"), ("1/2", "0.5"), ("0.5", "1/2"), ("0.5", "\\frac{1}{2}"),
    ("+5", "5"), ("5.", "5"), ("5", "5."), (".5", "0.5"), ("-.5", "-0.5"), ("007", "7"),
    ("1e3", "1000"), ("-5", "5"), ("5", "-5"), ("2/4", "1/2"), ("10/5", "2"), ("0/5", "0"),
    ("0.3333333", "1/3"), ("0.333333", "\\frac{1}{3}"), ("0.33", "1/3"), ("0.1", "1/10"),
    ("0.1234565", "0.1234575"), ("0.0000005", "0"), ("0.0000004", "0"), ("1.0000004", "1"),
    ("100%", "1"), ("50", "50\\%"), ("1 000", "1000"), ("1,0000", "10000"),
    ("1234567.5", "1234567.5"), ("999999.9999999", "1000000"), ("1/3", "0.333333"),
    ("The answer is 1,000.", "1000"), ("#### 72", "72"), ("\\boxed{-0}", "0"),
    ("so x = 524/360", "\\frac{131}{90}"), ("$\\frac{524}{360}$", "1.455556"),
    ("The answer is 1.455556", "\\frac{131}{90}"), ("The answer is 1.455555", "\\frac{131}{90}"),
]


def _gold(ref: str) -> list:
    return parse(ref if "$" in ref or "\\boxed" in ref else f"${ref}$")


def _number(rng: random.Random) -> str:
    kind = rng.randrange(8)
    sign = "-" if rng.random() < 0.2 else ""
    if kind == 0:
        return f"{sign}{rng.randint(0, 120)}"
    if kind == 1:
        return f"{sign}{rng.randint(0, 2_000_000):,}"
    if kind == 2:
        return f"{sign}{rng.randint(0, 999)}.{rng.randint(0, 10**rng.randint(1, 8)):d}"
    if kind == 3:
        return f"{sign}{rng.randint(0, 40)}/{rng.randint(1, 40)}"
    if kind == 4:
        return f"{sign}\\frac{{{rng.randint(0, 40)}}}{{{rng.randint(1, 40)}}}"
    if kind == 5:  # right at a 6-decimal rounding boundary, or one step off it
        return f"{sign}0.{rng.randint(0, 99999):05d}{rng.choice(['5', '49', '51', '50000001'])}"
    if kind == 6:
        return rng.choice(["+7", "7.", ".25", "-.25", "0007", "2e3", "1,00", "1 000", "12,5", "3%"])
    return f"{sign}{rng.randint(0, 3)}.{rng.randint(0, 10**9):09d}"


def _value(ref: str) -> float | None:
    text = ref.replace(",", "").replace("\\frac{", "(").replace("}{", ")/(").replace("}", ")")
    try:
        return float(eval(text, {}))  # only the generator's own numbers reach here
    except Exception:
        return None


def _variant(ref: str, rng: random.Random) -> str:
    """An answer to ``ref``: the same text, a rewrite of its value, or a nearby number."""
    choice = rng.randrange(5)
    if choice == 0:
        return ref
    if choice == 1:
        value = _value(ref)
        return ref if value is None else f"{value:.{rng.randint(1, 9)}f}"
    if choice == 2:
        return f"The answer is {ref}."
    if choice == 3:
        return f"So we get $\\boxed{{{ref}}}$"
    return _number(rng)


def corpus(n: int, seed: int = 7) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = list(TRICKY)
    while len(pairs) < n:
        ref = _number(rng)
        pairs.append((_variant(ref, rng), ref))
    return pairs


def compare(pairs: list[tuple[str, str]]) -> tuple[list, dict[str, int]]:
    """(disagreements, how many pairs each shortcut decided) against math_verify.verify."""
    decided = {"bare": 0, "parsed": 0}
    disagree = []
    for cand, ref in pairs:
        gold, got = _gold(ref), parse(cand)
        if not gold:
            continue
        want = verify(gold, got, float_rounding=6) if got else False
        bare = bare_number_verdict(cand, gold)
        fast = parsed_verdict(gold, got) if got else None
        for name, v in (("bare", bare), ("parsed", fast)):
            if v is not None:
                decided[name] += 1
                if v != want:
                    disagree.append((name, cand, ref, v, want))
    return disagree, decided


def test_shortcuts_agree_with_math_verify_on_a_corpus():
    pairs = corpus(500)
    disagree, decided = compare(pairs)
    assert not disagree, disagree[:20]
    # the shortcuts must actually decide most of this corpus, or the test proves nothing
    assert decided["bare"] > 0.25 * len(pairs) and decided["parsed"] > 0.5 * len(pairs), decided


@pytest.mark.parametrize("cand,ref", TRICKY)
def test_math_equal_matches_math_verify_on_tricky_pairs(cand, ref):
    gold, got = _gold(ref), parse(cand)
    want = 1.0 if got and verify(gold, got, float_rounding=6) else 0.0
    assert MathEqual().check(cand, ref, {}).reward == want


def test_shortcuts_decline_what_they_cannot_prove():
    gold = _gold("1/3")
    # close: sympy's round decides, so math-verify does
    assert bare_number_verdict("0.3333333", gold) is None
    assert parsed_verdict(_gold("1"), parse("1.0000004")) is False  # a rounded Float is no Integer
    assert bare_number_verdict("+5", _gold("5")) is None  # math-verify finds no answer in "+5"
    assert bare_number_verdict("12,34", _gold("12.34")) is None
    assert bare_number_verdict("x^2", _gold("4")) is None
    assert bare_number_verdict("4", _gold("x^2")) is None
    assert parsed_verdict(_gold("1000000.5"), parse("1000000.4")) is None  # beyond exact floats
    assert bare_number_verdict("72", _gold("72")) is True
    assert bare_number_verdict("-72", _gold("72")) is False


def test_verdicts_are_memoized_and_the_pickled_verifier_starts_empty():
    import pickle

    m = MathEqual()
    first = m.check("The answer is $\\boxed{\\frac{3}{4}}$", "0.75", {})
    assert first == Verdict(1.0, reason="math-verify: equal") and len(m._seen) == 1
    assert m.check("The answer is $\\boxed{\\frac{3}{4}}$", "0.75", {}) == first
    assert m.check("3/4", "0.75", {}) == Verdict(1.0, reason="numbers: equal")
    assert pickle.loads(pickle.dumps(m))._seen == {}


def _workers() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children()}


def test_shared_workers_are_reused_across_grade_calls_and_stopped():
    import assay
    from assay.grading import _shared_pool, shutdown_workers

    shutdown_workers()
    before = _workers()
    cands, refs = [c for c, _ in TRICKY], [r for _, r in TRICKY]
    rows = assay.rows(["q"] * len(cands), [[c] for c in cands], references=refs,
                      task_ids=[f"t{i}" for i in range(len(cands))])
    first = assay.grade(rows, MathEqual(), workers=2)
    shared = _workers() - before
    assert len(shared) == 2
    second = assay.grade(rows, MathEqual(), workers=2)
    assert _workers() - before == shared  # the same warm processes graded the second call
    want = [MathEqual().check(c, r, {}).reward for c, r in TRICKY]
    assert [r["reward"] for r in first] == [r["reward"] for r in second] == want
    # while another call holds the shared workers, a call forks its own and stops them after
    pool = _shared_pool()
    with pool.lock:
        third = assay.grade(rows, MathEqual(), workers=2)
    assert [r["reward"] for r in third] == want
    assert _workers() - before == shared
    shutdown_workers()
    assert not (_workers() - before)


def test_a_verifier_the_shared_workers_cannot_load_is_graded_by_forked_ones(tmp_path, monkeypatch):
    """A verifier class importable only since the shared workers started (its module is on a
    path they never saw) is graded by workers forked for the call, with no row lost."""
    import assay
    from assay.grading import shutdown_workers

    shutdown_workers()
    rows = assay.rows(["q"] * 20, [str(i) for i in range(20)], references=["3"] * 20,
                      task_ids=[f"t{i}" for i in range(20)])
    assay.grade(rows, MathEqual(), workers=2)  # start the shared workers
    before = _workers()
    (tmp_path / "late_verifier.py").write_text(
        "from assay.judging import Verifier\n"
        "class Late(Verifier):\n"
        "    name, parallel = 'Late', True\n"
        "    def check(self, candidate, reference, row):\n"
        "        return float(candidate == reference)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from late_verifier import Late

    import assay.grading as grading
    forked_with_judge = []
    fork = grading._fork_slots
    monkeypatch.setattr(grading, "_fork_slots", lambda ctx, judge, n: (
        forked_with_judge.append(n) if judge is not None else None, fork(ctx, judge, n))[1])
    graded = assay.grade(rows, Late(), workers=2)
    assert forked_with_judge  # the fallback really ran
    assert [r["reward"] for r in graded] == [float(i == 3) for i in range(20)]
    assert {r["judge_status"] for r in graded} == {"ok"}
    assert _workers() == before  # the call's own workers are gone, the shared ones stay
    shutdown_workers()


class _Hang(Verifier):
    """Picklable (module level), so it runs on the shared workers; hangs where no alarm reaches."""

    name, parallel, hard_timeout, needs_reference = "Hang", True, 1.0, False

    def check(self, candidate, reference, row):
        if candidate == "hang":
            import signal

            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(3600)
        return 1.0


def test_a_stuck_shared_worker_is_replaced_and_its_chunk_regraded(monkeypatch):
    import assay
    import assay.grading as grading
    from assay.grading import _shared_pool, shutdown_workers

    shutdown_workers()
    forks = []
    fork = grading._fork_slots
    monkeypatch.setattr(grading, "_fork_slots", lambda ctx, judge, n: (
        forks.append(judge is None), fork(ctx, judge, n))[1])
    start = time.monotonic()
    rows = assay.grade(assay.rows(["p"], [["ok"] * 10 + ["hang"] + ["ok"] * 10]), _Hang(),
                       workers=2)
    assert time.monotonic() - start < 20
    assert rows[10]["judge_status"] == "timeout" and rows[10]["reward"] is None
    assert [r["reward"] for i, r in enumerate(rows) if i != 10] == [1.0] * 20
    # two shared workers started, the stuck one replaced by a shared one
    assert forks == [True, True]
    pool = _shared_pool()
    assert len(pool.slots) == 2 and all(s.proc.is_alive() for s in pool.slots)
    again = assay.grade(assay.rows(["p"], [["ok"] * 20]), _Hang(), workers=2)
    assert [r["reward"] for r in again] == [1.0] * 20
    shutdown_workers()
