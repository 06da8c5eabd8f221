"""Typed, immutable preference items: Response, Prompt, Pair, Quadruple, Tournament, Trajectory.

Every item validates itself at construction; its content hash is computed once, on first use.

Payload vs record: an item's *payload* (``__assay_content__()``) is what is scored: prompt and
response texts with their spans and meta, the axis / factors / edges. Its ``content_hash``
(``ch:``) is the hash of the payload and is what clone detection groups on. The item's *record*
adds the lineage (seed, builder, ops) and the item-level ``meta``; a view's checksum hashes the
records, so a changed seed id or meta changes the dataset id too.

Example:
    >>> p = make_pair("What is 2+2?", "4", "5", "correctness", seed_id="s-1", builder_id="hand")
    >>> p.prompt_text, p.chosen.text, p.seed_id, p.content_hash[:3]
    ('What is 2+2?', '4', 's-1', 'ch:')
    >>> from assay.hashing import content_hash
    >>> p.content_hash == content_hash(p.__assay_content__(), "ch")
    True
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Self, TypeAlias, cast

from assay.data.lineage import Lineage
from assay.errors import DataError, HashError
from assay.hashing import DIGEST_HEX, HASH_SCHEMA, canonicalize

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

EMPTY_META: Mapping[str, object] = MappingProxyType({})
SPAN_UNITS = ("char", "token")

# the C string encoder json.dumps(ensure_ascii=False) uses
_enc_str = json.encoder.encode_basestring
_dumps = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
).encode


_is_normalized = unicodedata.is_normalized


def _is_nfc(s: str) -> bool:
    return _is_normalized("NFC", s)


def _nfc(s: str) -> str:
    return s if _is_normalized("NFC", s) else unicodedata.normalize("NFC", s)


# The state of ``digest_bytes(..., "ch")`` after its fixed prefix; copying it skips re-hashing it.
_CH_STATE = hashlib.sha256(f"assay-hash-v{HASH_SCHEMA}\x00ch\x00".encode())


def _ch_json(text: str) -> str:
    """``digest_bytes(text.encode(), "ch")`` (same bytes, same id), a little faster."""
    h = _CH_STATE.copy()
    h.update(text.encode("utf-8"))
    return "ch:" + h.hexdigest()[:DIGEST_HEX]


def _ch(payload: object) -> str:
    # ``payload`` is already canonical (NFC strings, plain lists/dicts, finite numbers), so the C
    # encoder produces exactly assay.hashing.canonical_json's bytes without the Python walk.
    return _ch_json(_dumps(payload))


def freeze(value: object, where: str) -> object:
    """A deep read-only copy of JSON-like ``value``: mappings become MappingProxyType, lists tuples.

    Numbers must be finite; numpy scalars become Python numbers; anything else is a DataError
    naming ``where``.

    Example:
        >>> m = freeze({"a": [1, 2]}, "meta")
        >>> m["a"], type(m).__name__
        ((1, 2), 'mappingproxy')
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DataError(f"{where} is {value!r}: NaN and infinities are not data; use None")
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise DataError(f"{where} has a non-string key {k!r}; keys must be strings")
            out[k] = freeze(v, f"{where}.{k}")
        return MappingProxyType(out)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v, f"{where}[{i}]") for i, v in enumerate(value))
    if type(value).__module__ == "numpy":
        try:
            return freeze(canonicalize(value), where)
        except HashError as e:
            raise DataError(f"{where}: {e}") from None
    raise DataError(
        f"{where} has a value of type {type(value).__name__}; item meta must be JSON-like "
        "(None, bool, int, finite float, str, lists, string-keyed mappings)"
    )


def _meta(value: object, where: str) -> Mapping[str, object]:
    if value is None or (isinstance(value, Mapping) and not value):
        return EMPTY_META
    if not isinstance(value, Mapping):
        raise DataError(f"{where} must be a mapping (or None), got {type(value).__name__}")
    # a Mapping freezes to a MappingProxyType (the isinstance check above)
    return cast("Mapping[str, object]", freeze(value, where))


