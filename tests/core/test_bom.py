"""A UTF-8 byte-order mark (Windows editors, Excel exports) is read past in every data file
and spec assay reads, not refused with "decode using utf-8-sig" (issue 47)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.cli import main
from assay.jsonl import iter_jsonl

BOM = "\ufeff"
RECS = [{"q": "1 + 1 = ?", "gold": "2", "r": 1.0}, {"q": "2 + 2 = ?", "gold": "4", "r": 0.0}]


def _jsonl(path: Path, bom: bool) -> Path:
    path.write_text((BOM if bom else "") + "".join(json.dumps(r) + "\n" for r in RECS),
                    encoding="utf-8")
    return path


def test_iter_jsonl_reads_past_a_bom(tmp_path: Path) -> None:
    with_bom = list(iter_jsonl(_jsonl(tmp_path / "a.jsonl", bom=True)))
    assert with_bom == list(iter_jsonl(_jsonl(tmp_path / "b.jsonl", bom=False)))
    assert with_bom[0] == (1, RECS[0])


def test_a_bom_inside_the_file_is_still_bad_json(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps(RECS[0]) + "\n" + BOM + json.dumps(RECS[1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a.jsonl:2: not valid JSON"):
        list(iter_jsonl(p))


@pytest.mark.parametrize("bom_in", ["data", "spec", "both"])
def test_validate_accepts_bom_data_and_spec(tmp_path: Path, bom_in: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _jsonl(tmp_path / "d.jsonl", bom=bom_in in ("data", "both"))
    spec = tmp_path / "s.yaml"
    spec.write_text((BOM if bom_in in ("spec", "both") else "")
                    + "name: b\nsources:\n  - {name: a, kind: file, path: d.jsonl, "
                    "fields: {prompt: q, completion: gold, reward: r}}\n", encoding="utf-8")
    rc = main(["validate", str(spec)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "utf-8-sig" not in out.err


def test_rows_of_a_bom_file_equal_those_without(tmp_path: Path) -> None:
    from assay.sources.fieldpath import read_records

    assert (read_records(_jsonl(tmp_path / "a.jsonl", bom=True), "jsonl")
            == read_records(_jsonl(tmp_path / "b.jsonl", bom=False), "jsonl") == RECS)
