"""`assay validate` reads the data a spec names (issue 19): every bad record, a function that
cannot be imported and a step on a field rows do not have yet are reported at once, each with
its YAML line, the file, the record and the field, and exit 2 - before any run starts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from assay.cli import main
from assay.sources.records import FieldMap, check_records

GOOD = [{"id": f"t{i}", "prompt": f"p{i}", "completion": "x", "r": i % 2} for i in range(4)]


def _spec(tmp: Path, fields: str = "{task_id: id, reward: r}", extra: str = "") -> Path:
    spec = tmp / "s.yaml"
    spec.write_text("name: demo\nsources:\n"
                    f"  - name: m\n    kind: file\n    path: d.jsonl\n    fields: {fields}\n{extra}")
    return spec


def _write(path: Path, records: list, raw: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + raw)


def _validate(spec: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    rc = main(["validate", str(spec)])
    captured = capsys.readouterr()
    return rc, [ln.strip() for ln in (captured.err.splitlines()[1:] if rc else captured.out.splitlines())]


@pytest.mark.parametrize("records,raw,want", [
    (GOOD[:1] + [{"id": "t1", "prompt": "p1", "r": 1}], "",
     "record 1 (line 2): field 'completion' (fields.completion) is missing"),
    (GOOD[:1] + [{"id": "t1", "prompt": "p1", "completion": "x", "r": "high"}], "",
     "record 1 (line 2): field 'r' (fields.reward): reward must be a number, got str 'high'"),
    (GOOD[:2], '{"id": "t2", "prompt": "p2", "completion": "x", "r": NaN}\n',
     "record 2 (line 3): field 'r' (fields.reward): reward is NaN"),
    (GOOD[:1], '{"id": "t1", "prompt": \n',
     "line 2: not valid JSON"),
    ([], "", "no records: the file is empty"),
    (GOOD[:1] + [{"id": "t0", "prompt": "p0", "completion": "y", "r": 0, "x": 1},
                 {"id": "t0", "prompt": "other", "completion": "z", "r": 0}], "",
     "record 0 (line 1) and record 2 (line 3) have the same task id 't0' but a different prompt"),
])
def test_each_bad_input_names_file_record_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   records: list, raw: str, want: str) -> None:
    data = tmp_path / "d.jsonl"
    _write(data, records, raw)
    rc, lines = _validate(_spec(tmp_path), capsys)
    assert rc == 2
    assert len(lines) == 1 and lines[0].startswith(f"{tmp_path / 's.yaml'}:5: sources[0].path: {data} {want}"), lines


def test_wrong_task_id_field_is_caught_and_capped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "d.jsonl", GOOD * 10)
    rc, lines = _validate(_spec(tmp_path, "{task_id: task, reward: r}"), capsys)
    assert rc == 2
    assert "record 0 (line 1): field 'task' (fields.task_id) is missing; the record has ['completion', 'id', 'prompt', 'r']" in lines[0]
    assert len(lines) == 21 and lines[-1].endswith("... and 20 more problems")


def test_every_problem_at_once_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "d.jsonl", GOOD[:1] + [{"id": "t1", "prompt": "p1", "completion": 3, "r": 1}])
    (tmp_path / "scorer.py").write_text("raise ImportError('needs a GPU library')\n")
    spec = _spec(tmp_path, "{task_id: id}",
                 "    verifier: {kind: exact_match}\n"
                 "    steps:\n      - {op: where, field: reward, cmp: '==', value: 1}\n"
                 "      - {op: where, field: level, cmp: '==', value: 3}\n"
                 "reward:\n  models:\n    - {name: f, kind: function, function: 'scorer:score'}\n"
                 "  data: {dataset: diagnostic_v3}\n")
    rc, lines = _validate(spec, capsys)
    assert rc == 2
    s = str(spec)
    assert lines[0].startswith(f"{s}:5: sources[0].path: {tmp_path / 'd.jsonl'} record 1 (line 2): "
                               "field 'completion' (fields.completion) must be a string, got int 3")
    assert lines[1].startswith(f"{s}:9: sources[0].steps[0].field: 'reward' is set by grading, "
                               "and steps run on the rows before grading")
    assert lines[2].startswith(f"{s}:10: sources[0].steps[1].field: rows have no field 'level'")
    assert lines[3].startswith(f"{s}:13: reward.models[0].function: reward model 'f' 'scorer:score': "
                               "cannot import module 'scorer' (ImportError: needs a GPU library)")
    assert len(lines) == 4


def test_good_data_is_ok_and_given_scores_may_be_filtered(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "d.jsonl", GOOD)
    spec = _spec(tmp_path, extra="    steps: [{op: where, field: reward, cmp: '==', value: 1}]\n")
    rc, lines = _validate(spec, capsys)
    assert rc == 0 and lines[0].endswith("ok (sources: m)")


def test_check_records_streams_100k_records(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    _write(path, [{"id": f"t{i // 4}", "prompt": f"p{i // 4}", "completion": "x", "r": i % 2}
                  for i in range(100_000)])
    t0 = time.perf_counter()
    assert check_records(path, "jsonl", FieldMap(task_id="id", reward="r")) == []
    took = time.perf_counter() - t0
    assert took < 10, took  # about a second on one free core; generous for a shared machine