def thaw(value: object) -> object:
    """Plain (mutable, JSON-ready) copy of a frozen value: mappings to dict, tuples to list."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def _unproxy(value: object) -> object:
    # MappingProxyType cannot be pickled; constructors re-freeze what this hands them.
    if isinstance(value, MappingProxyType):
        return {k: _unproxy(v) for k, v in value.items()}
    if type(value) is tuple:
        return tuple(_unproxy(v) for v in value)
    return value


def _reduce_dataclass(obj: DataclassInstance) -> tuple[object, ...]:
    return (type(obj), tuple(_unproxy(getattr(obj, f.name)) for f in fields(obj)))


def _text(value: object, where: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise DataError(
            f"{where} must be a string, got {type(value).__name__} ({value!r:.60}); "
            "convert it yourself (None is not the text 'None')"
        )
    if not allow_empty and not value.strip():
        raise DataError(f"{where} is empty or whitespace; every text must have content")
    return value


# ------------------------------------------------------------------------------------ spans


@dataclass(frozen=True, slots=True)
class Span:
    """A typed interval ``[start, end)`` of a text, in characters or tokens (``unit``).

    ``kind`` names what the span is ("receipt", "narrative", "step", "error", ...).

    Example:
        >>> Span(0, 4, "receipt").end
        4
    """

    start: int
    end: int
    kind: str = "span"
    unit: str = "char"
    meta: Mapping[str, object] = field(default_factory=lambda: EMPTY_META)

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise DataError(f"Span.{name} must be a non-negative int, got {v!r}")
        if self.end < self.start:
            raise DataError(f"Span end {self.end} is before start {self.start}")
        if not isinstance(self.kind, str) or not self.kind:
            raise DataError(f"Span.kind must be a non-empty string, got {self.kind!r}")
        if self.unit not in SPAN_UNITS:
            raise DataError(f"Span.unit must be one of {SPAN_UNITS}, got {self.unit!r}")
        if self.meta is not EMPTY_META:
            object.__setattr__(self, "meta", _meta(self.meta, "Span.meta"))

    def __len__(self) -> int:
        return self.end - self.start

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce_dataclass(self)

    def __hash__(self) -> int:
        return hash((self.start, self.end, self.kind, self.unit, tuple(self.meta.items())))

    def __assay_content__(self) -> list[object]:
        out: list[object] = [self.start, self.end, _nfc(self.kind), self.unit]
        if self.meta:
            out.append(canonicalize(self.meta))
        return out

    def to_dict(self) -> dict[str, object]:
        return {"start": self.start, "end": self.end, "kind": self.kind, "unit": self.unit,
                "meta": thaw(self.meta)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Span:
        return cls(d["start"], d["end"], d.get("kind", "span"), d.get("unit", "char"),
                   d.get("meta") or EMPTY_META)


def _spans(value: object, text: str, where: str) -> tuple[Span, ...]:
    if value is None or value == ():
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise DataError(f"{where} must be a sequence of Span, got {type(value).__name__}")
    out = []
    for i, s in enumerate(value):
        if isinstance(s, Mapping):
            s = Span.from_dict(s)
        if not isinstance(s, Span):
            raise DataError(f"{where}[{i}] must be a Span, got {type(s).__name__}")
        if s.unit == "char" and s.end > len(text):
            raise DataError(
                f"{where}[{i}] ends at char {s.end} but the text has {len(text)} chars"
            )
        out.append(s)
    return tuple(out)


# ---------------------------------------------------------------------- prompt and response


@dataclass(frozen=True, slots=True)
class Response:
    """A response text with its typed spans and read-only meta.

    Example:
        >>> r = Response("See receipt #12.", spans=(Span(4, 15, "receipt"),))
        >>> r.span_text(r.spans[0])
        'receipt #12'
    """

    text: str
    spans: tuple[Span, ...] = ()
    meta: Mapping[str, object] = field(default_factory=lambda: EMPTY_META)

    def __post_init__(self) -> None:
        _text(self.text, "Response.text")
        if self.spans:
            object.__setattr__(self, "spans", _spans(self.spans, self.text, "Response.spans"))
        if self.meta is not EMPTY_META:
            object.__setattr__(self, "meta", _meta(self.meta, "Response.meta"))

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce_dataclass(self)

    def __hash__(self) -> int:
        return hash((self.text, self.spans))

    def span_text(self, span: Span) -> str:
        """The characters a char-unit span covers."""
        if span.unit != "char":
            raise DataError("span_text reads char spans; map token spans with a SpanMap first")
        return self.text[span.start : span.end]

    def __assay_content__(self) -> object:
        # A plain response hashes as its text, so Response("x") and "x" are the same payload.
        if not self.spans and not self.meta:
            return _nfc(self.text)
        return {
            "text": _nfc(self.text),
            "spans": [s.__assay_content__() for s in self.spans],
            "meta": canonicalize(self.meta),
        }

    def to_dict(self) -> dict[str, object]:
        return {"text": self.text, "spans": [s.to_dict() for s in self.spans],
                "meta": thaw(self.meta)}

    @classmethod
    def from_dict(cls, d: Any) -> Response:
        if isinstance(d, str):
            return cls(d)
        return cls(d["text"], tuple(Span.from_dict(s) for s in d.get("spans") or ()),
                   d.get("meta") or EMPTY_META)


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt text with optional typed spans and meta (a plain ``str`` works wherever a
    Prompt does and hashes the same when there are no spans or meta).

    Example:
        >>> str(Prompt("Hi"))
        'Hi'
    """

    text: str
    spans: tuple[Span, ...] = ()
    meta: Mapping[str, object] = field(default_factory=lambda: EMPTY_META)

    def __post_init__(self) -> None:
        _text(self.text, "Prompt.text")
        if self.spans:
            object.__setattr__(self, "spans", _spans(self.spans, self.text, "Prompt.spans"))
        if self.meta is not EMPTY_META:
            object.__setattr__(self, "meta", _meta(self.meta, "Prompt.meta"))

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce_dataclass(self)

    def __hash__(self) -> int:
        return hash((self.text, self.spans))

    def __assay_content__(self) -> object:
        if not self.spans and not self.meta:
            return _nfc(self.text)
        return {
            "text": _nfc(self.text),
            "spans": [s.__assay_content__() for s in self.spans],
            "meta": canonicalize(self.meta),
        }

    def to_dict(self) -> dict[str, object]:
        return {"text": self.text, "spans": [s.to_dict() for s in self.spans],
                "meta": thaw(self.meta)}

    @classmethod
    def from_dict(cls, d: Any) -> Prompt | str:
        if isinstance(d, str):
            return d
        return cls(d["text"], tuple(Span.from_dict(s) for s in d.get("spans") or ()),
                   d.get("meta") or EMPTY_META)


def _prompt(value: object, who: str, *, allow_empty: bool = False) -> str | Prompt:
    if isinstance(value, Prompt):
        return value
    return _text(value, f"{who}: prompt", allow_empty=allow_empty)


def _prompt_text(p: str | Prompt) -> str:
    return p if isinstance(p, str) else p.text


def _prompt_content(p: str | Prompt) -> object:
    return _nfc(p) if isinstance(p, str) else p.__assay_content__()


