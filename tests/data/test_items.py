"""Typed items: validation errors, immutability, content hashes and lineage."""

from __future__ import annotations

import math
import pickle
import unicodedata

import numpy as np
import pytest

from assay.data import (
    EdgeObs,
    Lineage,
    Pair,
    Prompt,
    Quadruple,
    Response,
    Span,
    Tournament,
    Trajectory,
    TrajStep,
    item_from_dict,
    make_pair,
    make_pairs,
)
from assay.errors import DataError
from assay.hashing import content_hash


def pair(**kw):
    base = dict(prompt="What is 2+2?", chosen="4", rejected="5", axis="correctness",
                seed_id="s-1", builder_id="hand")
    base.update(kw)
    return make_pair(base.pop("prompt"), base.pop("chosen"), base.pop("rejected"),
                     base.pop("axis"), **base)


CELLS = {("agree", "right"): "Yes, that's right.", ("agree", "wrong"): "Yes, you're right.",
         ("disagree", "right"): "No, that's wrong.", ("disagree", "wrong"): "No, it is 7."}


# ------------------------------------------------------------------------ Pair validation


@pytest.mark.parametrize("field,value,match", [
    ("prompt", "", "prompt is empty"),
    ("prompt", "   ", "prompt is empty"),
    ("prompt", None, "prompt must be a string"),
    ("chosen", "", "chosen.text is empty"),
    ("chosen", None, "chosen must be a Response or a string"),
    ("rejected", "  \n", "rejected.text is empty"),
    ("rejected", 5, "rejected must be a Response or a string"),
    ("rejected", "4", "same text"),
    ("axis", "", "axis must be a non-empty string"),
    ("axis", None, "axis must be a non-empty string"),
    ("seed_id", "", "seed_id must be a non-empty string"),
    ("seed_id", None, "seed_id must be a non-empty string"),
    ("builder_id", "", "builder_id must be a non-empty string"),
    ("meta", {"x": float("nan")}, "NaN"),
    ("meta", {1: "a"}, "non-string key"),
    ("meta", {"x": object()}, "value of type object"),
    ("meta", [1], "must be a mapping"),
])
def test_pair_validation_errors_name_the_field(field, value, match):
    with pytest.raises(DataError, match=match):
        pair(**{field: value})


def test_chosen_equal_to_rejected_after_nfc_is_rejected():
    composed = "caf\u00e9"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    with pytest.raises(DataError, match="same text"):
        pair(chosen=composed, rejected=decomposed)


def test_error_names_the_seed():
    with pytest.raises(DataError, match="seed_id='abc'"):
        pair(seed_id="abc", chosen="")


def test_direct_pair_requires_lineage_and_checks_content_hash():
    with pytest.raises(DataError, match="lineage must be a Lineage"):
        Pair("Q", "a", "b", "x", "s-1")  # type: ignore[arg-type]
    good = Pair("Q", "a", "b", "x", Lineage("s-1", "b"))
    again = Pair("Q", "a", "b", "x", Lineage("s-1", "b", (), good.content_hash))
    assert again == good
    with pytest.raises(DataError, match="does not match"):
        Pair("Q", "a", "c", "x", Lineage("s-1", "b", (), good.content_hash))


def test_lineage_validation():
    with pytest.raises(DataError, match="ops must be a tuple"):
        Lineage("s", "b", "op")  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"ops\[1\]"):
        Lineage("s", "b", ("a", ""))
    with pytest.raises(DataError, match="'ch:' id"):
        Lineage("s", "b", (), "ds:abc")
    with pytest.raises(DataError, match="op must be"):
        Lineage("s").with_op("", "x")


def test_make_pairs_names_the_index():
    with pytest.raises(DataError, match="item 1: .*same text"):
        make_pairs(["Q", "Q"], ["a", "b"], ["c", "b"], "x", seed_ids=["s1", "s2"], builder_id="h")
    with pytest.raises(DataError, match=r"seed_ids\[0\]"):
        make_pairs(["Q"], ["a"], ["c"], "x", seed_ids=[None], builder_id="h")
    with pytest.raises(DataError, match="rejected has 1 entries for 2"):
        make_pairs(["Q", "R"], ["a", "b"], ["c"], "x", seed_ids=["s1", "s2"], builder_id="h")
    ps = make_pairs(["Q", "R"], ["a", "b"], ["c", "d"], ["x", "y"], seed_ids=["s1", "s2"],
                    builder_id="h")
    assert ps == [make_pair("Q", "a", "c", "x", seed_id="s1", builder_id="h"),
                  make_pair("R", "b", "d", "y", seed_id="s2", builder_id="h")]


# --------------------------------------------------------------------- immutability


