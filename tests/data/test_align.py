"""align / SpanMap: property tests (hypothesis) and the exact vs inferred paths."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.data.align import Span, align, tokenize
from assay.errors import DataError

TOKENS = st.lists(st.sampled_from(["a", "b", "c", "d", "the", "12", "."]), max_size=25)
FAST = settings(max_examples=120, deadline=None, database=None)  # no .hypothesis writes


@st.composite
def tokens_and_span(draw):
    a = draw(TOKENS.filter(bool))
    i = draw(st.integers(0, len(a) - 1))
    j = draw(st.integers(i + 1, len(a)))
    return a, Span(i, j, "receipt", "token", {"k": 1})


@FAST
@given(TOKENS)
def test_identity_alignment_maps_every_span_to_itself(a):
    m = align(a, a)
    assert m.exact and m.inserts == () and m.deletes == ()
    assert m.aligned_pairs == tuple((i, i) for i in range(len(a)))
    for i in range(len(a)):
        for j in range(i + 1, len(a) + 1):
            assert m.map_span(Span(i, j, unit="token")) == Span(i, j, unit="token")


@FAST
@given(TOKENS, TOKENS)
def test_aligned_pairs_are_monotone_and_match(a, b):
    m = align(a, b)
    pairs = m.aligned_pairs
    assert all(a[i] == b[j] for i, j in pairs)
    assert all(i1 < i2 and j1 < j2 for (i1, j1), (i2, j2) in zip(pairs, pairs[1:]))


@FAST
@given(TOKENS, TOKENS)
def test_every_token_is_accounted_for_once(a, b):
    m = align(a, b)
    replaced_a = [i for o in m.opcodes if o.tag == "replace" for i in range(o.i1, o.i2)]
    replaced_b = [j for o in m.opcodes if o.tag == "replace" for j in range(o.j1, o.j2)]
    a_side = sorted([i for i, _ in m.aligned_pairs] + list(m.deletes) + replaced_a)
    b_side = sorted([j for _, j in m.aligned_pairs] + list(m.inserts) + replaced_b)
    assert a_side == list(range(len(a))) and b_side == list(range(len(b)))
    assert m.exact == (not replaced_a and not replaced_b)


@FAST
@given(tokens_and_span(), TOKENS)
def test_mapped_span_is_in_bounds_and_keeps_kind(a_span, b):
    a, span = a_span
    m = align(a, b)
    out = m.map_span(span)
    if out is None:
        # nothing of the span survives: all its tokens were deleted
        covered = set(range(span.start, span.end))
        assert covered <= set(m.deletes)
        assert not any(i in covered for i, _ in m.aligned_pairs)
    else:
        assert 0 <= out.start < out.end <= len(b)
        assert out.kind == "receipt" and out.meta["k"] == 1
        # every exact image of a covered token lies inside the mapped span
        for i, j in m.aligned_pairs:
            if span.start <= i < span.end:
                assert out.start <= j < out.end
        strict = m.map_span(span, strict=True)
        if "alignment" not in out.meta:
            assert strict == out


@FAST
@given(tokens_and_span(), TOKENS, TOKENS)
def test_pure_insertions_keep_spans_exact(a_span, pre, post):
    a, span = a_span
    b = pre + a + post
    m = align(a, b)
    out = m.map_span(span, strict=True)
    assert out is not None and b[out.start:out.end] == a[span.start:span.end]


@FAST
@given(st.text(max_size=60))
def test_default_tokens_tile_the_text(text):
    t = tokenize(text)
    assert "".join(t.tokens) == text
    assert all(text[s:e] == tok for tok, (s, e) in zip(t.tokens, t.offsets))


def test_char_span_carried_across_an_edit_and_deleted_span_is_none():
    a = "Total: 12 dollars, see receipt #7."
    b = "Total: 12 dollars."
    m = align(a, b)
    s = m.map_char_span(Span(7, 9, "amount"))
    assert b[s.start:s.end] == "12" and "alignment" not in s.meta
    assert m.map_char_span(Span(23, 33, "receipt")) is None
    assert m.map_span(Span(2, 2, unit="token")) is None


def test_replaced_block_is_inferred_or_refused_when_strict():
    m = align("pay 12 now", "pay 13 now")
    assert not m.exact
    i, j = m.a.char_to_tokens(4, 6)
    out = m.map_span(Span(i, j, "amount", "token"))
    assert out.meta["alignment"] == "inferred" and m.b.tokens[out.start] == "13"
    assert m.map_span(Span(i, j, "amount", "token"), strict=True) is None


def test_custom_tokenizer_and_errors():
    def by_char(text):
        return [(c, k, k + 1) for k, c in enumerate(text)]

    m = align("abc", "abxc", tokenizer=by_char)
    assert m.inserts == (2,) and m.exact
    with pytest.raises(DataError, match="triples"):
        align("ab", "ab", tokenizer=lambda t: ["a"])
    with pytest.raises(DataError, match="outside the text"):
        align("ab", "ab", tokenizer=lambda t: [("a", 0, 9)])
    with pytest.raises(DataError, match="token spans"):
        align("a", "a").map_span(Span(0, 1))
    with pytest.raises(DataError, match="a has 1 tokens"):
        align("a", "a").map_span(Span(0, 3, unit="token"))
    with pytest.raises(DataError, match="must be a string"):
        align(3, "a")
