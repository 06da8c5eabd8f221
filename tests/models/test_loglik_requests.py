"""Log-likelihood requests are cached per request, not per shard (issue 49): a changed gold
answer, an inserted or reordered question or document asks the scorer only for requests it never
answered, across shard boundaries, and the rows equal a cold run's."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from assay import stages
from assay.models.scorers import Loglik
from assay.spec import parse_spec
from assay.store import Store


class CountingScorer:
    """A deterministic scorer that records every request it is asked (pairs and documents)."""

    device = "cpu"

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []
        self.docs: list[str] = []

    def identity(self) -> dict[str, str]:
        return {"scorer": "counting", "path": "counting"}

    def score(self, pairs: list[tuple[str, str]]) -> list[Loglik]:
        self.pairs += pairs
        return [Loglik(-0.5 * len(c) - 0.01 * (len(x) % 7), len(c) < 4, len(c))
                for x, c in pairs]

    def score_rolling_batches(self, texts: list[str]):
        self.docs += texts
        yield list(range(len(texts))), [Loglik(-0.25 * len(t), False, len(t)) for t in texts]


@pytest.fixture
def scorer(monkeypatch) -> CountingScorer:
    s = CountingScorer()
    # every stage gets its scorer through shared_scorer: the counting one stands in for the model
    monkeypatch.setattr("assay.models.loglik.shared_scorer", lambda model: s)
    return s


QUESTIONS = [{"qid": f"q{i}", "question": f"Which is {i}?",
              "choices": [f"{i}", f"{i + 1}x", f"not {i}yy"], "answer": i % 3}
             for i in range(10)]
CHOICES_SPEC = """
name: mc
sources:
  - name: s
    kind: file
    path: d.jsonl
    fields: {prompt: question, task_id: qid}
    choices: {model: {kind: hf, path: m}, answer: answer}
measure: {choice_accuracy: {}}
execution: {shard_rows: 4}
"""
DOCS = [{"text": f"document {i} " + "word " * (i % 5)} for i in range(10)]
PPL_SPEC = """
name: ppl
sources:
  - name: s
    kind: file
    path: d.jsonl
    perplexity: {model: {kind: hf, path: m}, field: text}
measure: {perplexity: {}}
execution: {shard_rows: 4}
"""


def run(folder: Path, spec: str, records: list[dict], store: Store) -> stages.StudyRun:
    folder.mkdir(exist_ok=True)
    (folder / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    s = parse_spec(spec, source=str(folder / "s.yaml"), base_dir=str(folder))
    return stages.run_study(s, store, progress=None)


def rows_of(store: Store, r: stages.StudyRun) -> list[dict]:
    return list(stages.concat_rows(store, r.graded["s"]))


def cold(tmp_path: Path, spec: str, records: list[dict]) -> list[dict]:
    store = Store(tmp_path / "cold")
    return rows_of(store, run(tmp_path / "cold_in", spec, records, store))


def test_choices_a_changed_gold_asks_nothing(tmp_path, scorer):
    store = Store(tmp_path / "store")
    first = run(tmp_path / "a", CHOICES_SPEC, QUESTIONS, store)
    assert len(first.graded["s"]) == 3 and len(scorer.pairs) == 30
    changed = [{**q, "answer": (q["answer"] + 1) % 3} if q["qid"] == "q5" else q
               for q in QUESTIONS]
    again = run(tmp_path / "b", CHOICES_SPEC, changed, store)
    assert len(scorer.pairs) == 30
    assert [r["reward"] for r in rows_of(store, again)] != [r["reward"]
                                                          for r in rows_of(store, first)]
    assert rows_of(store, again) == cold(tmp_path, CHOICES_SPEC, changed)


def test_choices_an_inserted_question_asks_only_its_choices(tmp_path, scorer):
    store = Store(tmp_path / "store")
    run(tmp_path / "a", CHOICES_SPEC, QUESTIONS, store)
    new = {"qid": "new", "question": "Which is new?", "choices": ["old", "new"], "answer": 1}
    again = run(tmp_path / "b", CHOICES_SPEC, [new] + QUESTIONS, store)
    # every shard moved by one row; the scorer was asked the new question's two choices alone
    assert scorer.pairs[30:] == [("Which is new?", " old"), ("Which is new?", " new")]
    assert rows_of(store, again) == cold(tmp_path, CHOICES_SPEC, [new] + QUESTIONS)


def test_choices_a_shuffled_file_asks_nothing(tmp_path, scorer):
    store = Store(tmp_path / "store")
    run(tmp_path / "a", CHOICES_SPEC, QUESTIONS, store)
    shuffled = QUESTIONS[:]
    random.Random(1).shuffle(shuffled)
    again = run(tmp_path / "b", CHOICES_SPEC, shuffled, store)
    assert len(scorer.pairs) == 30
    assert rows_of(store, again) == cold(tmp_path, CHOICES_SPEC, shuffled)


def test_documents_inserted_and_reordered_ask_only_new_documents(tmp_path, scorer):
    store = Store(tmp_path / "store")
    run(tmp_path / "a", PPL_SPEC, DOCS, store)
    assert len(scorer.docs) == 10
    new = {"text": "a document never scored"}
    records = DOCS[5:] + [new] + DOCS[:5]
    again = run(tmp_path / "b", PPL_SPEC, records, store)
    assert scorer.docs[10:] == ["a document never scored"]
    assert rows_of(store, again) == cold(tmp_path, PPL_SPEC, records)