def test_items_are_immutable_and_meta_is_frozen():
    p = pair(meta={"tags": ["a", "b"], "nested": {"k": 1}})
    with pytest.raises(AttributeError):
        p.axis = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.meta["tags"] = []  # type: ignore[index]
    with pytest.raises(TypeError):
        p.meta["nested"]["k"] = 2  # type: ignore[index]
    assert p.meta["tags"] == ("a", "b")
    before = p.content_hash
    src = {"k": 1}
    q = pair(meta={"nested": src})
    cs = q.meta["nested"]
    src["k"] = 99  # the caller's dict must not reach into the item
    assert cs["k"] == 1 and p.content_hash == before
    with pytest.raises(AttributeError):
        p.chosen.text = "x"  # type: ignore[misc]


def test_quadruple_cells_are_read_only():
    q = Quadruple("Is 2+2=5?", CELLS, ("stance", "user"), Lineage("q"))
    with pytest.raises(TypeError):
        q.cells[("agree", "right")] = Response("x")  # type: ignore[index]
    assert q.cells[("agree", "right")].text == "Yes, that's right."


def test_numpy_meta_values_are_accepted_as_python_numbers():
    p = pair(meta={"d": np.float64(0.5), "n": np.int64(3)})
    assert p.meta["d"] == 0.5 and type(p.meta["n"]) is int


# -------------------------------------------------------------------- content hashes


def test_content_hash_matches_the_canonical_payload_hash():
    p = pair()
    assert p.content_hash == content_hash(p.__assay_content__(), "ch")
    assert p.lineage.content_hash == p.content_hash
    span_pair = make_pair(Prompt("Find it", spans=(Span(0, 4, "verb"),)),
                          Response("Found #12", spans=(Span(6, 9, "receipt"),)), "Nope", "x",
                          seed_id="s", builder_id="b", meta={"d": 1})
    assert span_pair.content_hash == content_hash(span_pair.__assay_content__(), "ch")
    assert span_pair.content_hash != make_pair("Find it", "Found #12", "Nope", "x", seed_id="s",
                                               builder_id="b").content_hash


def test_plain_response_and_string_hash_the_same():
    a = make_pair("Q", Response("a"), Response("b"), "x", seed_id="s", builder_id="h")
    b = make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")
    assert a == b and a.content_hash == b.content_hash


def test_content_hash_is_nfc_stable_and_edit_sensitive():
    nfc = pair(chosen="caf\u00e9 au lait")
    nfd = pair(chosen=unicodedata.normalize("NFD", "caf\u00e9 au lait"))
    assert nfc.content_hash == nfd.content_hash
    assert pair(chosen="4 ").content_hash != pair().content_hash
    assert pair(axis="math").content_hash != pair().content_hash
    # the seed is lineage, not payload: clones of different seeds have the same content hash
    assert pair(seed_id="other").content_hash == pair().content_hash


def test_derive_keeps_seed_and_records_op():
    p = pair()
    q = p.derive("swap", chosen="5", rejected="4")
    assert q.seed_id == p.seed_id and q.lineage.ops == ("swap",)
    assert q.content_hash == content_hash(q.__assay_content__(), "ch")
    assert p.lineage.with_op("swap", q).content_hash == q.content_hash
    assert q.derive("typo", chosen="five").lineage.ops == ("swap", "typo")
    with pytest.raises(DataError, match="unknown fields"):
        p.replace(colour="red")


def test_roundtrip_dict_and_pickle_for_every_item_type():
    items = [
        pair(meta={"d": 1.5}),
        make_pair(Prompt("P", spans=(Span(0, 1, "x"),)), Response("ab", spans=(Span(0, 1, "r"),)),
                  "cd", "x", seed_id="s", builder_id="b", ops=["m"]),
        Quadruple("Is 2+2=5?", CELLS, ("stance", "user"), Lineage("q"),
                  cell_prompts={"right": "Is 2+2=4?", "wrong": "Is 2+2=5?"}),
        Tournament("Q", ("a", "b", "c"), (EdgeObs(0, 1, 2, 1, source="j1"), EdgeObs(1, 2, 0, 3)),
                   Lineage("t")),
        Trajectory((TrajStep("tool", "ls: a.txt", spans=(Span(0, 2, "receipt"),)),
                    TrajStep("agent", "There is a.txt")), {"success": True, "reward": 1.0},
                   Lineage("e"), prompt="List files"),
    ]
    for it in items:
        back = item_from_dict(it.to_dict())
        assert back == it and back.content_hash == it.content_hash
        assert pickle.loads(pickle.dumps(it)) == it


def test_item_from_dict_rejects_tampering():
    d = pair().to_dict()
    d["chosen"]["text"] = "four"
    with pytest.raises(DataError, match="does not match"):
        item_from_dict(d)
    with pytest.raises(DataError, match="unknown item kind"):
        item_from_dict({"kind": "triple"})
    with pytest.raises(DataError, match="missing field 'axis'"):
        item_from_dict({"kind": "pair", "prompt": "Q", "chosen": "a", "rejected": "b",
                        "lineage": {"seed_id": "s"}})


