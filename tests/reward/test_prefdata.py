"""Your own preference data: JSONL, Parquet and a locally saved ``datasets`` dataset (the
RewardBench layout with ``axis: subset``) audited per axis in the study chain; bad records
are errors naming file, record and field, and nothing is audited from a half-read file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay import stages
from assay.errors import SpecError
from assay.reward.prefdata import PreferenceFields, pairs_from_records
from assay.spec import parse_spec
from assay.store import Store

# RewardBench's layout: prompt, chosen, rejected, subset (and an id).
SUBSETS = ("alpacaeval-easy", "hep-python", "refusals-dangerous")


def rewardbench_records(n_per_subset: int = 8) -> list[dict]:
    out = []
    for s in SUBSETS:
        for i in range(n_per_subset):
            out.append({"prompt": f"{s} question {i}?",
                        "chosen": f"a careful, complete answer to {s} question {i}",
                        "rejected": f"no {i}", "subset": s, "id": 1000 * SUBSETS.index(s) + i})
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


SPEC = """
name: own-prefs
reward:
  models:
    - {{name: lenrm, kind: function, function: "assay.reward.function:length_rewards"}}
  data: {data}
"""


def audit(tmp: Path, data: str) -> dict:
    spec = parse_spec(SPEC.format(data=data), base_dir=str(tmp))
    store = Store(tmp / "store")
    run = stages.run_study(spec, store, progress=None)
    (audit_res,) = [r for r in run.results if r.stage == "score-reward-model"]
    report = stages.report_files(store, run.report)
    return {"doc": stages.load_doc(store, audit_res, "audit"),
            "md": report["report.md"].decode(), "json": json.loads(report["report.json"])}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "hf_dataset"])
def test_rewardbench_layout_is_audited_per_subset(tmp_path: Path, fmt: str) -> None:
    recs = rewardbench_records()
    if fmt == "jsonl":
        write_jsonl(tmp_path / "prefs.jsonl", recs)
        data = "{kind: file, path: prefs.jsonl, fields: {axis: subset, seed_id: id}}"
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(recs), tmp_path / "prefs.parquet")
        data = "{kind: file, path: prefs.parquet, fields: {axis: subset, seed_id: id}}"
    else:
        import datasets

        datasets.Dataset.from_list(recs).save_to_disk(str(tmp_path / "rb"))
        data = ("{kind: hf_dataset, path: rb, revision: null, "
                "fields: {axis: subset, seed_id: id}}")
    got = audit(tmp_path, data)
    dims = {d["dimension"]: d for d in got["doc"]["dimensions"]}
    assert sorted(dims) == sorted(SUBSETS)
    for d in dims.values():
        # the length function prefers the (longer) chosen answer on every pair
        assert d["value"] == 1.0 and d["n"] == 8
    for s in SUBSETS:  # the audit table has one row per axis
        assert any(line.startswith(s) for line in got["doc"]["report"].splitlines())
    assert "preference data: 24 pairs from " in got["md"] and str(tmp_path) not in got["md"]
    assert "falls back to the prompt" not in got["md"]


def test_steps_select_an_axis_and_missing_seed_ids_fall_back_to_the_prompt(tmp_path: Path) -> None:
    recs = rewardbench_records()
    for r in recs:
        del r["id"]
    recs += [dict(recs[0], chosen="another careful answer")]  # a second pair on one prompt
    write_jsonl(tmp_path / "prefs.jsonl", recs)
    got = audit(tmp_path, "{kind: file, path: prefs.jsonl, fields: {axis: subset}, "
                          "steps: [{op: where, field: axis, value: alpacaeval-easy}]}")
    (dim,) = got["doc"]["dimensions"]
    assert dim["dimension"] == "alpacaeval-easy"
    assert dim["n"] == 8 and dim["n_rows"] == 9  # 9 pairs, 8 distinct prompts = 8 seeds
    assert "25 records have no seed id" in got["md"]
    assert "effective n is the number of distinct prompts (8 over all axes)" in got["md"]


@pytest.mark.parametrize("field, value, message", [
    ("chosen", None, "field 'chosen' (fields.chosen) is missing"),
    ("subset", 3, "field 'subset' (fields.axis) must be non-empty text"),
    ("rejected", "a careful, complete answer to alpacaeval-easy question 5",
     "field 'rejected': Pair(seed_id='5'): chosen and rejected have the same text"),
])
def test_a_bad_record_names_file_record_and_field(tmp_path: Path, field: str, value,
                                                  message: str) -> None:
    recs = rewardbench_records()
    recs[5][field] = value
    path = write_jsonl(tmp_path / "prefs.jsonl", recs)
    with pytest.raises(SpecError) as e:
        audit(tmp_path, "{kind: file, path: prefs.jsonl, fields: {axis: subset, seed_id: id}}")
    assert f"{path} record 6: {message}" in str(e.value)  # counted from 1


def test_nothing_is_audited_from_a_half_read_file(tmp_path: Path) -> None:
    lines = [json.dumps(r) for r in rewardbench_records()]
    lines[10] = lines[10][:25]  # a truncated line in the middle
    (tmp_path / "prefs.jsonl").write_text("\n".join(lines) + "\n")
    spec = parse_spec(SPEC.format(data="{kind: file, path: prefs.jsonl, fields: {axis: subset}}"),
                      base_dir=str(tmp_path))
    store = Store(tmp_path / "store")
    with pytest.raises(SpecError, match=r"prefs.jsonl:11: not valid JSON"):
        stages.run_study(spec, store, progress=None)
    refs = [json.loads(p.read_text()) for p in (tmp_path / "store" / "refs").rglob("*.json")]
    assert refs == []  # no stage finished and no score was stored


def test_pairs_from_records_lineage_and_fallback() -> None:
    pairs, fb = pairs_from_records(
        [{"q": "Q1", "c": "yes", "r": "no", "id": "a"}, {"q": "Q2", "c": "yes", "r": "no"}],
        PreferenceFields(prompt="q", chosen="c", rejected="r", seed_id="id"),
        where="x.jsonl", builder_id="file:x.jsonl")
    assert [p.seed_id for p in pairs][0] == "a" and pairs[1].seed_id.startswith("prompt:")
    assert fb == 1 and pairs[0].lineage.builder_id == "file:x.jsonl"


def test_todays_reward_specs_stay_valid() -> None:
    for data in ("{dataset: diagnostic_v3}", "{dataset: diagnostic_v3, dimensions: [verbosity], "
                 "steps: [{op: slice, start: 0, stop: 3}]}"):
        spec = parse_spec(SPEC.format(data=data))
        assert spec.reward.data.kind == "builtin"
        views = spec.reward.data.load(spec.paths).views
        assert list(views) == (["verbosity"] if "dimensions" in data else list(views))
    with pytest.raises(SpecError, match=r"reward.data.path: Field required"):
        parse_spec(SPEC.format(data="{kind: file}"))


def test_spec_checksum_follows_the_data_not_its_path(tmp_path: Path) -> None:
    data = "{kind: file, path: prefs.jsonl, fields: {axis: subset}}"
    write_jsonl(tmp_path / "prefs.jsonl", rewardbench_records())
    a = parse_spec(SPEC.format(data=data), base_dir=str(tmp_path)).checksum()
    (tmp_path / "moved").mkdir()
    write_jsonl(tmp_path / "moved" / "prefs.jsonl", rewardbench_records())
    assert parse_spec(SPEC.format(data=data), base_dir=str(tmp_path / "moved")).checksum() == a
    write_jsonl(tmp_path / "prefs.jsonl", rewardbench_records(7))
    assert parse_spec(SPEC.format(data=data), base_dir=str(tmp_path)).checksum() != a
