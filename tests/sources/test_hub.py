"""The datasets-library loader on data saved locally: save_to_disk folders (one split or a
DatasetDict), folders of Parquet/JSONL, and a hub id with no network (a clear error)."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from assay.errors import SpecError
from assay.sources.hub import load_dataset_records

ROWS = {"question": ["1+1?", "2+2?", "3+3?"], "answer": ["#### 2", "#### 4", "#### 6"]}


def test_save_to_disk_dict_picks_the_split_and_names_unknown_ones(tmp_path: Path) -> None:
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS),
                               "test": datasets.Dataset.from_dict({k: v[:1] for k, v in ROWS.items()})})
    dd.save_to_disk(str(tmp_path / "gsm"))
    got = load_dataset_records(tmp_path / "gsm", split="test")
    assert got.records == [{"question": "1+1?", "answer": "#### 2"}] and got.local
    with pytest.raises(SpecError, match=r"split 'validation' not found; the dataset has \['test', 'train'\]"):
        load_dataset_records(tmp_path / "gsm", split="validation", where="sources[0]")


def test_parquet_and_jsonl_folders_read_the_same_records(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_dict(ROWS)
    (tmp_path / "pq").mkdir()
    ds.to_parquet(str(tmp_path / "pq" / "part-0.parquet"))
    (tmp_path / "js").mkdir()
    ds.to_json(str(tmp_path / "js" / "part-0.jsonl"))
    a = load_dataset_records(tmp_path / "pq")
    b = load_dataset_records(tmp_path / "js")
    assert a.records == b.records == [dict(zip(ROWS, v)) for v in zip(*ROWS.values())]
    assert a.checksum == b.checksum  # the checksum is of the records, not of the file format


def test_a_hub_id_without_network_says_how_to_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(SpecError, match=r"sources\[1\]: 'openai/gsm8k' is not a local path.*save_to_disk"):
        load_dataset_records("openai/gsm8k", name="main", split="test", where="sources[1]")