def _response(value: object, who: str, name: str) -> Response:
    if isinstance(value, Response):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise DataError(f"{who}: {name}.text is empty or whitespace; every text must have "
                            "content")
        return Response(value)
    raise DataError(
        f"{who}: {name} must be a Response or a string, got {type(value).__name__} ({value!r:.60})"
    )


_set = object.__setattr__


def _mk_lineage(seed_id: str, builder_id: str, ops: tuple[str, ...], ch: str | None) -> Lineage:
    # Parts already validated (they came from a Lineage or the make_pair checks).
    lin = object.__new__(Lineage)
    _set(lin, "seed_id", seed_id)
    _set(lin, "builder_id", builder_id)
    _set(lin, "ops", ops)
    _set(lin, "content_hash", ch)
    return lin


def _plain_response(text: str) -> Response:
    r = object.__new__(Response)
    _set(r, "text", text)
    _set(r, "spans", ())
    _set(r, "meta", EMPTY_META)
    return r


def _check_lineage(value: object, kind: str) -> Lineage:
    if type(value) is not Lineage:
        raise DataError(
            f"{kind}.lineage must be a Lineage, got {type(value).__name__}; "
            f"build items with make_pair(...) or pass Lineage(seed_id=...)"
        )
    return value


class _Item:
    """Base of the item types: immutability, lazy content hash, equality, records, copies.

    The lineage is held as its parts; the ``ch:`` content hash is computed on first use of
    ``lineage`` / ``content_hash`` (a pure function of the immutable payload, so caching it is
    not a mutation). A lineage given with a content hash is verified at construction.
    """

    __slots__ = ("_seed", "_builder", "_ops", "_ch")
    kind = ""
    _fields: tuple[str, ...] = ()
    _seed: str
    _builder: str
    _ops: tuple[str, ...]
    _ch: str | None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"{type(self).__name__} is immutable; make a changed copy with .replace(...) "
            "or a mutated one with .derive(op, ...)"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init_lineage(self, lineage: Lineage, who: str) -> None:
        _set(self, "_seed", lineage.seed_id)
        _set(self, "_builder", lineage.builder_id)
        _set(self, "_ops", lineage.ops)
        _set(self, "_ch", None)
        if lineage.content_hash is not None:
            ch = _ch(self.__assay_content__())
            if ch != lineage.content_hash:
                raise DataError(
                    f"{who}: lineage.content_hash {lineage.content_hash} does not match the "
                    f"item's content ({ch}); leave it None to have it stamped, or derive mutated "
                    "items with item.derive(op, ...)"
                )
            _set(self, "_ch", ch)

    @property
    def lineage(self) -> Lineage:
        """Seed, builder, ops and the content hash of this item."""
        return _mk_lineage(self._seed, self._builder, self._ops, self.content_hash)

    @property
    def seed_id(self) -> str:
        return self._seed

    @property
    def content_hash(self) -> str:
        """The ``ch:`` id of the payload (also ``lineage.content_hash``), computed once."""
        ch = self._ch
        if ch is None:
            ch = _ch(self.__assay_content__())
            _set(self, "_ch", ch)
        return ch

    @property
    def prompt_text(self) -> str:
        return _prompt_text(self.prompt)  # type: ignore[attr-defined]  # each item type has one

    def __assay_content__(self) -> object:  # pragma: no cover - each type overrides
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        # the isinstance check cannot fail once the types are equal; it narrows for mypy
        if type(other) is not type(self) or not isinstance(other, _Item):
            return NotImplemented
        o = other
        if (self._seed, self._builder, self._ops) != (o._seed, o._builder, o._ops):
            return False
        return all(getattr(self, f) == getattr(other, f) for f in self._fields if f != "lineage")

    def __hash__(self) -> int:
        return hash((self.kind, self._seed, self._ops, self.prompt_text))

    def __repr__(self) -> str:
        body = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({body})"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), tuple(_unproxy(getattr(self, f)) for f in self._fields))

    def replace(self, **changes: object) -> Self:
        """A copy with ``changes``; the lineage keeps seed/builder/ops and the hash is redone.

        Example:
            >>> p = make_pair("Q", "yes", "no", "x", seed_id="s", builder_id="b")
            >>> p.replace(axis="y").axis
            'y'
        """
        bad = [k for k in changes if k not in self._fields]
        if bad:
            raise DataError(f"{type(self).__name__}.replace: unknown fields {bad}; "
                            f"fields are {list(self._fields)}")
        kw = {f: getattr(self, f) for f in self._fields if f != "lineage"}
        kw["lineage"] = _mk_lineage(self._seed, self._builder, self._ops, None)
        kw.update(changes)
        return type(self)(**kw)

    def derive(self, op: str, **changes: object) -> Self:
        """A mutated copy: ``changes`` applied, ``op`` appended to the lineage, hash re-stamped.

        The seed id is kept, so the mutation does not add an independent unit.

        Example:
            >>> p = make_pair("Q", "yes", "no", "x", seed_id="s", builder_id="b")
            >>> q = p.derive("swap", chosen="no", rejected="yes")
            >>> q.seed_id, q.lineage.ops, q.content_hash != p.content_hash
            ('s', ('swap',), True)
        """
        if not isinstance(op, str) or not op:
            raise DataError(f"derive: op must be a non-empty string (seed {self._seed!r})")
        return self.replace(lineage=Lineage(self._seed, self._builder, (*self._ops, op), None),
                            **changes)

    def __assay_record__(self) -> list[object]:
        """Canonical record (payload, seed, builder, ops, meta): what a view checksum hashes."""
        meta = self.meta  # type: ignore[attr-defined]  # each item type has meta
        return [self.__assay_content__(), _nfc(self._seed), _nfc(self._builder),
                [_nfc(o) for o in self._ops], canonicalize(meta) if meta else {}]

    def __assay_record_json__(self) -> str:
        """Canonical JSON text of ``__assay_record__()``."""
        return _dumps(self.__assay_record__())

    def to_dict(self) -> dict[str, object]:
        """JSON-ready record of the item (inverse: :func:`item_from_dict`)."""
        d = self._payload_dict()
        d["kind"] = self.kind
        d["lineage"] = self.lineage.to_dict()
        d["meta"] = thaw(self.meta)  # type: ignore[attr-defined]  # each item type has meta
        return d

    def _payload_dict(self) -> dict[str, object]:  # pragma: no cover - each type overrides
        raise NotImplementedError


