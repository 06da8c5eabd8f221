"""DataView: checksums, derivation steps and replay, collapse weights, effective n,
Arrow/Parquet."""

from __future__ import annotations

import json
import time
import unicodedata
import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from assay.data import (
    DataView,
    EdgeObs,
    Lineage,
    Prompt,
    Quadruple,
    Response,
    Span,
    Tournament,
    Trajectory,
    TrajStep,
    apply_derivation,
    effective_n,
    kish_ess,
    make_pair,
    validate_steps,
)
from assay.errors import DataError
from assay.hashing import content_hash


def view(n=10, axis_of=lambda i: "a" if i % 2 else "b", name="v"):
    return DataView([make_pair(f"Question {i}?", "x" * (i + 1), f"no {i}", axis_of(i),
                               seed_id=f"s{i}", builder_id="h", meta={"i": i})
                     for i in range(n)], name=name)


# ------------------------------------------------------------------------ checksum


def test_checksum_equals_reference_content_hash_of_records():
    v = view(5)
    ref = content_hash([it.__assay_record__() for it in v], "ds")
    assert v.checksum() == ref and ref.startswith("ds:")
    # plain pairs take the fast path; it must agree with the general encoder byte for byte
    plain = DataView([make_pair('Q "quoted"\n\u2028', "caf\u00e9 \U0001F600", "b\\\x00", "x",
                                seed_id="s", builder_id="h")])
    assert plain.checksum() == content_hash([it.__assay_record__() for it in plain], "ds")
    # the chunked stream gives the same bytes for any length across chunk boundaries
    big = DataView([make_pair(f"Q{i}", "a", "b", "x", seed_id=f"s{i}", builder_id="h")
                    for i in range(4100)])
    assert big.checksum() == content_hash([it.__assay_record__() for it in big], "ds")
    assert DataView([]).checksum() == content_hash([], "ds")


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(st.tuples(st.text(min_size=1), st.text(min_size=1), st.text(min_size=1),
                          st.text(min_size=1)), min_size=1, max_size=4))
def test_fast_paths_agree_with_the_canonical_hash_for_any_text(rows):
    items = []
    for k, (p, c, r, a) in enumerate(rows):
        assume(p.strip() and c.strip() and r.strip() and a.strip())
        assume(unicodedata.normalize("NFC", c) != unicodedata.normalize("NFC", r))
        items.append(make_pair(p, c, r, a, seed_id=f"s{k}", builder_id="h"))
    v = DataView(items)
    assert v.checksum() == content_hash([it.__assay_record__() for it in items], "ds")
    for it in items:
        assert it.content_hash == content_hash(it.__assay_content__(), "ch")


def test_checksum_is_stable_and_sensitive():
    v = view(6)
    assert v.checksum() == view(6).checksum()
    assert v.checksum() == view(6, name="other").checksum()  # the name is a label
    items = list(v)
    # order
    assert DataView(items[::-1]).checksum() != v.checksum()
    # any text edit, in any field
    for change in (dict(chosen="xx!"), dict(rejected="no 0 "), dict(prompt="Question 0"),
                   dict(axis="c"), dict(meta={"i": 1})):
        edited = [items[0].replace(**change)] + items[1:]
        assert DataView(edited).checksum() != v.checksum(), change
    # lineage: seed, ops, builder
    for other in (make_pair("Question 0?", "x", "no 0", "b", seed_id="s99", builder_id="h",
                            meta={"i": 0}),
                  make_pair("Question 0?", "x", "no 0", "b", seed_id="s0", builder_id="h2",
                            meta={"i": 0}),
                  make_pair("Question 0?", "x", "no 0", "b", seed_id="s0", builder_id="h",
                            ops=["m"], meta={"i": 0})):
        assert DataView([other] + items[1:]).checksum() != v.checksum()
    # one row dropped
    assert DataView(items[:-1]).checksum() != v.checksum()


def test_checksum_is_nfc_invariant():
    text = "r\u00e9sum\u00e9 na\u00efve"
    a = DataView([make_pair(text, text + "!", "plain", "x", seed_id="s\u00e9", builder_id="h")])
    d = unicodedata.normalize("NFD", text)
    b = DataView([make_pair(d, d + "!", "plain", "x",
                            seed_id=unicodedata.normalize("NFD", "s\u00e9"), builder_id="h")])
    assert a.checksum() == b.checksum()