# ------------------------------------------------------------------------ spans


def test_span_validation():
    with pytest.raises(DataError, match="before start"):
        Span(3, 1)
    with pytest.raises(DataError, match="non-negative int"):
        Span(-1, 2)
    with pytest.raises(DataError, match="unit"):
        Span(0, 1, unit="word")
    with pytest.raises(DataError, match="ends at char 10"):
        Response("short", spans=(Span(0, 10),))
    assert Response("abc", spans=(Span(0, 10, unit="token"),)).spans[0].end == 10


# -------------------------------------------------------------------- Quadruple


@pytest.mark.parametrize("cells,factors,match", [
    ({**CELLS, ("maybe", "right"): "x"}, ("stance", "user"), "exactly 4 cells"),
    ({k: v for k, v in list(CELLS.items())[:3]}, ("stance", "user"), "exactly 4 cells"),
    ({("agree", "right"): "a", ("agree", "wrong"): "b", ("agree", "x"): "c",
      ("agree", "y"): "d"}, ("stance", "user"), "cross two levels"),
    ({**{k: v for k, v in CELLS.items() if k != ("disagree", "wrong")},
      ("disagree",): "x"}, ("stance", "user"), "cell key"),
    ({**CELLS, ("disagree", "wrong"): "Yes, that's right."}, ("stance", "user"), "same text"),
    ({**CELLS, ("disagree", "wrong"): ""}, ("stance", "user"), "empty"),
    (CELLS, ("stance", "stance"), "two distinct"),
    (CELLS, ("stance",), "two distinct"),
    ("cells", ("stance", "user"), "mapping of exactly 4"),
])
def test_quadruple_validation(cells, factors, match):
    with pytest.raises(DataError, match=match):
        Quadruple("Q", cells, factors, Lineage("q"))


def test_quadruple_string_keys_and_cell_prompts():
    q = Quadruple("P-right", {f"{a}|{b}": v for (a, b), v in CELLS.items()}, ("stance", "user"),
                  Lineage("q"), cell_prompts={"right": "P-right", "wrong": "P-wrong"})
    assert q.prompt_for(("agree", "wrong")) == "P-wrong"
    assert q.levels == (("agree", "disagree"), ("right", "wrong"))
    with pytest.raises(DataError, match="not a level"):
        Quadruple("P", CELLS, ("stance", "user"), Lineage("q"), cell_prompts={"maybe": "x"})


# ------------------------------------------------------------------- Tournament


@pytest.mark.parametrize("responses,edges,match", [
    (("a", "b"), (EdgeObs(0, 2),), "refers to response 2"),
    (("a", "b"), (), "at least one edge"),
    (("a",), (EdgeObs(0, 1),), "at least 2 responses"),
    (("a", ""), (EdgeObs(0, 1),), "empty"),
    (("a", "b"), ({"i": 0, "j": 1, "wins_i": -1},), "non-negative"),
    (("a", "b"), ({"i": 0, "k": 1},), "unexpected keyword"),
    (("a", "b"), ("0>1",), "must be an EdgeObs"),
])
def test_tournament_validation(responses, edges, match):
    with pytest.raises(DataError, match=match):
        Tournament("Q", responses, edges, Lineage("t"))


@pytest.mark.parametrize("kw,match", [
    (dict(i=0, j=0), "with itself"),
    (dict(i=-1, j=0), "non-negative response index"),
    (dict(i=0, j=1, wins_i=math.nan), "finite non-negative"),
    (dict(i=0, j=1, wins_i=0, wins_j=0), "no comparisons"),
    (dict(i=0, j=1, ties=True), "finite non-negative"),
    (dict(i=0, j=1, source=""), "source"),
])
def test_edge_validation(kw, match):
    with pytest.raises(DataError, match=match):
        EdgeObs(**kw)


def test_trajectory_validation():
    with pytest.raises(DataError, match="at least one step"):
        Trajectory((), {}, Lineage("e"))
    with pytest.raises(DataError, match="outcome must be a mapping"):
        Trajectory((TrajStep("a", "b"),), None, Lineage("e"))  # type: ignore[arg-type]
    with pytest.raises(DataError, match="role"):
        TrajStep("", "x")
    with pytest.raises(DataError, match="must be a string"):
        TrajStep("agent", None)  # type: ignore[arg-type]
    t = Trajectory(({"role": "agent", "text": "hi"},), {"ok": True}, Lineage("e"))
    with pytest.raises(TypeError):
        t.outcome["ok"] = False  # type: ignore[index]
