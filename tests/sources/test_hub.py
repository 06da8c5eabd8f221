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
                               "test": datasets.Dataset.from_dict({k: v[:1]
                                                                   for k, v in ROWS.items()})})
    dd.save_to_disk(str(tmp_path / "gsm"))
    got = load_dataset_records(tmp_path / "gsm", split="test")
    assert got.records == [{"question": "1+1?", "answer": "#### 2"}] and got.local
    with pytest.raises(SpecError,
                       match=r"split 'validation' not found; the dataset has \['test', 'train'\]"):
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


def test_a_hub_id_without_network_says_how_to_fix_it(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(SpecError,
                       match=r"sources\[1\]: 'openai/gsm8k' is not a local path.*save_to_disk"):
        load_dataset_records("openai/gsm8k", name="main", split="test", where="sources[1]")


def test_split_is_required_when_there_are_several_and_refused_when_absent(tmp_path: Path) -> None:
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS),
                               "test": datasets.Dataset.from_dict({k: v[:1]
                                                                   for k, v in ROWS.items()})})
    dd.save_to_disk(str(tmp_path / "gsm"))
    with pytest.raises(SpecError, match=r"sources\[0\]: split: the dataset has splits \['test', "
                       r"'train'\]; choose one with split:"):
        load_dataset_records(tmp_path / "gsm", where="sources[0]")
    # a plain saved Dataset has no split to choose: a split: naming one is refused, not ignored
    datasets.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "one"))
    with pytest.raises(SpecError, match=r"split 'validation' not found: the data is one saved "
                       r"Dataset without named splits; remove split:"):
        load_dataset_records(tmp_path / "one", split="validation")
    got = load_dataset_records(tmp_path / "one")
    assert len(got.records) == 3 and got.split is None
    # a Dataset saved from a named split keeps the name: that split is accepted, another is not
    datasets.Dataset.from_dict(ROWS).to_json(str(tmp_path / "t.jsonl"))
    named = datasets.load_dataset("json", data_files={"test": str(tmp_path / "t.jsonl")})["test"]
    named.save_to_disk(str(tmp_path / "test_only"))
    assert load_dataset_records(tmp_path / "test_only", split="test").split == "test"
    with pytest.raises(SpecError, match=r"split 'train' not found; the saved Dataset holds split "
                       r"'test' only"):
        load_dataset_records(tmp_path / "test_only", split="train")


def test_a_folder_of_files_has_the_splits_its_file_names_give(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    datasets.Dataset.from_dict(ROWS).to_json(str(tmp_path / "d" / "train.jsonl"))
    datasets.Dataset.from_dict({k: v[:1] for k, v in ROWS.items()}).to_json(
        str(tmp_path / "d" / "test.jsonl"))
    assert len(load_dataset_records(tmp_path / "d", split="test").records) == 1
    with pytest.raises(SpecError, match=r"split: the dataset has splits \['test', 'train'\]"):
        load_dataset_records(tmp_path / "d")
    (tmp_path / "u").mkdir()
    datasets.Dataset.from_dict(ROWS).to_json(str(tmp_path / "u" / "part-0.jsonl"))
    with pytest.raises(SpecError, match=r"split 'test' not found; the dataset has \['train'\] "
                       r"\(its files are not named by split"):
        load_dataset_records(tmp_path / "u", split="test")


@pytest.mark.parametrize("local", [True, False])
def test_a_failure_inside_the_library_is_not_blamed_on_the_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local: bool) -> None:
    from helpers import faulty_datasets

    from assay import libguard

    datasets.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "gsm"))
    monkeypatch.setattr(libguard, "datasets", faulty_datasets.faulty)
    path = tmp_path / "gsm" if local else "org/not-cached-here"
    # the library's own exception, with its traceback: exit 1 naming the node, not "cannot read"
    with pytest.raises(AttributeError, match="_lock"):
        load_dataset_records(path, where="sources[0]")
