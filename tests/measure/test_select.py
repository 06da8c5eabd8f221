"""select(mode="rl"): every gate counted, band before dedup, no false leaks, no junk heuristics."""

import json

import pytest

import assay
from assay.errors import MeasureError
from assay.measure import select


def _group(task, outcomes, texts=None, **extra):
    texts = texts or [f"reply {task} {j}" for j in range(len(outcomes))]
    return [{"task_id": task, "prompt": f"prompt {task}", "final_text": t, "reward": float(o),
             **extra}
            for o, t in zip(outcomes, texts)]


def _gate(sel, name):
    return next(g for g in sel.gates if g.name == name)


def test_seed_example_keeps_groups_in_the_band():
    questions = ["What is 2 + 3?", "What is 7 * 6?", "What is 10 - 4?", "What is 9 / 3?"]
    answers = [["5", "4", "5", "5"], ["41", "41", "42", "40"], ["6"] * 4, ["3", "2", "3", "3"]]
    scores = [[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 1, 1], [1, 0, 1, 1]]
    rows = assay.rows(questions, answers, scores)
    sel = select(rows, mode="rl", band=(0.2, 0.8))
    assert sel.n_tasks_kept == 3  # the all-pass group goes
    assert _gate(sel, "unanimous (all pass)").groups_dropped == 1
    # repeated replies within a group ("5" x3, "41" x2, "3" x3) keep their first copy
    assert _gate(sel, "duplicate within group").rows_dropped == 5 and len(sel) == 7
    assert sorted(r["final_text"] for r in sel) == ["2", "3", "4", "40", "41", "42", "5"]
    assert all(r["task_id"] != rows[8]["task_id"] for r in sel)


def test_band_uses_all_graded_rows_before_dedup():
    # 1 pass + 4 identical fails: rate 0.2 from all rows (outside [0.25, 0.8]);
    # after dedup it would read 0.5 and wrongly pass the band.
    rows = _group("a", [1, 0, 0, 0, 0], ["right", "wrong", "wrong", "wrong", "wrong"])
    rows += _group("b", [1, 0, 0, 1])
    sel = select(rows, band=(0.25, 0.8))
    assert _gate(sel, "outside band").groups_dropped == 1
    assert {r["task_id"] for r in sel} == {"b"}


def test_every_gate_is_counted_and_printed():
    rows = _group("mixed", [1, 0, 1, 0])
    rows += _group("easy", [1, 1, 1, 1]) + _group("hard", [0, 0, 0, 0])
    rows += [{"task_id": "mixed", "prompt": "prompt mixed", "final_text": "x", "reward": 0.5},
             {"task_id": "mixed", "prompt": "prompt mixed", "final_text": "y", "reward": None}]
    rows += _group("e", [1, 0, 0], ["ok", "   ", "fine"])
    rows += _group("c", [1, 0, 1], ["a", "b", "c"], judge_meta=None)
    rows[-1]["judge_meta"] = {"finish_reason": "length"}
    sel = select(rows)
    names = [g.name for g in sel.gates]
    assert names == ["non-binary reward", "unanimous (all pass)", "unanimous (all fail)",
                     "outside band", "empty reply", "cut-off reply", "privileged leak",
                     "duplicate within group", "no longer mixed"]
    assert _gate(sel, "non-binary reward").rows_dropped == 2
    assert _gate(sel, "empty reply").rows_dropped == 1
    assert _gate(sel, "cut-off reply").rows_dropped == 1
    report = sel.report()
    for n in names:
        assert f"gate {n}:" in report
    assert sum(g.rows_dropped for g in sel.gates) + len(sel) == len(rows)


def test_reference_is_never_a_leak_but_hidden_tests_are():
    secret = "assert solve(3) == 9 and solve(4) == 16"
    rows = _group("r", [1, 0, 1, 0], ["42", "41", "The answer is 42", "40"])
    for r in rows:
        r["privileged"] = {"reference": "42"}
    rows += _group("h", [1, 0, 1, 0],
                   [f"def solve(x): return x*x  # {secret}", "no", "def solve(x): return x*x", "n"])
    for r in rows[4:]:
        r["privileged"] = {"reference": "x*x", "hidden_tests": secret}
    sel = select(rows)
    assert _gate(sel, "privileged leak").rows_dropped == 1
    kept_texts = [r["final_text"] for r in sel]
    assert "42" in kept_texts and "The answer is 42" in kept_texts


def test_long_correct_code_is_not_junk():
    code = ("def f(x):\n" + "\n".join(f"    y{i} = x + {i}" for i in range(200))
            + "\n    return y199")
    rows = _group("code", [1, 0, 1, 0], [code, "def f(x): pass", code + "\n", "return"])
    sel = select(rows)
    assert _gate(sel, "cut-off reply").rows_dropped == 0
    assert _gate(sel, "empty reply").rows_dropped == 0
    assert code in [r["final_text"] for r in sel]


def test_no_mixed_groups_left_is_a_warning():
    rows = _group("easy", [1, 1]) + _group("hard", [0, 0])
    sel = select(rows)
    assert len(sel) == 0 and any("no mixed groups left" in w for w in sel.warnings)
    assert "no mixed groups left" in sel.report()
    # a group the row gates leave unanimous is dropped and counted
    rows = _group("g", [1, 0], ["ok", ""])
    sel = select(rows, band=(0.0, 1.0))
    assert _gate(sel, "no longer mixed").groups_dropped == 1


def test_errors_and_to_dict():
    rows = _group("g", [1, 0])
    with pytest.raises(MeasureError, match="mode"):
        select(rows, mode="sft")
    with pytest.raises(MeasureError, match="band"):
        select(rows, band=(0.9, 0.1))
    d = select(rows).to_dict()
    assert d["n_rows_in"] == 2 and len(d["gates"]) == 9
    json.dumps(d)