def _who(kind: str, lineage: Lineage) -> str:
    return f"{kind}(seed_id={lineage.seed_id!r})"


# -------------------------------------------------------------------------------- Pair


class Pair(_Item):
    """A chosen and a rejected response to one prompt, differing along ``axis`` by construction.

    Validated at construction: non-empty string texts, ``chosen`` differs from ``rejected``
    (after Unicode NFC), a non-empty ``axis``, a lineage with a seed id. ``chosen`` and
    ``rejected`` read as :class:`Response` (strings are accepted); ``meta`` is frozen read-only.

    Example:
        >>> p = Pair("Q?", "good", "bad", "helpfulness", Lineage("s-1"))
        >>> p.chosen.text, p.axis, p.lineage.content_hash[:3]
        ('good', 'helpfulness', 'ch:')
    """

    # Plain responses are kept as their str (one object per pair instead of three: a 100k-pair
    # view builds faster and is lighter for the garbage collector); ``chosen`` wraps on read.
    __slots__ = ("prompt", "_c", "_r", "axis", "meta")
    kind = "pair"
    _fields = ("prompt", "chosen", "rejected", "axis", "lineage", "meta")
    prompt: str | Prompt
    _c: str | Response
    _r: str | Response
    axis: str
    meta: Mapping[str, object]

    def __init__(self, prompt: str | Prompt, chosen: str | Response, rejected: str | Response,
                 axis: str, lineage: Lineage, meta: Mapping[str, object] | None = None) -> None:
        _check_lineage(lineage, "Pair")
        _init_pair(self, prompt, chosen, rejected, axis, lineage.seed_id, lineage.builder_id,
                   lineage.ops, meta)
        if lineage.content_hash is not None:
            self._init_lineage(lineage, _who("Pair", lineage))

    @property
    def content_hash(self) -> str:
        ch = self._ch
        if ch is None:
            p, c, r, a = self.prompt, self._c, self._r, self.axis
            if (type(p) is str and type(c) is str and type(r) is str and _is_normalized("NFC", p)
                    and _is_normalized("NFC", c) and _is_normalized("NFC", r)
                    and _is_normalized("NFC", a)):
                e = _enc_str
                ch = _ch_json(f'["pair",{e(p)},{e(c)},{e(r)},{e(a)}]')
            else:
                ch = _ch(self.__assay_content__())
            _set(self, "_ch", ch)
        return ch

    @property
    def chosen(self) -> Response:
        c = self._c
        return _plain_response(c) if type(c) is str else cast(Response, c)

    @property
    def rejected(self) -> Response:
        r = self._r
        return _plain_response(r) if type(r) is str else cast(Response, r)

    def __assay_content__(self) -> list[object]:
        # each is a plain str or else its item type (``type() is`` does not narrow for mypy)
        p, c, r = self.prompt, self._c, self._r
        return ["pair", _nfc(p) if type(p) is str else cast(Prompt, p).__assay_content__(),
                _nfc(c) if type(c) is str else cast(Response, c).__assay_content__(),
                _nfc(r) if type(r) is str else cast(Response, r).__assay_content__(),
                _nfc(self.axis)]

    def __assay_record_json__(self) -> str:
        p, c, r = self.prompt, self._c, self._r
        # Fast path for the common plain pair: the canonical JSON of the record written with the
        # json module's own C string encoder, no intermediate lists (byte-identical; tested).
        if (type(p) is str and type(c) is str and type(r) is str and not self._ops
                and not self.meta and _is_normalized("NFC", p) and _is_normalized("NFC", c)
                and _is_normalized("NFC", r) and _is_normalized("NFC", self.axis)
                and _is_normalized("NFC", self._seed) and _is_normalized("NFC", self._builder)):
            e = _enc_str
            return (f'[["pair",{e(p)},{e(c)},{e(r)},{e(self.axis)}],{e(self._seed)},'
                    f'{e(self._builder)},[],{{}}]')
        return _dumps(self.__assay_record__())

    def __assay_record__(self) -> list[object]:
        p, c, r = self.prompt, self._c, self._r
        # Fast path for the common plain pair; same canonical record as the general path.
        if (type(p) is str and type(c) is str and type(r) is str and not self._ops
                and not self.meta and _is_normalized("NFC", p) and _is_normalized("NFC", c)
                and _is_normalized("NFC", r) and _is_normalized("NFC", self.axis)
                and _is_normalized("NFC", self._seed) and _is_normalized("NFC", self._builder)):
            return [["pair", p, c, r, self.axis], self._seed, self._builder, [], {}]
        return _Item.__assay_record__(self)

    def _payload_dict(self) -> dict[str, object]:
        p = self.prompt
        return {"prompt": p if isinstance(p, str) else p.to_dict(), "axis": self.axis,
                "chosen": self.chosen.to_dict(), "rejected": self.rejected.to_dict()}


