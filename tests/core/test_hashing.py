"""Canonical hashing: stability and sensitivity, by example and by property."""

import math
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.errors import HashError
from assay.hashing import HASH_SCHEMA, canonical_json, combine, content_hash

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
@settings(max_examples=200, deadline=None)
def test_stable_across_calls_and_key_order(v):
    assert content_hash(v, "x") == content_hash(v, "x")
    if isinstance(v, dict):
        reordered = dict(reversed(list(v.items())))
        assert content_hash(reordered, "x") == content_hash(v, "x")


@given(json_values, json_values)
@settings(max_examples=200, deadline=None)
def test_sensitive_to_content(a, b):
    ca, cb = canonical_json(a), canonical_json(b)
    assert (content_hash(a, "x") == content_hash(b, "x")) == (ca == cb)


@given(st.text(min_size=1))
@settings(max_examples=100, deadline=None)
def test_any_text_edit_changes_the_id(s):
    assert content_hash(s, "x") != content_hash(s + "!", "x")
    assert content_hash([s], "x") != content_hash([s, s], "x")


def test_nfc_equivalent_strings_hash_the_same():
    composed = "caf\u00e9"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    assert content_hash({"t": composed}, "ds") == content_hash({"t": decomposed}, "ds")
    assert content_hash({composed: 1}, "ds") == content_hash({decomposed: 1}, "ds")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -math.inf, np.float64("nan")])
def test_nan_and_inf_rejected_with_path(bad):
    with pytest.raises(HashError, match=r"\$\.a\[1\]"):
        content_hash({"a": [1, bad]}, "x")


def test_numpy_scalars_and_arrays_accepted():
    assert content_hash(np.int64(3), "x") == content_hash(3, "x")
    assert content_hash(np.float32(0.5), "x") == content_hash(0.5, "x")
    assert content_hash(np.array([[1, 2], [3, 4]]), "x") == content_hash([[1, 2], [3, 4]], "x")
    assert content_hash(np.bool_(True), "x") == content_hash(True, "x")


def test_documented_type_distinctions():
    assert content_hash((1, 2), "x") == content_hash([1, 2], "x")  # tuples are lists (documented)
    assert content_hash(1, "x") != content_hash(1.0, "x")
    assert content_hash(True, "x") != content_hash(1, "x")
    assert content_hash(None, "x") != content_hash("None", "x")


@pytest.mark.parametrize("bad", [{1: "a"}, {"s": {1, 2}}, b"bytes", object()])
def test_unsupported_values_rejected(bad):
    with pytest.raises(HashError):
        content_hash(bad, "x")


def test_prefix_and_schema_version_are_in_the_id():
    a, b = content_hash("v", "ds"), content_hash("v", "rows")
    assert a.startswith("ds:") and b.startswith("rows:")
    assert a.split(":")[1] != b.split(":")[1]
    assert HASH_SCHEMA == 1
    with pytest.raises(HashError):
        content_hash("v", "bad:prefix")


def test_combine_is_order_sensitive():
    assert combine("stage", "a", "b") != combine("stage", "b", "a")
    assert combine("stage", "a", {"k": 1}) == combine("stage", "a", {"k": 1})


def test_known_vector_is_pinned():
    # Pinned so an accidental change of the canonical form (which would silently invalidate
    # every cache and dataset card) fails loudly.
    assert canonical_json({"b": [1, 2.5], "a": "\u00e9"}) == '{"a":"\u00e9","b":[1,2.5]}'.encode()
    assert content_hash({"b": [1, 2.5], "a": "\u00e9"}, "t") == \
        content_hash({"a": "e\u0301", "b": (1, 2.5)}, "t")
    assert content_hash({"b": [1, 2.5], "a": "\u00e9"}, "t") == "t:fe663e779bdec2f1b0719ff9af9aea7e"