def test_checksum_is_cached():
    v = DataView([make_pair(f"Q{i}", "a", "b", "x", seed_id=f"s{i}", builder_id="h")
                  for i in range(20000)])
    t0 = time.perf_counter()
    first = v.checksum()
    t1 = time.perf_counter()
    for _ in range(100):
        assert v.checksum() == first
    t2 = time.perf_counter()
    assert (t2 - t1) / 100 < (t1 - t0) / 50


def test_checksum_covers_every_item_type():
    q = Quadruple("Q", {("a", "r"): "1", ("a", "w"): "2", ("d", "r"): "3", ("d", "w"): "4"},
                  ("stance", "user"), Lineage("q"))
    t = Tournament("Q", ("a", "b"), (EdgeObs(0, 1, 2, 1),), Lineage("t"))
    e = Trajectory((TrajStep("agent", "hi"),), {"ok": True}, Lineage("e"))
    v = DataView([q, t, e])
    assert v.checksum() == content_hash([it.__assay_record__() for it in v], "ds")
    t2 = Tournament("Q", ("a", "b"), (EdgeObs(0, 1, 2, 2),), Lineage("t"))
    assert DataView([q, t2, e]).checksum() != v.checksum()


# ---------------------------------------------------------------- view protocol


def test_sequence_protocol_and_errors():
    v = view(4)
    assert len(v) == 4 and v[0].seed_id == "s0" and [p.seed_id for p in v][-1] == "s3"
    assert v[-1].seed_id == "s3" and len(v[1:3]) == 2
    assert v[1:3].derivation == [{"op": "slice", "start": 1, "stop": 3, "step": None}]
    with pytest.raises(IndexError, match="out of range"):
        v[10]
    with pytest.raises(DataError, match="index must be an int"):
        v["a"]
    with pytest.raises(DataError, match="item 1 is a dict"):
        DataView([v[0], {"prompt": "x"}])
    with pytest.raises(DataError, match="2 weights for 1 items"):
        DataView([v[0]], weights=[1, 2])
    with pytest.raises(DataError, match="weights\\[0\\]"):
        DataView([v[0]], weights=[float("nan")])


def test_view_pickles_with_its_derivation():
    import pickle

    v = view(6).where(axis="a").collapse_duplicates(warn=False)[0]
    w = pickle.loads(pickle.dumps(v))
    assert w.checksum() == v.checksum() and w.derivation == v.derivation
    assert w.weights == v.weights and w.replay().checksum() == v.checksum()


def test_concat_is_a_new_root():
    a, b = view(3), view(2)
    c = a.concat(b, name="both")
    assert len(c) == 5 and c.name == "both" and c.derivation == [] and c.root is c
    assert c.seed_ids() == ["s0", "s1", "s2", "s0", "s1"]
    with pytest.raises(DataError, match="concat needs a DataView"):
        a.concat([1])  # type: ignore[arg-type]


# ---------------------------------------------------------------- derivation


def test_where_forms_and_steps():
    v = view(10)
    w = v.where(axis="a")
    assert len(w) == 5 and all(p.axis == "a" for p in w)
    assert w.derivation == [{"op": "where", "field": "axis", "cmp": "==", "value": "a"}]
    assert [p.seed_id for p in v.where("meta.i", ">=", 7)] == ["s7", "s8", "s9"]
    assert len(v.where("chosen_len", "<", 3)) == 2
    assert len(v.where(seed_id=["s1", "s2"])) == 2
    assert len(v.where("chosen.text", "contains", "xxxxxxxxx")) == 2
    assert len(v.where("seed_id", "not in", ["s1"])) == 9
    with pytest.raises(DataError, match="has no field 'meta.nope'"):
        v.where("meta.nope", "==", 1)
    with pytest.raises(DataError, match="has no field 'colour'"):
        v.where("colour", "==", 1)
    with pytest.raises(DataError, match="cannot compare"):
        v.where("meta.i", "<", "x")
    with pytest.raises(DataError, match=r"steps\[0\].cmp"):
        v.where("axis", "~", "a")


def test_derivation_is_json_and_replays_from_the_root():
    v = view(30)
    d = v.where(axis="a").where("meta.i", ">", 4).sample(6, seed=3).slice(1, 5)
    steps = json.loads(json.dumps(d.derivation))
    assert [s["op"] for s in steps] == ["where", "where", "sample", "slice"]
    assert d.root is v
    r = apply_derivation(v, steps)
    assert r.checksum() == d.checksum() and [p.seed_id for p in r] == [p.seed_id for p in d]
    assert d.replay().checksum() == d.checksum()
    assert r.derivation == d.derivation