def _init_pair(self: Pair, prompt: object, chosen: object, rejected: object, axis: object,
               seed: str, builder: str, ops: tuple[str, ...], meta: object) -> None:
    if type(prompt) is str:
        if not prompt or prompt.isspace():
            raise DataError(f"Pair(seed_id={seed!r}): prompt is empty or whitespace; "
                            "every text must have content")
    else:
        _prompt(prompt, f"Pair(seed_id={seed!r})")
    if type(chosen) is str and chosen and not chosen.isspace():
        ct = chosen
    else:
        chosen = _response(chosen, f"Pair(seed_id={seed!r})", "chosen")
        ct = chosen.text
        if not chosen.spans and not chosen.meta:
            chosen = ct
    if type(rejected) is str and rejected and not rejected.isspace():
        rt = rejected
    else:
        rejected = _response(rejected, f"Pair(seed_id={seed!r})", "rejected")
        rt = rejected.text
        if not rejected.spans and not rejected.meta:
            rejected = rt
    if ct == rt or (not (_is_normalized("NFC", ct) and _is_normalized("NFC", rt))
                    and _nfc(ct) == _nfc(rt)):
        raise DataError(
            f"Pair(seed_id={seed!r}): chosen and rejected have the same text; a pair must "
            "differ (check the builder for a copy bug)"
        )
    if type(axis) is not str or not axis or axis.isspace():
        raise DataError(f"Pair(seed_id={seed!r}): axis must be a non-empty string, got {axis!r}")
    if meta is None or meta is EMPTY_META:
        meta = EMPTY_META
    else:
        meta = _meta(meta, f"Pair(seed_id={seed!r}): meta")
    _set(self, "prompt", prompt)
    _set(self, "_c", chosen)
    _set(self, "_r", rejected)
    _set(self, "axis", axis)
    _set(self, "meta", meta)
    _set(self, "_seed", seed)
    _set(self, "_builder", builder)
    _set(self, "_ops", ops)
    _set(self, "_ch", None)


def make_pair(
    prompt: str | Prompt,
    chosen: str | Response,
    rejected: str | Response,
    axis: str,
    *,
    seed_id: str,
    builder_id: str,
    ops: Sequence[str] = (),
    meta: Mapping[str, object] | None = None,
) -> Pair:
    """Build a :class:`Pair` with its lineage (content hash computed on first use).

    Example:
        >>> make_pair("Q", "a", "b", "x", seed_id="s-1", builder_id="hand").lineage.builder_id
        'hand'
    """
    if not (type(seed_id) is str and type(builder_id) is str and seed_id and builder_id
            and not seed_id.isspace() and ops == ()):
        # Lineage checks ops itself (another kind of sequence is refused there)
        lin = Lineage(seed_id, builder_id,
                      tuple(ops) if isinstance(ops, list) else cast("tuple[str, ...]", ops), None)
        seed_id, builder_id, ops = lin.seed_id, lin.builder_id, lin.ops
    self = object.__new__(Pair)
    # ops is a tuple here: Lineage's, or one equal to ()
    _init_pair(self, prompt, chosen, rejected, axis, seed_id, builder_id,
               cast("tuple[str, ...]", ops), meta)
    return self


def make_pairs(
    prompts: Sequence[str | Prompt],
    chosen: Sequence[str | Response],
    rejected: Sequence[str | Response],
    axis: str | Sequence[str],
    *,
    seed_ids: Sequence[str],
    builder_id: str,
) -> list[Pair]:
    """Build many pairs from columns (same validation as :func:`make_pair`, errors name the
    item index). The bulk path for large datasets: one tight loop, no per-call overhead.

    Example:
        >>> ps = make_pairs(["Q1", "Q2"], ["a", "c"], ["b", "d"], "x", seed_ids=["s1", "s2"],
        ...                 builder_id="h")
        >>> [p.seed_id for p in ps]
        ['s1', 's2']
    """
    n = len(prompts)
    axes = [axis] * n if isinstance(axis, str) else axis
    for name, col in (("chosen", chosen), ("rejected", rejected), ("seed_ids", seed_ids),
                      ("axis", axes)):
        if len(col) != n:
            raise DataError(f"make_pairs: {name} has {len(col)} entries for {n} prompts")
    Lineage("x", builder_id)  # validates builder_id once
    new = object.__new__
    out: list[Pair] = []
    append = out.append
    for i, (p, c, r, a, sid) in enumerate(zip(prompts, chosen, rejected, axes, seed_ids)):
        if not (type(sid) is str and sid and not sid.isspace()):
            raise DataError(f"make_pairs item {i}: seed_ids[{i}] must be a non-empty string, "
                            f"got {sid!r}")
        it = new(Pair)
        try:
            _init_pair(it, p, c, r, a, sid, builder_id, (), None)
        except DataError as e:
            raise DataError(f"make_pairs item {i}: {e}") from None
        append(it)
    return out


# --------------------------------------------------------------------------- Quadruple


def _cell_key(k: object, who: str) -> tuple[str, str]:
    if isinstance(k, str) and k.count("|") == 1:
        k = tuple(k.split("|"))
    if (not isinstance(k, tuple) or len(k) != 2
            or not all(isinstance(x, str) and x for x in k)):
        raise DataError(
            f"{who}: cell key {k!r} must be a pair of non-empty level names, e.g. "
            "('agree', 'wrong') or 'agree|wrong'"
        )
    return k  # type: ignore[return-value]  # checked above: two non-empty str


