"""Dataset cards (pinned checksum, refusal on mismatch) and the diagnostic_v3 loader and set."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from assay.data import DataView, make_pair
from assay.data.builtin import diagnostic as diag
from assay.data.cards import DatasetCard, data_checksum, load_dataset
from assay.errors import DataError

# ----------------------------------------------------------------------------- cards


def small_view(n=3):
    return DataView([make_pair(f"Q{i}", "a", "b", "x", seed_id=f"s{i}", builder_id="h")
                     for i in range(n)])


def test_card_refuses_checksum_count_mismatch_and_bad_pins():
    pinned = data_checksum(small_view(3))
    assert load_dataset(DatasetCard("d", "1", 3, pinned, small_view)).checksum() == pinned
    with pytest.raises(DataError, match="declares 3 items but the loader returned 2"):
        load_dataset(DatasetCard("d", "1", 3, pinned, lambda: small_view(2)))
    edited = lambda: DataView([*small_view(2),  # noqa: E731
                               make_pair("Q2", "a", "c", "x", seed_id="s2", builder_id="h")])
    with pytest.raises(DataError, match="checksum mismatch: the card pins"):
        load_dataset(DatasetCard("d", "1", 3, pinned, edited))
    with pytest.raises(DataError, match="pinned 'ds:<32 hex>' literal"):
        DatasetCard("d", "1", 3, "ds:abc", small_view)
    with pytest.raises(DataError, match="count"):
        DatasetCard("d", "1", -1, pinned, small_view)
    with pytest.raises(DataError, match="needs a DatasetCard"):
        load_dataset("d")  # type: ignore[arg-type]


def test_data_checksum_of_named_views_depends_on_names_and_content():
    a, b = small_view(2), small_view(3)
    assert data_checksum({"x": a, "y": b}) == data_checksum({"y": b, "x": a})
    assert data_checksum({"x": a, "y": b}) != data_checksum({"x": b, "y": a})
    with pytest.raises(DataError, match="not a DataView"):
        data_checksum({"x": [1]})


def test_diagnostic_card_pins_a_literal_checksum_in_source():
    import inspect

    src = inspect.getsource(diag)
    assert f'checksum="{diag.DIAGNOSTIC_V3_CARD.checksum}"' in src
    assert f"count={diag.DIAGNOSTIC_V3_CARD.count}," in src
    assert any("verbosity" in n and "length" in n for n in diag.DIAGNOSTIC_V3_CARD.notes)


# -------------------------------------------------------------- loader on temp files


def pair_line(dim, k, **over):
    d = {"kind": "pair", "dimension": dim, "seed_id": f"{dim}-{k:03d}",
         "prompt": f"Prompt {k} for {dim}?", "chosen": f"Good answer {k}.",
         "rejected": f"Worse answer number {k}.", "contrast": "Chosen is right."}
    d.update(over)
    return d


def quad_line(k, **over):
    d = {"kind": "quadruple", "dimension": "sycophancy", "seed_id": f"syq-{k:03d}",
         "prompt": f"Claim {k} is true, right?",
         "prompts": {"right": f"Claim {k} is true, right?", "wrong": f"Claim {k} is false, right?"},
         "factors": ["stance", "user"],
         "cells": {"agree|right": f"Yes {k}.", "agree|wrong": f"Yes, false {k}.",
                   "disagree|right": f"No {k}.", "disagree|wrong": f"No, it is true {k}."},
         "user_claim_correct": True, "contrast": "Agreeing is right only when the user is."}
    d.update(over)
    return d


def write_set(root, *, per_dim=2, edit=None):
    files = {f"{d}.jsonl": [pair_line(d, k) for k in range(per_dim)] for d in diag.DIMENSIONS}
    files[diag.MATCHED_FILE] = [
        pair_line(d, 0, seed_id=f"matched-m-01-{d}", match_id="m-01", prompt="Shared prompt?")
        for d in ("helpfulness", "safety")
    ]
    files[diag.QUADRUPLE_FILE] = [quad_line(k) for k in range(per_dim)]
    if edit:
        edit(files)
    for name, lines in files.items():
        (root / name).write_text("\n".join(json.dumps(x) if isinstance(x, dict) else x
                                           for x in lines) + "\n", encoding="utf-8")
    return root


def test_read_diagnostic_dir_builds_typed_views(tmp_path):
    s = diag.read_diagnostic_dir(write_set(tmp_path))
    assert list(s.dimensions) == list(diag.DIMENSIONS)
    v = s.dimensions["safety"]
    assert len(v) == 2 and v[0].axis == "safety" and v[0].meta["contrast"] == "Chosen is right."
    assert v[0].lineage.builder_id == "diagnostic_v3" and v.effective_n() == 2
    assert [p.meta["match_id"] for p in s.matched] == ["m-01", "m-01"]
    assert {p.axis for p in s.matched} == {"helpfulness", "safety"}
    q = s.quadruples[0]
    assert (q.factors == ("stance", "user")
            and q.prompt_for(("agree", "wrong")).endswith("false, right?"))
    assert q.cells[("disagree", "right")].text == "No 0."
    m = s.as_mapping()
    assert set(m) == set(diag.DIMENSIONS) | {"matched", "sycophancy_quadruples"}
    # a card over the temp files refuses a later edit
    pinned = data_checksum(m)
    card = DatasetCard("tmp", "1", sum(len(x) for x in m.values()), pinned,
                       lambda: diag.read_diagnostic_dir(tmp_path).as_mapping())
    load_dataset(card)
    write_set(tmp_path, edit=lambda f: f["safety.jsonl"][1].update(chosen="Good answer 1!"))
    with pytest.raises(DataError, match="checksum mismatch"):
        load_dataset(card)


def _set(fname, idx, **kw):
    def edit(files):
        files[fname][idx].update(kw)
    return edit


@pytest.mark.parametrize("edit,match", [
    (lambda f: f.pop("receipts.jsonl"), r"missing files \['receipts.jsonl'\]"),
    (lambda f: f["safety.jsonl"].append("{not json"), r"safety.jsonl:3: not valid JSON"),
    (lambda f: f["safety.jsonl"].append("[1, 2]"),
     r"safety.jsonl:3: each line must be a JSON object"),
    (_set("safety.jsonl", 0, dimension="helpfulness"), r"safety.jsonl:1: expected kind 'pair'"),
    (_set("safety.jsonl", 1, seed_id="safety-000"),
     r"safety.jsonl:2: seed_id 'safety-000' already used at safety.jsonl:1"),
    (_set("safety.jsonl", 0, chosen="Worse answer number 0."), r"safety.jsonl:1: .*same text"),
    (_set("safety.jsonl", 0, rejected=""), r"safety.jsonl:1: .*empty"),
    (_set("safety.jsonl", 0, contrast=""), r"safety.jsonl:1: contrast must be a non-empty"),
    (lambda f: f["safety.jsonl"][0].pop("prompt"), r"safety.jsonl:1: missing keys \['prompt'\]"),
    (_set(diag.MATCHED_FILE, 0, seed_id="m-1"), r"matched.jsonl:1: seed_id 'm-1' should be"),
    (_set(diag.QUADRUPLE_FILE, 0, factors=["user", "stance"]), r"quadruples.jsonl:1: factors"),
    (_set(diag.QUADRUPLE_FILE, 0, cells={"agree|right": "a"}), r"quadruples.jsonl:1: cells"),
    (_set(diag.QUADRUPLE_FILE, 0, prompt="Other?"), r"quadruples.jsonl:1: prompt must equal"),
    (_set(diag.QUADRUPLE_FILE, 0, user_claim_correct="yes"), r"user_claim_correct"),
    (_set(diag.QUADRUPLE_FILE, 1, seed_id="helpfulness-000"),
     r"already used at helpfulness.jsonl:1"),
])
def test_loader_errors_name_file_and_line(tmp_path, edit, match):
    write_set(tmp_path, edit=edit)
    with pytest.raises(DataError, match=match):
        diag.read_diagnostic_dir(tmp_path)


def test_length_baseline_on_a_confounded_view():
    longer = DataView([make_pair(f"Q{i}", "a long detailed answer", "short", "x", seed_id=f"s{i}",
                                 builder_id="h") for i in range(30)], name="confounded")
    r = diag.length_baseline(longer)
    e = r.by_dimension["confounded"]
    assert e.value == 1.0 and e.n == 30 and e.interval.low > 0.85
    assert r.warnings and "length alone predicts the label" in r.warnings[0]
    # clones of one seed count once: 29 independent 'shorter wins' seeds + 1 seed cloned 50x
    clones = [make_pair("Q", f"long answer {k}", "s", "x", seed_id="c", builder_id="h")
              for k in range(50)]
    other = [make_pair(f"Q{i}", "s", f"long answer {i}", "x", seed_id=f"o{i}", builder_id="h")
             for i in range(29)]
    e2 = diag.length_baseline(DataView(clones + other, name="v")).by_dimension["v"]
    assert e2.value == pytest.approx(1 / 30) and e2.n == 30 and e2.n_rows == 79
    assert diag.length_baseline({"w": DataView([make_pair("Q", "a b c", "abcdefgh", "x",
                                                          seed_id="s", builder_id="h")])},
                                unit="words").by_dimension["w"].value == 1.0
    with pytest.raises(DataError, match="unit"):
        diag.length_baseline(longer, unit="tokens")


# ------------------------------------------------------------------- the real set


def test_real_diagnostic_set_verifies_and_meets_the_contract():
    views = diag.load_diagnostic_v3()  # verifies count and pinned checksum
    assert list(views) == list(diag.DIMENSIONS) and len(views) == 14
    for name, v in views.items():
        seeds = v.seed_ids()
        assert len(set(seeds)) >= 24, name
        assert v.effective_n() == len(set(seeds)) == len(v), name
        assert all(p.lineage.ops == () and p.meta["contrast"].strip() for p in v), name
    lb = diag.length_baseline(views)
    for name, e in lb.by_dimension.items():
        if name not in diag.LENGTH_DEFINED:
            assert 0.35 <= e.value <= 0.65, (name, e.value)
    matched = diag.load_diagnostic_v3_matched()
    by_match = defaultdict(list)
    for p in matched:
        by_match[p.meta["match_id"]].append(p)
    assert len(by_match) >= 2
    for mid, ps in by_match.items():
        assert len({p.prompt_text for p in ps}) == 1 and len({p.axis for p in ps}) >= 2, mid
    quads = diag.load_diagnostic_v3_quadruples()
    assert len(quads) >= 24 and quads.effective_n() == len(quads)
    assert all(q.levels == (("agree", "disagree"), ("right", "wrong")) for q in quads)
    assert diag.load_diagnostic_v3()["safety"] is views["safety"]  # cached, immutable
