"""Token alignment between two texts (``align`` -> ``SpanMap``) to carry typed spans across edits.

Exact correspondences come from equal blocks; replaced blocks give inferred (block-level) images.

Example:
    >>> m = align("The receipt says 12 dollars.", "The receipt clearly says 12 dollars.")
    >>> m.exact, m.inserts
    (True, (3, 4))
    >>> s = m.map_char_span(Span(17, 19, "receipt"))      # "12" in a
    >>> "The receipt clearly says 12 dollars."[s.start:s.end]
    '12'
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from assay.data.items import Span
from assay.errors import DataError

# Words, single punctuation marks and whitespace runs: the tokens tile the text exactly.
_TOKEN_RE = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True, slots=True)
class TokenizedInput:
    """A text and its tokens with character offsets (``offsets[i] = (start, end)``)."""

    text: str
    tokens: tuple[str, ...]
    offsets: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.tokens)

    def char_to_tokens(self, start: int, end: int) -> tuple[int, int]:
        """Token interval ``[i, j)`` of the tokens overlapping chars ``[start, end)``."""
        idx = [k for k, (s, e) in enumerate(self.offsets) if s < end and e > start]
        if not idx:
            return (0, 0)
        return (idx[0], idx[-1] + 1)


@dataclass(frozen=True, slots=True)
class Opcode:
    """One difflib opcode: ``tag`` in equal/replace/insert/delete over ``a[i1:i2]``,
    ``b[j1:j2]``."""

    tag: str
    i1: int
    i2: int
    j1: int
    j2: int


def tokenize(text: str, tokenizer: Callable[[str], Any] | None = None) -> TokenizedInput:
    """Tokenize ``text`` with offsets.

    ``tokenizer`` is None (words, punctuation and whitespace runs, tiling the text), a callable
    returning ``(token, start, end)`` triples, or a Hugging Face fast tokenizer (offsets from
    ``return_offsets_mapping``).

    Example:
        >>> tokenize("Hi, you").tokens
        ('Hi', ',', ' ', 'you')
    """
    if not isinstance(text, str):
        raise DataError(f"align: texts must be strings, got {type(text).__name__}")
    if tokenizer is None:
        ms = list(_TOKEN_RE.finditer(text))
        return TokenizedInput(text, tuple(m.group() for m in ms), tuple(m.span() for m in ms))
    if hasattr(tokenizer, "backend_tokenizer"):  # HF fast tokenizer
        hf: Any = tokenizer  # a Hugging Face tokenizer takes keywords a plain callable does not
        enc = hf(text, add_special_tokens=False, return_offsets_mapping=True)
        offs = tuple((int(s), int(e)) for s, e in enc["offset_mapping"])
        toks = tuple(str(t) for t in enc["input_ids"])
        return TokenizedInput(text, toks, offs)
    triples = list(tokenizer(text))
    tok_list: list[str] = []
    off_list: list[tuple[int, int]] = []
    for k, tr in enumerate(triples):
        try:
            tok, s, e = tr
        except (TypeError, ValueError):
            raise DataError(
                f"align: tokenizer output {k} is {tr!r}; a tokenizer callable must return "
                "(token, start, end) triples"
            ) from None
        if not (isinstance(s, int) and isinstance(e, int) and 0 <= s <= e <= len(text)):
            raise DataError(f"align: tokenizer offsets {k} ({s}, {e}) are outside the text")
        tok_list.append(str(tok))
        off_list.append((s, e))
    return TokenizedInput(text, tuple(tok_list), tuple(off_list))


def _as_input(x: object, tokenizer: Callable[[str], Any] | None, name: str) -> TokenizedInput:
    if isinstance(x, TokenizedInput):
        return x
    if isinstance(x, str):
        return tokenize(x, tokenizer)
    if isinstance(x, Sequence) and all(isinstance(t, str) for t in x):
        # A pre-tokenized sequence: offsets are token positions joined without separators.
        offs, pos = [], 0
        for t in x:
            offs.append((pos, pos + len(t)))
            pos += len(t)
        return TokenizedInput("".join(x), tuple(x), tuple(offs))
    raise DataError(f"align: {name} must be a string or a sequence of token strings")


@dataclass(frozen=True, slots=True)
class SpanMap:
    """A token alignment from ``a`` to ``b`` (built by :func:`align`).

    ``exact`` is True when every token of ``a`` either has an identical counterpart in ``b``
    or was deleted (no replaced blocks); otherwise spans touching a replaced block map to the
    whole replacement (an *inferred* image, flagged in the mapped span's meta).
    """

    a: TokenizedInput
    b: TokenizedInput
    opcodes: tuple[Opcode, ...]
    exact: bool

    @property
    def aligned_pairs(self) -> tuple[tuple[int, int], ...]:
        """Every ``(a_index, b_index)`` of exactly corresponding tokens (equal blocks)."""
        return tuple((o.i1 + k, o.j1 + k) for o in self.opcodes if o.tag == "equal"
                     for k in range(o.i2 - o.i1))

    @property
    def inserts(self) -> tuple[int, ...]:
        """Token indices of ``b`` with no counterpart in ``a`` (insert blocks)."""
        return tuple(j for o in self.opcodes if o.tag == "insert" for j in range(o.j1, o.j2))

    @property
    def deletes(self) -> tuple[int, ...]:
        """Token indices of ``a`` with no counterpart in ``b`` (delete blocks)."""
        return tuple(i for o in self.opcodes if o.tag == "delete" for i in range(o.i1, o.i2))

    def map_span(self, span: Span, *, strict: bool = False) -> Span | None:
        """Carry a token span of ``a`` to the tightest token span of ``b`` covering its image.

        Equal blocks map token by token; a token in a replaced block maps to the whole
        replacement block (inferred: the result's meta gets ``{"alignment": "inferred"}``,
        or None is returned when ``strict``). Deleted tokens have no image; a span whose
        tokens are all deleted, or a zero-width span, maps to None. Kind and meta are kept.
        """
        if not isinstance(span, Span):
            raise DataError(f"map_span needs a Span, got {type(span).__name__}")
        if span.unit != "token":
            raise DataError("map_span takes token spans; use map_char_span for char spans")
        if span.end > len(self.a):
            raise DataError(f"span ends at token {span.end} but a has {len(self.a)} tokens")
        if span.start == span.end:
            return None
        lo = hi = None
        inferred = False
        for o in self.opcodes:
            s, e = max(span.start, o.i1), min(span.end, o.i2)
            if s >= e or o.tag in ("delete", "insert"):
                continue
            if o.tag == "equal":
                js, je = o.j1 + (s - o.i1), o.j1 + (e - o.i1)
            else:
                if strict:
                    return None
                inferred = True
                js, je = o.j1, o.j2
            lo = js if lo is None else min(lo, js)
            hi = je if hi is None else max(hi, je)
        if lo is None or hi is None:
            return None
        meta = dict(span.meta)
        if inferred:
            meta["alignment"] = "inferred"
        return Span(lo, hi, span.kind, "token", meta)

    def map_char_span(self, span: Span, *, strict: bool = False) -> Span | None:
        """Carry a character span of ``a.text`` to a character span of ``b.text``."""
        if span.unit != "char":
            raise DataError("map_char_span takes char spans; use map_span for token spans")
        if span.end > len(self.a.text):
            raise DataError(f"span ends at char {span.end} but a has {len(self.a.text)} chars")
        i, j = self.a.char_to_tokens(span.start, span.end)
        tok = self.map_span(Span(i, j, span.kind, "token", span.meta), strict=strict)
        if tok is None:
            return None
        return Span(self.b.offsets[tok.start][0], self.b.offsets[tok.end - 1][1], span.kind,
                    "char", tok.meta)


def align(a: str | Sequence[str] | TokenizedInput, b: str | Sequence[str] | TokenizedInput, *,
          tokenizer: Callable[[str], Any] | None = None) -> SpanMap:
    """Align two texts (or token sequences) token by token with ``difflib.SequenceMatcher``
    (no autojunk heuristic, so long texts with repeated tokens align deterministically).

    Example:
        >>> m = align(["a", "b", "c"], ["a", "x", "c"])
        >>> m.aligned_pairs, m.exact, m.map_span(Span(1, 2, unit="token")).meta["alignment"]
        (((0, 0), (2, 2)), False, 'inferred')
    """
    ta, tb = _as_input(a, tokenizer, "a"), _as_input(b, tokenizer, "b")
    sm = difflib.SequenceMatcher(None, ta.tokens, tb.tokens, autojunk=False)
    ops = tuple(Opcode(*o) for o in sm.get_opcodes())
    return SpanMap(ta, tb, ops, all(o.tag != "replace" for o in ops))