def test_sample_is_seeded_ordered_and_bounded():
    v = view(20)
    a, b = v.sample(8, seed=1), v.sample(8, seed=1)
    assert a.checksum() == b.checksum() and v.sample(8, seed=2).checksum() != a.checksum()
    idx = [int(p.seed_id[1:]) for p in a]
    assert idx == sorted(idx) and len(set(idx)) == 8
    with pytest.raises(DataError, match="more than"):
        v.sample(21, seed=0)


def test_filter_callable_is_not_replayable():
    f = view(6).filter(lambda p: p.axis == "a")
    assert len(f) == 3 and not f.replayable and f.derivation[0]["op"] == "filter"
    with pytest.raises(DataError, match="cannot be replayed"):
        f.replay()
    with pytest.raises(DataError, match="filter\\(callable\\) steps cannot be replayed"):
        validate_steps(f.derivation)


@pytest.mark.parametrize("steps,match", [
    ({"op": "slice"}, "must be a list"),
    (["slice"], r"steps\[0\] must be a mapping"),
    ([{"op": "slice", "start": 0}, {"op": "shuffle"}], r"steps\[1\].op is 'shuffle'"),
    ([{"op": "sample", "n": 3}], r"steps\[0\].seed is missing"),
    ([{"op": "sample", "n": 3, "seed": 0, "k": 1}], r"steps\[0\].k is not a field"),
    ([{"op": "sample", "n": 3.5, "seed": 0}], r"steps\[0\].n must be a non-negative int"),
    ([{"op": "sample", "n": 3, "seed": -2}], r"steps\[0\].seed"),
    ([{"op": "slice", "start": "0"}], r"steps\[0\].start must be an int"),
    ([{"op": "slice", "start": 0, "step": 0}], r"steps\[0\].step must not be 0"),
    ([{"op": "where", "field": "", "cmp": "==", "value": 1}], r"steps\[0\].field"),
    ([{"op": "where", "field": "axis", "cmp": "in", "value": "a"}],
     r"steps\[0\].value must be a list"),
    ([{"op": "where", "field": "axis", "cmp": "==", "value": float("nan")}], r"steps\[0\].value"),
])
def test_validate_steps_names_index_and_field(steps, match):
    with pytest.raises(DataError, match=match):
        validate_steps(steps)


# ---------------------------------------------------------------- collapse and weights


def test_collapse_duplicates_weights_flow_through():
    a = make_pair("Q", "a", "b", "x", seed_id="s1", builder_id="h")
    b = make_pair("Q", "c", "b", "x", seed_id="s2", builder_id="h")
    a_again_other_seed = make_pair("Q", "a", "b", "x", seed_id="s3", builder_id="h")
    v = DataView([a, b, a, a_again_other_seed, b])
    with pytest.warns(UserWarning, match="merged 3 duplicate items into 2.*different seed ids"):
        u, w = v.collapse_duplicates()
    assert w == [3, 2] and u.weights == (3.0, 2.0) and [p.seed_id for p in u] == ["s1", "s2"]
    assert u.derivation == [{"op": "collapse_duplicates"}]
    assert u.effective_n("weighted") == pytest.approx(25 / 13)
    # weights survive slicing and go into the checksum and the Arrow table
    assert u.slice(1).weights == (2.0,)
    assert u.checksum() != DataView(list(u)).checksum()
    assert DataView.from_arrow(u.to_arrow()).weights == (3.0, 2.0)
    # collapsing again sums weights
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uu, ww = u.concat(u).collapse_duplicates(warn=False)
    assert ww == [6.0, 4.0]
    assert apply_derivation(v, u.derivation).checksum() == u.checksum()


# ---------------------------------------------------------------- effective n


def test_effective_n_named_variants():
    seeds = ["a", "b", "c"] + ["d"] * 97
    assert effective_n(seeds) == 4.0
    assert effective_n(seeds, kind="kish_rows") == pytest.approx(100**2 / (3 + 97**2))
    assert effective_n(seeds, kind="design", icc=1.0) == pytest.approx(100**2 / (3 + 97**2))
    assert effective_n(seeds, kind="design", icc=0.0) == pytest.approx(100.0)
    # Kish design effect: deff = 1 + (sum m^2 / M - 1) * icc
    m = np.array([1, 1, 1, 97])
    deff = 1 + (np.sum(m**2) / 100 - 1) * 0.3
    assert effective_n(seeds, kind="design", icc=0.3) == pytest.approx(100 / deff)
    assert effective_n(seeds, kind="rows") == 100.0
    assert effective_n(["a"] * 40) == 1.0
    assert effective_n([]) == 0.0
    assert kish_ess([2, 2, 2]) == pytest.approx(3.0)
    with pytest.raises(DataError, match="unknown kind"):
        effective_n(seeds, kind="kish")
    with pytest.raises(DataError, match="needs weights"):
        effective_n(seeds, kind="weighted")
    with pytest.raises(DataError, match="icc"):
        effective_n(seeds, kind="design", icc=1.5)
    with pytest.raises(DataError, match="non-negative"):
        kish_ess([1, -1])


