"""Checks the hand-written diagnostic_v3 files of authoring half A against the file contract.

Covers helpfulness, safety, verbosity, sycophancy, formatting, confidence, correctness and the
sycophancy quadruples: format keys, unique ids, non-empty distinct texts, counts, length balance.
"""
from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

DATA_DIR = (Path(__file__).resolve().parents[2] / "src" / "assay" / "data" / "builtin"
            / "diagnostic_v3")
PAIR_DIMS = ("helpfulness", "safety", "verbosity", "sycophancy", "formatting", "confidence",
             "correctness")
LENGTH_DEFINED = {"verbosity"}  # the axis is defined by length, so it is exempt from balance
MIN_SEEDS = 24
PAIR_KEYS = {"kind", "dimension", "seed_id", "prompt", "chosen", "rejected", "contrast"}
QUAD_KEYS = {"kind", "dimension", "seed_id", "prompt", "prompts", "factors", "cells",
             "user_claim_correct", "contrast"}
CELL_KEYS = {"agree|right", "agree|wrong", "disagree|right", "disagree|wrong"}


def _norm(text: str) -> str:
    # NFC + whitespace collapse, so a "different" text that only differs in spacing still counts
    # as identical.
    return " ".join(unicodedata.normalize("NFC", text).split())


def _text_ok(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def read_jsonl(path: Path) -> list[dict]:
    """Parse one JSONL file; every non-blank line must be a JSON object."""
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        assert isinstance(obj, dict), f"{path.name}:{lineno} is not a JSON object"
        out.append(obj)
    return out


def pair_problems(records: list[dict], dim: str) -> list[str]:
    """Every contract violation in one dimension's pair records, as readable strings."""
    problems = []
    seen_ids: set[str] = set()
    seen_prompts: set[str] = set()
    for i, r in enumerate(records):
        where = f"{dim}[{i}]"
        if set(r) != PAIR_KEYS:
            problems.append(f"{where}: keys {sorted(r)} != {sorted(PAIR_KEYS)}")
            continue
        if r["kind"] != "pair" or r["dimension"] != dim:
            problems.append(f"{where}: kind/dimension {r['kind']!r}/{r['dimension']!r}")
        sid = r["seed_id"]
        if not isinstance(sid, str) or not re.fullmatch(rf"{re.escape(dim)}-\d{{3}}", sid):
            problems.append(f"{where}: seed_id {sid!r} is not '{dim}-NNN'")
        elif sid in seen_ids:
            problems.append(f"{where}: duplicate seed_id {sid!r}")
        seen_ids.add(sid)
        for key in ("prompt", "chosen", "rejected", "contrast"):
            if not _text_ok(r[key]):
                problems.append(f"{where}: {key} is empty or not a string")
        if _text_ok(r["chosen"]) and _text_ok(r["rejected"]) \
                and _norm(r["chosen"]) == _norm(r["rejected"]):
            problems.append(f"{where}: chosen equals rejected")
        if _text_ok(r["prompt"]):
            p = _norm(r["prompt"])
            if p in seen_prompts:
                problems.append(f"{where}: prompt repeated; each pair must be an independent seed")
            seen_prompts.add(p)
    if len(records) < MIN_SEEDS:
        problems.append(f"{dim}: {len(records)} pairs, need at least {MIN_SEEDS}")
    return problems


def chosen_longer_fraction(records: list[dict]) -> float:
    return sum(len(r["chosen"]) > len(r["rejected"]) for r in records) / len(records)


def quad_problems(records: list[dict]) -> list[str]:
    """Every contract violation in the sycophancy quadruple records."""
    problems = []
    seen: set[str] = set()
    for i, r in enumerate(records):
        where = f"quadruple[{i}]"
        if set(r) != QUAD_KEYS:
            problems.append(f"{where}: keys {sorted(r)} != {sorted(QUAD_KEYS)}")
            continue
        if r["kind"] != "quadruple" or r["dimension"] != "sycophancy":
            problems.append(f"{where}: kind/dimension {r['kind']!r}/{r['dimension']!r}")
        sid = r["seed_id"]
        if not isinstance(sid, str) or not re.fullmatch(r"syq-\d{3}", sid) or sid in seen:
            problems.append(f"{where}: seed_id {sid!r} missing, malformed or duplicated")
        seen.add(sid)
        if r["factors"] != ["stance", "user"]:
            problems.append(f"{where}: factors {r['factors']!r} != ['stance', 'user']")
        prompts = r["prompts"]
        if not isinstance(prompts, dict) or set(prompts) != {"right", "wrong"} \
                or not all(_text_ok(v) for v in prompts.values()):
            problems.append(f"{where}: prompts must map right/wrong to non-empty texts")
        else:
            if _norm(prompts["right"]) == _norm(prompts["wrong"]):
                problems.append(f"{where}: right and wrong prompts are identical")
            if r["prompt"] != prompts["right"]:
                problems.append(f"{where}: prompt must equal prompts['right']")
        cells = r["cells"]
        if not isinstance(cells, dict) or set(cells) != CELL_KEYS:
            problems.append(f"{where}: cells keys must be {sorted(CELL_KEYS)}")
        elif not all(_text_ok(v) for v in cells.values()):
            problems.append(f"{where}: a cell text is empty")
        elif len({_norm(v) for v in cells.values()}) != 4:
            problems.append(f"{where}: the four cells are not distinct")
        if not isinstance(r["user_claim_correct"], bool):
            problems.append(f"{where}: user_claim_correct must be a bool")
        if not _text_ok(r["contrast"]):
            problems.append(f"{where}: contrast is empty")
    if len(records) < MIN_SEEDS:
        problems.append(f"quadruples: {len(records)}, need at least {MIN_SEEDS}")
    return problems


@pytest.fixture(scope="module")
def pairs() -> dict[str, list[dict]]:
    return {d: read_jsonl(DATA_DIR / f"{d}.jsonl") for d in PAIR_DIMS}


@pytest.mark.parametrize("dim", PAIR_DIMS)
def test_pair_file_follows_contract(pairs, dim):
    assert pair_problems(pairs[dim], dim) == []


@pytest.mark.parametrize("dim", sorted(set(PAIR_DIMS) - LENGTH_DEFINED))
def test_length_balanced_within_dimension(pairs, dim):
    frac = chosen_longer_fraction(pairs[dim])
    assert 0.35 <= frac <= 0.65, f"{dim}: chosen is longer in {frac:.0%} of pairs"


def test_verbosity_is_defined_by_length_and_says_so(pairs):
    recs = pairs["verbosity"]
    assert chosen_longer_fraction(recs) <= 0.2
    assert all("length" in r["contrast"].lower() for r in recs)


def test_quadruples_follow_contract():
    recs = read_jsonl(DATA_DIR / "sycophancy_quadruples.jsonl")
    assert quad_problems(recs) == []


def test_seed_ids_unique_across_whole_directory():
    ids: dict[str, str] = {}
    for path in sorted(DATA_DIR.glob("*.jsonl")):
        for r in read_jsonl(path):
            sid = r.get("seed_id")
            assert sid not in ids, f"seed_id {sid!r} in both {ids.get(sid)} and {path.name}"
            ids[sid] = path.name


def test_checkers_flag_violations():
    good = {"kind": "pair", "dimension": "safety", "seed_id": "safety-001", "prompt": "Q",
            "chosen": "a", "rejected": "b", "contrast": "c"}
    many = [dict(good, seed_id=f"safety-{i:03d}", prompt=f"Q{i}") for i in range(1, 25)]
    assert pair_problems(many, "safety") == []
    assert any("chosen equals rejected" in p
               for p in pair_problems([dict(good, rejected=" a ")] + many[1:], "safety"))
    assert any("duplicate seed_id" in p
               for p in pair_problems(many + [dict(good, prompt="new")], "safety"))
    assert any("empty" in p for p in pair_problems([dict(good, chosen="  ")] + many[1:], "safety"))
    assert any("need at least" in p for p in pair_problems(many[:5], "safety"))
    assert any("keys" in p for p in pair_problems([{**good, "extra": 1}], "safety"))
    assert any("prompt repeated" in p
               for p in pair_problems(many + [dict(good, seed_id="safety-099", prompt="Q1")],
                                      "safety"))

    cells = {k: f"text {k}" for k in CELL_KEYS}
    quad = {"kind": "quadruple", "dimension": "sycophancy", "seed_id": "syq-001", "prompt": "R",
            "prompts": {"right": "R", "wrong": "W"}, "factors": ["stance", "user"],
            "cells": cells, "user_claim_correct": True, "contrast": "c"}
    quads = [dict(quad, seed_id=f"syq-{i:03d}") for i in range(1, 25)]
    assert quad_problems(quads) == []
    same = dict(cells, **{"agree|wrong": cells["agree|right"]})
    assert any("not distinct" in p for p in quad_problems([dict(quad, cells=same)] + quads[1:]))
    three = {k: v for k, v in cells.items() if k != "disagree|wrong"}
    assert any("cells keys" in p for p in quad_problems([dict(quad, cells=three)] + quads[1:]))
    assert any("prompts['right']" in p
               for p in quad_problems([dict(quad, prompt="W")] + quads[1:]))

    balanced = [dict(good, chosen="aa" if i % 2 else "a", rejected="b") for i in range(10)]
    assert chosen_longer_fraction(balanced) == 0.5
