"""decontaminate(): the train-side filter keeps the seed surface, (kept_rows, report)."""

from __future__ import annotations

import json

import pytest

import assay
from assay.decontam import decontaminate
from assay.errors import RowsError, RowsTypeError

QUESTION = ("A train leaves the station at nine in the morning travelling at sixty miles per hour; "
            "how far has it gone by noon if it never stops?")


def test_seed_surface_drops_exact_and_normalized_copies():
    train = [{"prompt": "Where is order 4473?"}, {"prompt": "Cancel order 9911."},
             {"prompt": QUESTION.upper().replace(";", " ")},
             {"prompt": "Unrelated training text " * 5}]
    kept, report = decontaminate(train,
                                 against=[{"prompt": "Cancel order 9911."}, {"prompt": QUESTION}])
    assert [r["prompt"] for r in kept] == [train[0]["prompt"], train[3]["prompt"]]
    assert report.n_dropped == 2 and report["n_dropped"] == 2
    assert [(d["index"], d["rule"]) for d in report.dropped] == [(1, "exact"), (2, "exact")]
    assert report.eval_items == 2 and report.contaminated_eval_items == 2
    assert "dropped 2 of 4 training rows" in str(report)
    json.dumps(report.to_dict())


def test_long_training_row_quoting_an_eval_item_is_dropped():
    # coverage is measured against the eval item: the row is 20x longer than the question
    filler = " ".join(f"word{i}" for i in range(600))
    train = [{"prompt": filler + " " + QUESTION + " " + filler}, {"prompt": filler}]
    kept, report = decontaminate(train, against=[{"prompt": QUESTION}])
    assert (len(kept) == 1 and report.dropped[0]["rule"] == "ngram"
            and report.dropped[0]["score"] == 1.0)


def test_flag_mode_marks_every_row_and_rows_type_round_trips():
    rows = assay.rows([QUESTION, "Something else entirely, nothing to see here at all."],
                      ["a", "b"], [1, 0])
    kept, report = decontaminate(rows, against=[QUESTION])
    assert isinstance(kept, assay.Rows) and len(kept) == 1 and kept[0]["final_text"] == "b"
    flagged, rep2 = decontaminate(rows, against=[QUESTION], mode="flag")
    assert isinstance(flagged, assay.Rows) and len(flagged) == 2
    assert [r["markers"]["contaminated"] for r in flagged] == [1.0, 0.0]
    plain, _ = decontaminate([{"prompt": QUESTION, "markers": {"len": 3.0}}], against=[QUESTION],
                             mode="flag")
    assert plain[0]["markers"] == {"len": 3.0, "contaminated": 1.0}
    assert rep2.mode == "flag" and "flagged 1 of 2" in str(rep2)


def test_fields_and_against_from_jsonl(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps({"task_id": "q1", "prompt": QUESTION}) + "\n")
    train = [{"prompt": "hi", "final_text": QUESTION}, {"prompt": "hello", "final_text": "no"}]
    kept, _ = decontaminate(train, against=path)
    assert len(kept) == 2  # prompts only by default
    kept, report = decontaminate(train, against=path, fields=("prompt", "final_text"))
    assert [r["prompt"] for r in kept] == ["hello"] and report.dropped[0]["eval_task_id"] == "q1"


def test_bad_input_is_named():
    with pytest.raises(RowsError, match="mode"):
        decontaminate([{"prompt": "a"}], against=["a"], mode="remove")
    with pytest.raises(RowsError, match=r"rows\[1\].*'prompt'"):
        decontaminate([{"prompt": "a"}, {"text": "b"}], against=["a"])
    with pytest.raises(RowsTypeError):
        decontaminate("not rows", against=["a"])
    with pytest.raises(RowsError, match="min_overlap"):
        decontaminate([{"prompt": "a"}], against=["a"], min_overlap=2)
