"""Checks the hand-written diagnostic_v3 files of authoring half B against the file contract.

Covers refusal_quality, factuality, instruction_following, code_correctness, math_correctness,
receipts, contested and the matched-prompt block (format, ids, counts, length balance).
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections import defaultdict
from pathlib import Path

import pytest

DATA_DIR = (Path(__file__).resolve().parents[2] / "src" / "assay" / "data" / "builtin"
            / "diagnostic_v3")

PAIR_DIMENSIONS = (
    "refusal_quality",
    "factuality",
    "instruction_following",
    "code_correctness",
    "math_correctness",
    "receipts",
    "contested",
)
ALL_DIMENSIONS = {
    "helpfulness",
    "safety",
    "verbosity",
    "sycophancy",
    "formatting",
    "confidence",
    "correctness",
    "refusal_quality",
    "factuality",
    "instruction_following",
    "code_correctness",
    "math_correctness",
    "receipts",
    "contested",
}
PAIR_KEYS = {"kind", "dimension", "seed_id", "prompt", "chosen", "rejected", "contrast"}
TEXT_KEYS = ("prompt", "chosen", "rejected", "contrast")
MIN_PAIRS = 24
BALANCE_LOW, BALANCE_HIGH = 0.35, 0.65


def _read(name: str) -> list[dict]:
    path = DATA_DIR / f"{name}.jsonl"
    assert path.is_file(), f"missing diagnostic file {path}"
    records = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        assert line.strip(), f"{path.name}:{lineno} is blank"
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:  # pragma: no cover - message only
            pytest.fail(f"{path.name}:{lineno} is not valid JSON: {exc}")
    return records


def _chosen_longer_fraction(records: list[dict]) -> float:
    return sum(len(r["chosen"]) > len(r["rejected"]) for r in records) / len(records)


def _check_texts(rec: dict, where: str) -> None:
    for key in TEXT_KEYS:
        value = rec[key]
        assert isinstance(value, str) and value.strip(), f"{where}: {key} is empty or not text"
        # Checksums hash NFC text; shipping NFC avoids a silent mismatch after normalization.
        assert unicodedata.normalize("NFC", value) == value, f"{where}: {key} is not NFC"
    assert rec["chosen"] != rec["rejected"], f"{where}: chosen equals rejected"
    assert rec["chosen"].strip() != rec["rejected"].strip(), f"{where}: chosen equals rejected"


@pytest.fixture(scope="module")
def pair_files() -> dict[str, list[dict]]:
    return {dim: _read(dim) for dim in PAIR_DIMENSIONS}


@pytest.fixture(scope="module")
def matched() -> list[dict]:
    return _read("matched")


@pytest.mark.parametrize("dim", PAIR_DIMENSIONS)
def test_pair_file_format(pair_files, dim):
    seen_prompts = set()
    for i, rec in enumerate(pair_files[dim]):
        where = f"{dim}.jsonl line {i + 1}"
        assert set(rec) == PAIR_KEYS, f"{where}: keys {sorted(rec)} != {sorted(PAIR_KEYS)}"
        assert rec["kind"] == "pair", where
        assert rec["dimension"] == dim, f"{where}: dimension {rec['dimension']!r}"
        assert re.fullmatch(rf"{dim}-\d{{3}}", rec["seed_id"]), (
            f"{where}: seed_id {rec['seed_id']!r}"
        )
        _check_texts(rec, where)
        # Each pair is an independent seed, so no prompt may repeat within a dimension.
        assert rec["prompt"] not in seen_prompts, f"{where}: repeated prompt"
        seen_prompts.add(rec["prompt"])


@pytest.mark.parametrize("dim", PAIR_DIMENSIONS)
def test_pair_count_and_length_balance(pair_files, dim):
    records = pair_files[dim]
    assert len(records) >= MIN_PAIRS, f"{dim}: {len(records)} pairs < {MIN_PAIRS}"
    frac = _chosen_longer_fraction(records)
    assert BALANCE_LOW <= frac <= BALANCE_HIGH, f"{dim}: chosen longer in {frac:.2f} of pairs"


def test_seed_ids_unique_across_files(pair_files, matched):
    ids = [r["seed_id"] for recs in pair_files.values() for r in recs]
    ids += [r["seed_id"] for r in matched]
    dupes = sorted({s for s in ids if ids.count(s) > 1})
    assert not dupes, f"duplicate seed_ids: {dupes}"


def test_code_pairs_hold_parseable_python(pair_files):
    for rec in pair_files["code_correctness"]:
        for side in ("chosen", "rejected"):
            blocks = re.findall(r"```python\n(.*?)```", rec[side], re.S)
            assert blocks, f"{rec['seed_id']} {side}: no ```python block"
            for block in blocks:
                ast.parse(block)  # a real bug, not a syntax error, must separate the sides


def test_matched_block_format(matched):
    for i, rec in enumerate(matched):
        where = f"matched.jsonl line {i + 1}"
        assert set(rec) == PAIR_KEYS | {"match_id"}, f"{where}: keys {sorted(rec)}"
        assert rec["kind"] == "pair", where
        assert rec["dimension"] in ALL_DIMENSIONS, (
            f"{where}: unknown dimension {rec['dimension']!r}"
        )
        assert re.fullmatch(r"m-\d{2}", rec["match_id"]), f"{where}: match_id {rec['match_id']!r}"
        assert rec["seed_id"] == f"matched-{rec['match_id']}-{rec['dimension']}", where
        _check_texts(rec, where)


def test_matched_groups_share_prompt_across_dimensions(matched):
    groups: dict[str, list[dict]] = defaultdict(list)
    for rec in matched:
        groups[rec["match_id"]].append(rec)
    assert len(groups) >= 10, f"only {len(groups)} matched prompts"
    prompts = set()
    for mid, recs in groups.items():
        dims = [r["dimension"] for r in recs]
        assert len(set(dims)) == len(dims), f"{mid}: a dimension repeats"
        assert len(dims) >= 3, f"{mid}: only {len(dims)} dimensions"
        assert len({r["prompt"] for r in recs}) == 1, f"{mid}: prompts differ within the group"
        prompts.add(recs[0]["prompt"])
    assert len(prompts) == len(groups), "two match_ids share a prompt"


def test_matched_length_balance(matched):
    # Verbosity is defined by length (chosen is the concise one); every other axis must balance.
    verbosity = [r for r in matched if r["dimension"] == "verbosity"]
    assert all(len(r["chosen"]) < len(r["rejected"]) for r in verbosity)
    others = [r for r in matched if r["dimension"] != "verbosity"]
    frac = _chosen_longer_fraction(others)
    assert BALANCE_LOW <= frac <= BALANCE_HIGH, f"matched: chosen longer in {frac:.2f}"