def test_view_effective_n_counts_seeds_not_clones():
    base = make_pair("Q", "good answer", "bad", "x", seed_id="s0", builder_id="h")
    clones = [base.derive(f"typo{k}", chosen=f"good answer{'!' * k}") for k in range(1, 40)]
    v = DataView([base, *clones,
                  make_pair("R", "a", "b", "x", seed_id="s1", builder_id="h")])
    assert v.effective_n() == 2.0
    assert v.effective_n("rows") == 41.0
    assert v.effective_n("kish_rows") == pytest.approx(41**2 / (40**2 + 1))
    rep = v.effective_n_report()
    assert rep.seeds == 2 and rep.rows == 41 and "2 independent seeds" in str(rep)
    assert v.effective_n("prompts") == 2.0 and rep.prompts == 2.0
    shared = DataView([make_pair("Same prompt", "a", f"b{k}", f"axis{k}", seed_id=f"m{k}",
                                 builder_id="h") for k in range(4)])
    assert shared.effective_n() == 4.0 and shared.effective_n("prompts") == 1.0
    assert rep.to_dict()["kish_rows"] == pytest.approx(rep.kish_rows)


def test_kish_rows_matches_simulated_variance_of_row_mean():
    # clones of a seed share its value exactly (icc = 1): the variance of the row-weighted mean
    # is sigma^2 * sum m^2 / M^2, i.e. the variance of a mean of kish_rows independent draws.
    rng = np.random.default_rng(0)
    m = np.array([1, 1, 1, 97, 5, 5])
    seeds = [f"s{i}" for i, k in enumerate(m) for _ in range(k)]
    x = rng.normal(size=(20000, m.size))
    row_means = (x * m).sum(axis=1) / m.sum()
    n_eff = 1.0 / row_means.var()
    assert n_eff == pytest.approx(effective_n(seeds, kind="kish_rows"), rel=0.05)


# ---------------------------------------------------------------- Arrow / Parquet


def test_arrow_and_parquet_roundtrip(tmp_path):
    items = [
        make_pair("Q1", "a", "b", "x", seed_id="s1", builder_id="h"),
        make_pair(Prompt("Q2", spans=(Span(0, 1, "k"),)), Response("ab", spans=(Span(0, 2, "r"),)),
                  "cd", "y", seed_id="s2", builder_id="h", ops=["m"], meta={"d": [1, 2]}),
        Quadruple("Q", {("a", "r"): "1", ("a", "w"): "2", ("d", "r"): "3", ("d", "w"): "4"},
                  ("stance", "user"), Lineage("q")),
        Tournament("Q", ("a", "b"), (EdgeObs(0, 1, 2, 1, source="j"),), Lineage("t")),
        Trajectory((TrajStep("agent", "hi"),), {"ok": True}, Lineage("e"), prompt="go"),
    ]
    v = DataView(items, name="mixed")
    t = v.to_arrow()
    assert isinstance(t, pa.Table) and t.num_rows == 5 and t.column("extra")[0].as_py() is None
    back = DataView.from_arrow(t)
    assert back.checksum() == v.checksum() and back.name == "mixed" and list(back) == items
    path = tmp_path / "v.parquet"
    v.to_parquet(path)
    assert DataView.read_parquet(path).checksum() == v.checksum()


def test_from_arrow_rejects_tampered_rows():
    t = DataView([make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")]).to_arrow()
    bad = t.set_column(t.schema.get_field_index("chosen"), "chosen", pa.array(["A"]))
    with pytest.raises(DataError, match="row 0.*does not match"):
        DataView.from_arrow(bad)
    with pytest.raises(DataError, match="lacks columns"):
        DataView.from_arrow(t.drop(["axis"]))
    with pytest.raises(DataError, match="pyarrow Table"):
        DataView.from_arrow([1])  # type: ignore[arg-type]
