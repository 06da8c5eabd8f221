"""The judge verifier against a real OpenAI-protocol server on 127.0.0.1, its strict parser, and
judge_trust checked against sklearn's kappa and a brute-force agreement over tasks."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.openai_server import Fault, OpenAIServer

import assay
from assay.errors import RowsError, RowsTypeError
from assay.verify import JudgeVerifier, judge_trust, parse_grade
from assay.verify.registry import VERIFIERS

QS = ["What is 2 + 3?", "What is 7 + 6?", "What is 10 + 20?"]
REFS = ["5", "13", "30"]
ANSWERS = [["5", "6"], ["13", "UNPARSEABLE"], ["31", "30"]]


@pytest.fixture
def server():
    srv = OpenAIServer(["judge-model"]).start()
    yield srv
    srv.stop()


def judge(server, tmp_path, **kw):
    return VERIFIERS.get("judge").obj(
        model={"kind": "openai", "base_url": server.base_url, "model": "judge-model",
               "max_retries": 1},
        store=str(tmp_path / "store"), **kw)


def test_judge_grades_through_the_server_deterministically_and_caches(server, tmp_path):
    j = judge(server, tmp_path)
    rows = assay.rows(QS, ANSWERS, references=REFS)
    g = assay.grade(rows, j)
    assert [r["reward"] for r in g] == [1.0, 0.0, 1.0, None, 0.0, 1.0]
    assert [r["judge_status"] for r in g] == ["ok", "ok", "ok", "no_verdict", "ok", "ok"]
    unparsed = g[3]
    assert "I am not sure how to grade this." in unparsed["reason"]
    assert unparsed["judge_meta"]["judge_text"] == "I am not sure how to grade this."
    assert g[0]["judge_name"] == "judge:judge-model" and g[0]["reason"] == "GRADE: C"
    assert len(server.requests) == 6
    assert {(b["temperature"], b["top_p"]) for b in server.requests} == {(0.0, 1.0)}
    assert len({b["seed"] for b in server.requests}) == 6  # fixed, derived per judge prompt
    again = assay.grade(rows, judge(server, tmp_path))
    assert len(server.requests) == 6 and again == g  # judge calls cached like generations
    other = judge(server, tmp_path, template="Question: {question}\n[Submission]: {answer}\nx\n"
                  "[Criterion]: {reference}\nGrade it.")
    assay.grade(rows, other)
    assert len(server.requests) == 12  # a new template is a new set of calls


def test_failed_judge_calls_are_errors_not_grades_and_are_retried(server, tmp_path):
    rows = assay.rows(QS[:1], [["5"]], references=REFS[:1])
    server.faults = lambda n, body: Fault(503)
    g = assay.grade(rows, judge(server, tmp_path))
    assert g[0]["reward"] is None and g[0]["judge_status"] == "error"
    assert "judge call failed: HTTP 503" in g[0]["reason"]
    server.faults = []
    assert assay.grade(rows, judge(server, tmp_path))[0]["reward"] == 1.0


def test_parser_is_strict_and_reads_the_last_grade():
    assert parse_grade("GRADE: I\nWait, recheck. GRADE: C")[0] == 1.0
    assert parse_grade("GRADE: C then GRADE: I")[0] == 0.0
    assert parse_grade("GRADE: **C**")[0] == 1.0
    for text in ["grade: c", "GRADE: Correct", "The answer is C.", "GRADE: A", ""]:
        assert parse_grade(text)[0] is None, text
    assert parse_grade('reasoning {"score": 0.7} final {"score": 1}')[0] == 1.0
    assert parse_grade('{"score": 1.5}') == (None, "JSON score 1.5 is not a number in [0, 1]")
    assert parse_grade('{"score": true}')[0] is None


def test_a_judge_that_never_parses_leaves_every_row_unjudged(tmp_path):
    j = JudgeVerifier(model={"kind": "function", "callable": "assay.models.function:echo"},
                      template="Is {answer} right for {question}?", store=str(tmp_path))
    g = assay.grade(assay.rows(QS, [["5"], ["1"], ["30"]]), j)
    assert [r["reward"] for r in g] == [None] * 3 \
        and {r["judge_status"] for r in g} == {"no_verdict"}


def test_judge_spec_errors_name_the_field():
    with pytest.raises(ValueError, match="unknown: \\['ans'\\]"):
        JudgeVerifier(model={"kind": "function", "callable": "m:f"}, template="{question} {ans}")
    with pytest.raises(ValueError, match="neither a built-in rubric"):
        JudgeVerifier(model={"kind": "function", "callable": "m:f"}, template="correct_incorect")
    assert VERIFIERS.get("judge").spec.model_fields["template"].default == "correct_incorrect"


def brute_agreement(judged, gold, tasks):
    per = {}
    for j, g, t in zip(judged, gold, tasks):
        per.setdefault(t, []).append(j == g)
    return np.mean([a for v in per.values() for a in v]), len(per)


def test_judge_trust_against_sklearn_kappa_and_brute_force():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(0)
    for trial in range(20):
        n_tasks, k = int(rng.integers(5, 30)), int(rng.integers(1, 4))
        gold = rng.integers(0, 2, size=n_tasks * k)
        flip = rng.random(n_tasks * k) < rng.uniform(0.05, 0.5)
        judged = np.where(flip, 1 - gold, gold).astype(float)
        judged[rng.random(n_tasks * k) < 0.1] = np.nan  # unjudged rows
        rewards = [[None if np.isnan(x) else float(x) for x in judged[i * k:(i + 1) * k]]
                   for i in range(n_tasks)]
        rows = assay.rows([f"q{i}" for i in range(n_tasks)], [["a"] * k] * n_tasks, rewards)
        t = judge_trust(rows, gold=gold.tolist())
        keep = ~np.isnan(judged)
        tasks = np.repeat(np.arange(n_tasks), k)[keep]
        agree, n_t = brute_agreement(judged[keep].astype(int), gold[keep], tasks)
        assert t.agreement == round(agree, 3) and t.n == keep.sum() and t.n_tasks == n_t
        assert t.n_unjudged == (~keep).sum()
        if len(set(gold[keep])) > 1 or len(set(judged[keep])) > 1:
            assert t.kappa == pytest.approx(
                cohen_kappa_score(judged[keep].astype(int), gold[keep]), abs=1e-12), trial
        assert t.interval.low <= agree <= t.interval.high
        assert sum(t.confusion.values()) == t.n


def test_judge_trust_on_a_labelled_sample_and_bad_labels():
    rows = assay.rows(["a", "b", "c"], [["x", "y"]] * 3, [[1, 0], [1, 1], [0, 0]])
    ids = [(r["task_id"], r["rollout_index"]) for r in rows]
    t = judge_trust(rows, gold={ids[0]: 1, ids[1]: 1, ids[4]: True})
    assert (t.n, t.agreement, t.n_tasks) == (3, 0.333, 2)
    with pytest.raises(RowsTypeError, match=r"gold\[2\]: a gold label is 0/1"):
        judge_trust(rows, gold=[1, 0, 2, 1, 0, 0])
    with pytest.raises(RowsTypeError, match="a gold label is 0/1"):
        judge_trust(rows, gold=[1, 0, float("nan"), 1, 0, 0])
    with pytest.raises(RowsError, match="one label per row"):
        judge_trust(rows, gold=[1, 0])