class Quadruple(_Item):
    """A 2x2 design on one prompt: ``cells[(level_a, level_b)] -> Response``.

    ``factors`` names the two crossed factors (e.g. ``("stance", "user")``). The four keys must be
    the full product of two levels per factor (``"a|b"`` strings are accepted as keys).
    ``cell_prompts`` optionally gives a different prompt per level of the second factor (in the
    sycophancy design the user's claim is right in one prompt and wrong in the other);
    ``prompt_for(key)`` returns the prompt a cell answers. ``cells`` is a read-only mapping.

    Example:
        >>> q = Quadruple("Q", {("agree", "right"): "a", ("agree", "wrong"): "b",
        ...                     ("disagree", "right"): "c", ("disagree", "wrong"): "d"},
        ...               ("stance", "user"), Lineage("q-1"))
        >>> q.levels, q.cells[("agree", "wrong")].text
        ((('agree', 'disagree'), ('right', 'wrong')), 'b')
    """

    __slots__ = ("prompt", "cells", "factors", "meta", "cell_prompts")
    kind = "quadruple"
    _fields = ("prompt", "cells", "factors", "lineage", "meta", "cell_prompts")
    prompt: str | Prompt
    cells: Mapping[tuple[str, str], Response]
    factors: tuple[str, str]
    meta: Mapping[str, object]
    cell_prompts: Mapping[str, str | Prompt]

    def __init__(self, prompt: str | Prompt,
                 cells: Mapping[tuple[str, str], str | Response] | Mapping[str, str | Response],
                 factors: tuple[str, str], lineage: Lineage,
                 meta: Mapping[str, object] | None = None,
                 cell_prompts: Mapping[str, str | Prompt] | None = None) -> None:
        _check_lineage(lineage, "Quadruple")
        who = _who("Quadruple", lineage)
        _prompt(prompt, who)
        f = factors
        if (not isinstance(f, (tuple, list)) or len(f) != 2
                or not all(isinstance(x, str) and x for x in f) or f[0] == f[1]):
            raise DataError(f"{who}: factors must be two distinct non-empty names, got {f!r}")
        if not isinstance(cells, Mapping) or len(cells) != 4:
            n = len(cells) if isinstance(cells, Mapping) else type(cells).__name__
            raise DataError(f"{who}: cells must be a mapping of exactly 4 cells, got {n}")
        fixed: dict[tuple[str, str], Response] = {}
        for k, v in cells.items():
            key = _cell_key(k, who)
            if key in fixed:
                raise DataError(f"{who}: cell {key!r} given twice")
            fixed[key] = _response(v, who, f"cells[{key!r}]")
        a_levels = sorted({k[0] for k in fixed})
        b_levels = sorted({k[1] for k in fixed})
        if len(a_levels) != 2 or len(b_levels) != 2:
            raise DataError(
                f"{who}: cells must cross two levels of {f[0]!r} with two of {f[1]!r}; "
                f"got keys {sorted(fixed)}"
            )
        if len({_nfc(r.text) for r in fixed.values()}) != 4:
            raise DataError(f"{who}: two cells have the same text; each cell must differ")
        ordered = {(a, b): fixed[(a, b)] for a in a_levels for b in b_levels}
        cp: Mapping[str, object] = EMPTY_META
        if cell_prompts:
            if not isinstance(cell_prompts, Mapping):
                raise DataError(f"{who}: cell_prompts must map a level of {f[1]!r} to a prompt")
            cpd = {}
            for lv, p in cell_prompts.items():
                if lv not in b_levels:
                    raise DataError(
                        f"{who}: cell_prompts key {lv!r} is not a level of {f[1]!r} {b_levels}"
                    )
                cpd[lv] = _prompt(p, f"{who} cell_prompts[{lv!r}]")
            cp = MappingProxyType(cpd)
        _set(self, "prompt", prompt)
        _set(self, "cells", MappingProxyType(ordered))
        _set(self, "factors", tuple(f))
        _set(self, "meta", _meta(meta, f"{who}: meta"))
        _set(self, "cell_prompts", cp)
        self._init_lineage(lineage, who)

    @property
    def levels(self) -> tuple[tuple[str, str], tuple[str, str]]:
        keys = list(self.cells)
        return (keys[0][0], keys[2][0]), (keys[0][1], keys[1][1])

    def prompt_for(self, key: tuple[str, str]) -> str:
        """The prompt text the cell ``key`` answers."""
        p = self.cell_prompts.get(key[1], self.prompt)
        return _prompt_text(p)

    def __assay_content__(self) -> list[object]:
        cells = [[_nfc(a), _nfc(b), r.__assay_content__()] for (a, b), r in self.cells.items()]
        cp = {lv: _prompt_content(p) for lv, p in self.cell_prompts.items()}
        return ["quadruple", _prompt_content(self.prompt), [_nfc(x) for x in self.factors],
                cells, canonicalize(cp)]

    def _payload_dict(self) -> dict[str, object]:
        def pd(p: str | Prompt) -> object:
            return p if isinstance(p, str) else p.to_dict()
        return {"prompt": pd(self.prompt), "factors": list(self.factors),
                "cells": {f"{a}|{b}": r.to_dict() for (a, b), r in self.cells.items()},
                "cell_prompts": {k: pd(v) for k, v in self.cell_prompts.items()}}


# --------------------------------------------------------------------------- Tournament


def _count(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise DataError(f"{where} must be a finite non-negative number, got {v!r}")
    return v


@dataclass(frozen=True, slots=True)
class EdgeObs:
    """Observed comparisons of responses ``i`` and ``j``: ``wins_i``, ``wins_j`` and ``ties``.

    ``source`` names the annotator or judge, so a measurement can be sliced by source.

    Example:
        >>> EdgeObs(0, 1, 3, 1, source="judge-a").n
        4
    """

    i: int
    j: int
    wins_i: float = 1
    wins_j: float = 0
    ties: float = 0
    source: str | None = None

    def __post_init__(self) -> None:
        for name in ("i", "j"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise DataError(f"EdgeObs.{name} must be a non-negative response index, got {v!r}")
        if self.i == self.j:
            raise DataError(f"EdgeObs compares response {self.i} with itself")
        for name in ("wins_i", "wins_j", "ties"):
            _count(getattr(self, name), f"EdgeObs({self.i},{self.j}).{name}")
        if self.n <= 0:
            raise DataError(f"EdgeObs({self.i},{self.j}) has no comparisons (all counts are 0)")
        if self.source is not None and (not isinstance(self.source, str) or not self.source):
            raise DataError("EdgeObs.source must be a non-empty string or None, got "
                            f"{self.source!r}")

    @property
    def n(self) -> float:
        return self.wins_i + self.wins_j + self.ties

    def __assay_content__(self) -> list[object]:
        return [self.i, self.j, self.wins_i, self.wins_j, self.ties,
                None if self.source is None else _nfc(self.source)]

    def to_dict(self) -> dict[str, object]:
        return {"i": self.i, "j": self.j, "wins_i": self.wins_i, "wins_j": self.wins_j,
                "ties": self.ties, "source": self.source}


class Tournament(_Item):
    """Several responses to one prompt and the pairwise outcomes observed among them.

    Example:
        >>> t = Tournament("Q", ("a", "b", "c"), (EdgeObs(0, 1, 2, 1), EdgeObs(1, 2)), Lineage("t"))
        >>> len(t.responses), t.edges[0].n
        (3, 3)
    """

    __slots__ = ("prompt", "responses", "edges", "meta")
    kind = "tournament"
    _fields = ("prompt", "responses", "edges", "lineage", "meta")
    prompt: str | Prompt
    responses: tuple[Response, ...]
    edges: tuple[EdgeObs, ...]
    meta: Mapping[str, object]

    def __init__(self, prompt: str | Prompt, responses: Sequence[str | Response],
                 edges: Sequence[EdgeObs | Mapping[str, Any]], lineage: Lineage,
                 meta: Mapping[str, object] | None = None) -> None:
        _check_lineage(lineage, "Tournament")
        who = _who("Tournament", lineage)
        _prompt(prompt, who)
        if isinstance(responses, (str, Mapping)) or not isinstance(responses, Sequence):
            raise DataError(f"{who}: responses must be a sequence of responses")
        resp = tuple(_response(r, who, f"responses[{i}]") for i, r in enumerate(responses))
        if len(resp) < 2:
            raise DataError(f"{who}: a tournament needs at least 2 responses, got {len(resp)}")
        if isinstance(edges, (str, Mapping)) or not isinstance(edges, Sequence):
            raise DataError(f"{who}: edges must be a sequence of EdgeObs")
        fixed = []
        for e_i, e in enumerate(edges):
            if isinstance(e, Mapping):
                try:
                    e = EdgeObs(**e)
                except TypeError as exc:
                    raise DataError(f"{who}: edges[{e_i}]: {exc}") from None
                except DataError as exc:
                    raise DataError(f"{who}: edges[{e_i}]: {exc}") from None
            if not isinstance(e, EdgeObs):
                raise DataError(f"{who}: edges[{e_i}] must be an EdgeObs, got {type(e).__name__}")
            if e.i >= len(resp) or e.j >= len(resp):
                raise DataError(
                    f"{who}: edges[{e_i}] refers to response {max(e.i, e.j)} but there are only "
                    f"{len(resp)} responses (indices 0..{len(resp) - 1})"
                )
            fixed.append(e)
        if not fixed:
            raise DataError(f"{who}: a tournament needs at least one edge")
        _set(self, "prompt", prompt)
        _set(self, "responses", resp)
        _set(self, "edges", tuple(fixed))
        _set(self, "meta", _meta(meta, f"{who}: meta"))
        self._init_lineage(lineage, who)

    def __assay_content__(self) -> list[object]:
        return ["tournament", _prompt_content(self.prompt),
                [r.__assay_content__() for r in self.responses],
                [e.__assay_content__() for e in self.edges]]

    def _payload_dict(self) -> dict[str, object]:
        p = self.prompt
        return {"prompt": p if isinstance(p, str) else p.to_dict(),
                "responses": [r.to_dict() for r in self.responses],
                "edges": [e.to_dict() for e in self.edges]}


# --------------------------------------------------------------------------- Trajectory


@dataclass(frozen=True, slots=True)
class TrajStep:
    """One step of an agent episode: who acted (``role``), the text, typed spans (receipts,
    narrative), and read-only meta (tool name, call id, ...).

    Example:
        >>> TrajStep("tool", "ls -> a.txt", spans=(Span(0, 2, "receipt"),)).spans[0].kind
        'receipt'
    """

    role: str
    text: str
    spans: tuple[Span, ...] = ()
    meta: Mapping[str, object] = field(default_factory=lambda: EMPTY_META)

    def __post_init__(self) -> None:
        if not isinstance(self.role, str) or not self.role:
            raise DataError(f"TrajStep.role must be a non-empty string, got {self.role!r}")
        _text(self.text, f"TrajStep({self.role}).text", allow_empty=True)
        if self.spans:
            object.__setattr__(self, "spans", _spans(self.spans, self.text, "TrajStep.spans"))
        if self.meta is not EMPTY_META:
            object.__setattr__(self, "meta", _meta(self.meta, "TrajStep.meta"))

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce_dataclass(self)

    def __hash__(self) -> int:
        return hash((self.role, self.text, self.spans))

    def __assay_content__(self) -> list[object]:
        return [_nfc(self.role), _nfc(self.text), [s.__assay_content__() for s in self.spans],
                canonicalize(self.meta)]

    def to_dict(self) -> dict[str, object]:
        return {"role": self.role, "text": self.text, "spans": [s.to_dict() for s in self.spans],
                "meta": thaw(self.meta)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrajStep:
        return cls(d["role"], d["text"], tuple(Span.from_dict(s) for s in d.get("spans") or ()),
                   d.get("meta") or EMPTY_META)


class Trajectory(_Item):
    """An agent episode: ordered steps and a read-only ``outcome`` (success, reward, ...).

    Example:
        >>> t = Trajectory((TrajStep("agent", "done"),), {"success": True}, Lineage("e-1"))
        >>> t.outcome["success"], t.prompt_text
        (True, '')
    """

    __slots__ = ("steps", "outcome", "prompt", "meta")
    kind = "trajectory"
    _fields = ("steps", "outcome", "lineage", "prompt", "meta")
    steps: tuple[TrajStep, ...]
    outcome: Mapping[str, object]
    prompt: str | Prompt
    meta: Mapping[str, object]

    def __init__(self, steps: Sequence[TrajStep | Mapping[str, object]],
                 outcome: Mapping[str, object],
                 lineage: Lineage, prompt: str | Prompt = "",
                 meta: Mapping[str, object] | None = None) -> None:
        _check_lineage(lineage, "Trajectory")
        who = _who("Trajectory", lineage)
        _prompt(prompt, who, allow_empty=True)
        if isinstance(steps, (str, Mapping)) or not isinstance(steps, Sequence):
            raise DataError(f"{who}: steps must be a sequence of TrajStep")
        fixed = []
        for i, s in enumerate(steps):
            if isinstance(s, Mapping):
                s = TrajStep.from_dict(s)
            if not isinstance(s, TrajStep):
                raise DataError(f"{who}: steps[{i}] must be a TrajStep, got {type(s).__name__}")
            fixed.append(s)
        if not fixed:
            raise DataError(f"{who}: a trajectory needs at least one step")
        if not isinstance(outcome, Mapping):
            raise DataError(f"{who}: outcome must be a mapping, got {type(outcome).__name__}")
        _set(self, "steps", tuple(fixed))
        _set(self, "outcome", _meta(outcome, f"{who}: outcome"))
        _set(self, "prompt", prompt)
        _set(self, "meta", _meta(meta, f"{who}: meta"))
        self._init_lineage(lineage, who)

    def __assay_content__(self) -> list[object]:
        return ["trajectory", _prompt_content(self.prompt),
                [s.__assay_content__() for s in self.steps], canonicalize(self.outcome)]

    def _payload_dict(self) -> dict[str, object]:
        p = self.prompt
        return {"prompt": p if isinstance(p, str) else p.to_dict(),
                "steps": [s.to_dict() for s in self.steps], "outcome": thaw(self.outcome)}


ITEM_TYPES: dict[str, type[_Item]] = {
    "pair": Pair, "quadruple": Quadruple, "tournament": Tournament, "trajectory": Trajectory,
}

#: A preference item a view holds (one of the four item types).
Item: TypeAlias = Pair | Quadruple | Tournament | Trajectory


def content_of(item: _Item) -> object:
    """The canonical payload of an item (what its ``content_hash`` hashes)."""
    return item.__assay_content__()


def seed_id_of(item: object) -> str:
    """The seed id of an item (its ``lineage.seed_id``)."""
    lineage = getattr(item, "lineage", None)
    if not isinstance(lineage, Lineage):
        raise DataError(f"{type(item).__name__} has no lineage; build items with "
                        "make_pair")
    return lineage.seed_id


def item_from_dict(d: Mapping[str, Any], where: str = "item") -> Item:
    """Rebuild an item from :meth:`to_dict` output, verifying its content hash.

    Example:
        >>> p = make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")
        >>> item_from_dict(p.to_dict()) == p
        True
    """
    kind = d.get("kind")
    if kind not in ITEM_TYPES:
        raise DataError(f"{where}: unknown item kind {kind!r}; expected one of "
                        f"{sorted(ITEM_TYPES)}")
    lin_d = d.get("lineage") or {}
    try:
        lin = Lineage(lin_d.get("seed_id"),  # type: ignore[arg-type]  # Lineage checks it
                      lin_d.get("builder_id", "unknown"),
                      tuple(lin_d.get("ops") or ()), lin_d.get("content_hash"))
    except DataError as e:
        raise DataError(f"{where}: {e}") from None
    meta = d.get("meta") or EMPTY_META
    try:
        if kind == "pair":
            return Pair(Prompt.from_dict(d["prompt"]), Response.from_dict(d["chosen"]),
                        Response.from_dict(d["rejected"]), d["axis"], lin, meta)
        if kind == "quadruple":
            return Quadruple(Prompt.from_dict(d["prompt"]),
                             {k: Response.from_dict(v) for k, v in d["cells"].items()},
                             tuple(d["factors"]), lin, meta,
                             {k: Prompt.from_dict(v)
                              for k, v in (d.get("cell_prompts") or {}).items()}
                             or None)
        if kind == "tournament":
            return Tournament(Prompt.from_dict(d["prompt"]),
                              tuple(Response.from_dict(r) for r in d["responses"]),
                              tuple(EdgeObs(**e) for e in d["edges"]), lin, meta)
        return Trajectory(tuple(TrajStep.from_dict(s) for s in d["steps"]), d["outcome"], lin,
                          Prompt.from_dict(d.get("prompt", "")) if d.get("prompt") else "", meta)
    except KeyError as e:
        raise DataError(f"{where}: a {kind} record is missing field {e.args[0]!r}") from None
    except DataError as e:
        raise DataError(f"{where}: {e}") from None
