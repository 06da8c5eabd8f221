"""DataView: an immutable, ordered view of preference items with derivation steps recorded as data.

Filters, slices and samples are JSON steps that a study spec stores and ``apply_derivation``
replays.

Example:
    >>> from assay.data.items import make_pair
    >>> v = DataView([make_pair(f"Q{i}", "a", "b", "x" if i % 2 else "y", seed_id=f"s{i}",
    ...                         builder_id="h") for i in range(6)], name="demo")
    >>> w = v.where(axis="x").slice(0, 2)
    >>> len(w), w.derivation[0]["op"], w.checksum()[:3]
    (2, 'where', 'ds:')
    >>> apply_derivation(v, w.derivation).checksum() == w.checksum()
    True
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import pyarrow as pa

from assay.data.items import (
    EMPTY_META,
    Item,
    Pair,
    Response,
    _dumps,
    _Item,
    _nfc,
    item_from_dict,
)
from assay.data.lineage import Lineage
from assay.data.lineage import effective_n as _effective_n
from assay.errors import DataError
from assay.hashing import DIGEST_HEX, HASH_SCHEMA
from assay.results import Estimate, Result
from assay.steps import WHERE_OPS, validate_steps

VIEW_SCHEMA_VERSION = 1

#: Computed fields a ``where`` step may name besides dotted attribute paths (``chosen.text``,
#: ``meta.domain``, ``lineage.ops``).
# the item is duck-typed: a field another item type lacks raises AttributeError, caught by where
COMPUTED_FIELDS: dict[str, Callable[[Any], object]] = {
    "seed_id": operator.attrgetter("_seed"),
    "builder_id": operator.attrgetter("_builder"),
    "n_ops": lambda it: len(it._ops),
    "content_hash": lambda it: it.lineage.content_hash,
    "prompt_text": lambda it: it.prompt_text,
    "kind": lambda it: it.kind,
    "chosen_len": lambda it: len(it.chosen.text),
    "rejected_len": lambda it: len(it.rejected.text),
}


# ------------------------------------------------------------------------------ steps


def apply_derivation(view: DataView, steps: object) -> DataView:
    """Replay derivation ``steps`` (validated first) on ``view``.

    Example:
        >>> from assay.data.items import make_pair
        >>> v = DataView([make_pair("Q", f"a{i}", "b", "x", seed_id=f"s{i}", builder_id="h")
        ...               for i in range(4)])
        >>> len(apply_derivation(v, [{"op": "sample", "n": 2, "seed": 1}]))
        2
    """
    if not isinstance(view, DataView):
        raise DataError(f"apply_derivation needs a DataView, got {type(view).__name__}")
    for s in validate_steps(steps):
        op = s["op"]
        if op == "where":
            view = view.where(s["field"], s["cmp"], s["value"])
        elif op == "slice":
            view = view.slice(s["start"], s.get("stop"), s.get("step"))
        elif op == "sample":
            view = view.sample(s["n"], s["seed"])
        else:
            view = view.collapse_duplicates(warn=False)[0]
    return view


def _fast_getter(field: str) -> Callable[[Any], object] | None:
    if field in COMPUTED_FIELDS:
        return COMPUTED_FIELDS[field]
    if "." not in field and not field.startswith("_"):
        return operator.attrgetter(field)
    if field.startswith("meta.") and field.count(".") == 1:
        key = field[5:]
        return lambda it: it.meta[key]
    return None


def _resolve(item: Item, field: str, index: int) -> object:
    fn = COMPUTED_FIELDS.get(field)
    try:
        if fn is not None:
            return fn(item)
        obj = item
        for part in field.split("."):
            if isinstance(obj, Mapping):
                obj = obj[part]
            else:
                if part.startswith("_"):
                    raise AttributeError(part)
                obj = getattr(obj, part)
        return obj
    except (AttributeError, KeyError):
        raise DataError(
            f"where: item {index} ({type(item).__name__}, seed {item.lineage.seed_id!r}) has no "
            f"field {field!r}; use an attribute path (axis, chosen.text, meta.<key>) or one of "
            f"{sorted(COMPUTED_FIELDS)}"
        ) from None


# ------------------------------------------------------------------------------ ESS result


@dataclass(frozen=True)
class EffectiveN(Result):
    """Every named effective sample size of a view (see ``assay.data.lineage.effective_n``)."""

    seeds: float
    rows: float
    kish_rows: float
    design: float
    icc: float
    weighted: float
    prompts: float

    def _headline(self) -> Estimate:
        """The effective number of independent seeds."""
        return Estimate("effective seeds", float(self.seeds), None, int(round(self.rows)), "rows")

    def __str__(self) -> str:
        return (f"effective n: {self.seeds:g} independent seeds ({self.prompts:g} prompts), "
                f"{self.rows:g} rows; "
                f"row-weighted Kish {self.kish_rows:.2f}, design (icc={self.icc:g}) "
                f"{self.design:.2f}, weighted ESS {self.weighted:.2f}")


# ------------------------------------------------------------------------------ DataView


class DataView:
    """An immutable ordered view of preference items (Pairs, Quadruples, Tournaments, ...).

    Derived views (``where``, ``slice``, ``sample``, ``collapse_duplicates``) share the items and
    record a JSON step; ``derivation`` lists the steps from ``root`` (the view they replay from).
    ``filter(callable)`` works too but is not replayable (``replayable`` turns False).
    ``weights`` (or None) are per-item weights, set by ``collapse_duplicates``; they follow the
    items through later steps and go into the checksum and ``to_arrow``.

    Example:
        >>> from assay.data.items import make_pair
        >>> v = DataView([make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")] * 3)
        >>> v.effective_n(), v.effective_n("rows")
        (1.0, 3.0)
        >>> u, w = v.collapse_duplicates(warn=False)
        >>> len(u), w
        (1, [3])
    """

    __slots__ = ("_items", "name", "_weights", "_root", "_steps", "_replayable", "_checksum")

    def __init__(self, items: Iterable[Item], name: str | None = None, *,
                 weights: Sequence[float] | None = None) -> None:
        its = tuple(items)
        for i, it in enumerate(its):
            if not isinstance(it, _Item):
                raise DataError(
                    f"DataView item {i} is a {type(it).__name__}, not an assay item; build pairs "
                    "with make_pair(...) (or Quadruple/Tournament/Trajectory)"
                )
        if name is not None and not isinstance(name, str):
            raise DataError(f"DataView name must be a string or None, got {name!r}")
        self._items = its
        self.name = name
        self._weights = None if weights is None else _check_weights(weights, len(its))
        self._root: DataView | None = None
        self._steps: tuple[dict[str, object], ...] = ()
        self._replayable = True
        self._checksum: str | None = None

    @classmethod
    def _derived(cls, parent: DataView, items: tuple[Item, ...], weights: tuple[float, ...] | None,
                 step: dict[str, object], *, replayable: bool = True) -> DataView:
        v = cls.__new__(cls)
        v._items = items
        v.name = parent.name
        v._weights = weights
        v._root = parent._root if parent._root is not None else parent
        v._steps = (*parent._steps, step)
        v._replayable = parent._replayable and replayable
        v._checksum = None
        return v

    # -- sequence protocol -------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    @overload
    def __getitem__(self, index: int | np.integer) -> Item: ...

    @overload
    def __getitem__(self, index: slice) -> DataView: ...

    def __getitem__(self, index: int | np.integer | slice) -> Item | DataView:
        if isinstance(index, slice):
            return self.slice(index.start, index.stop, index.step)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise DataError(f"DataView index must be an int or a slice, got {index!r}")
        try:
            return self._items[index]
        except IndexError:
            raise IndexError(f"DataView index {index} out of range for {len(self)} items") from None

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        w = ", weighted" if self._weights is not None else ""
        return f"<DataView{label} n={len(self)}{w} steps={len(self._steps)}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DataView):
            return NotImplemented
        return self.checksum() == other.checksum()

    def __hash__(self) -> int:
        return hash(self.checksum())

    @property
    def items(self) -> tuple[Item, ...]:
        return self._items

    @property
    def weights(self) -> tuple[float, ...] | None:
        """Per-item weights (from ``collapse_duplicates``) or None for equal weights."""
        return self._weights

    @property
    def derivation(self) -> list[dict[str, object]]:
        """The JSON steps that turn ``root`` into this view (a copy; empty for a root)."""
        return [dict(s) for s in self._steps]

    @property
    def root(self) -> DataView:
        """The view ``derivation`` replays from (this view itself when it is a root)."""
        return self._root if self._root is not None else self

    @property
    def replayable(self) -> bool:
        """False when a ``filter(callable)`` step is in the derivation."""
        return self._replayable

    def replay(self) -> DataView:
        """Rebuild this view from ``root`` by replaying ``derivation``."""
        if not self._replayable:
            raise DataError(
                "this view was derived with filter(callable), which cannot be replayed; "
                "express the filter as where(field, cmp, value)"
            )
        return apply_derivation(self.root, self._steps)

    # -- derivations ---------------------------------------------------------------

    def _take(self, idx: Sequence[int]) -> tuple[tuple[Item, ...], tuple[float, ...] | None]:
        its = self._items
        items = tuple(its[i] for i in idx)
        w = None if self._weights is None else tuple(self._weights[i] for i in idx)
        return items, w

    def where(self, field: str | None = None, cmp: str | None = None, value: object = None,
              **equals: object) -> DataView:
        """Keep items whose ``field`` compares true with ``value``; recorded as a step.

        ``where(axis="verbosity")`` is ``where("axis", "==", "verbosity")``; a list value in the
        keyword form means ``in``. Fields: attribute paths (``axis``, ``chosen.text``,
        ``meta.domain``) or a computed field (``seed_id``, ``chosen_len``, ...).

        Example:
            >>> from assay.data.items import make_pair
            >>> v = DataView([make_pair("Q", "a" * i, "b", "x", seed_id=f"s{i}", builder_id="h")
            ...               for i in range(1, 5)])
            >>> len(v.where("chosen_len", ">=", 3)), v.where("chosen_len", ">=", 3).derivation
            (2, [{'op': 'where', 'field': 'chosen_len', 'cmp': '>=', 'value': 3}])
        """
        if field is None:
            if not equals:
                raise DataError("where() needs a (field, cmp, value) triple or keyword=value")
            view = self
            for k, v in equals.items():
                view = view.where(k, "in" if isinstance(v, (list, tuple)) else "==", v)
            return view
        if equals:
            raise DataError("where(): give either (field, cmp, value) or keywords, not both")
        value = list(value) if isinstance(value, tuple) else value
        step = validate_steps([{"op": "where", "field": field, "cmp": cmp, "value": value}])[0]
        fn = WHERE_OPS[cmp]  # type: ignore[index]  # validate_steps checked cmp
        keep = None
        getter = _fast_getter(field)
        if getter is not None:
            # Fast pass; any surprise (missing field, odd type) falls back to the careful loop,
            # which names the item and the problem.
            try:
                vals = [getter(it) for it in self._items]
                if cmp == "==" and isinstance(value, (str, int, float)):
                    keep = [i for i, g in enumerate(vals) if g == value]
                elif not any(isinstance(g, tuple) for g in vals):
                    keep = [i for i, g in enumerate(vals) if fn(g, value)]
            except Exception:
                keep = None
        if keep is None:
            keep = []
            for i, it in enumerate(self._items):
                got = _resolve(it, field, i)
                if isinstance(got, tuple):
                    got = list(got)
                try:
                    ok = fn(got, value)
                except TypeError:
                    raise DataError(
                        f"where: cannot compare item {i}'s {field} ({got!r:.40}) "
                        f"{cmp} {value!r:.40}"
                    ) from None
                if ok:
                    keep.append(i)
        items, w = self._take(keep)
        return DataView._derived(self, items, w, step)

    def filter(self, predicate: Callable[[Item], bool]) -> DataView:
        """Keep items satisfying ``predicate``; not replayable from a spec (prefer ``where``)."""
        if not callable(predicate):
            raise DataError("filter needs a callable; for a replayable filter use where()")
        keep = [i for i, it in enumerate(self._items) if predicate(it)]
        items, w = self._take(keep)
        name = getattr(predicate, "__qualname__", type(predicate).__name__)
        return DataView._derived(self, items, w, {"op": "filter", "predicate": name},
                                 replayable=False)

    def slice(
        self, start: int | None, stop: int | None = None, step: int | None = None
    ) -> DataView:
        """``items[start:stop:step]`` as a recorded step.

        Example:
            >>> DataView([]).slice(0, 5).derivation
            [{'op': 'slice', 'start': 0, 'stop': 5, 'step': None}]
        """
        rec = validate_steps([{"op": "slice", "start": start, "stop": stop, "step": step}])[0]
        idx = range(len(self._items))[start:stop:step]
        items, w = self._take(idx)
        return DataView._derived(self, items, w, rec)

    def sample(self, n: int, seed: int) -> DataView:
        """``n`` items drawn without replacement with ``numpy.random.default_rng(seed)``, kept in
        their original order; recorded as a step.

        Example:
            >>> from assay.data.items import make_pair
            >>> v = DataView([make_pair("Q", f"a{i}", "b", "x", seed_id=f"s{i}", builder_id="h")
            ...               for i in range(10)])
            >>> v.sample(3, seed=7).checksum() == v.sample(3, seed=7).checksum()
            True
        """
        rec = validate_steps([{"op": "sample", "n": n, "seed": seed}])[0]
        if n > len(self._items):
            raise DataError(f"sample: n={n} is more than the view's {len(self._items)} items")
        idx = np.sort(np.random.default_rng(seed).choice(len(self._items), n, replace=False))
        items, w = self._take(idx.tolist())
        return DataView._derived(self, items, w, rec)

    def concat(self, other: DataView, *, name: str | None = None) -> DataView:
        """This view's items followed by ``other``'s: a new root (two parents cannot replay
        from one). Weights are kept when either side has them (missing ones count 1)."""
        if not isinstance(other, DataView):
            raise DataError(f"concat needs a DataView, got {type(other).__name__}")
        w = None
        if self._weights is not None or other._weights is not None:
            w = (self._weights or (1.0,) * len(self)) + (other._weights or (1.0,) * len(other))
        return DataView((*self._items, *other._items), name or self.name, weights=w)

    def collapse_duplicates(self, *, warn: bool = True) -> tuple[DataView, list[float]]:
        """Merge items with the same payload (``content_hash``): ``(view, weights)``.

        The first occurrence is kept (with its lineage); its weight is the number of copies
        (or the sum of existing weights). The weights are also on ``view.weights`` and flow into
        weighted statistics and ``effective_n("weighted")``. Warns when anything was merged,
        and says so when the copies carried different seed ids.

        Example:
            >>> from assay.data.items import make_pair
            >>> a = make_pair("Q", "a", "b", "x", seed_id="s1", builder_id="h")
            >>> b = make_pair("Q", "c", "b", "x", seed_id="s2", builder_id="h")
            >>> DataView([a, b, a, a]).collapse_duplicates(warn=False)[1]
            [3, 1]
        """
        first: dict[str, int] = {}
        order: list[int] = []
        acc: list[float] = []
        seeds: dict[int, set[str]] = {}
        base = self._weights
        its = self._items
        for i, ch in enumerate([it.content_hash for it in its]):
            j = first.get(ch)
            if j is None:
                first[ch] = len(order)
                order.append(i)
                acc.append(1 if base is None else base[i])
            else:
                acc[j] += 1 if base is None else base[i]
                s0 = its[order[j]]._seed
                if its[i]._seed != s0:
                    seeds.setdefault(j, {s0}).add(its[i]._seed)
        merged = len(self._items) - len(order)
        if warn and merged:
            msg = f"collapse_duplicates merged {merged} duplicate items into {len(order)} unique"
            if seeds:
                msg += (f"; {len(seeds)} groups had copies under different seed ids (the same "
                        "content authored twice is one independent unit)")
            warnings.warn(msg, stacklevel=2)
        items = tuple(self._items[i] for i in order)
        v = DataView._derived(self, items, tuple(float(x) for x in acc),
                              {"op": "collapse_duplicates"})
        return v, acc

    # -- identity and sample size -----------------------------------------------------

    def seed_ids(self) -> list[str]:
        """The seed id of every item, in order."""
        return [it._seed for it in self._items]

    def effective_n(self, kind: str = "seeds", *, icc: float = 1.0) -> float:
        """Effective sample size by name; default: the number of independent seeds.

        ``kind`` is one of ``seeds``, ``kish_rows``, ``design``, ``weighted``, ``rows`` (formulas
        in :func:`assay.data.lineage.effective_n`) or ``prompts``: the number of distinct prompt
        texts (after NFC), the unit when several seeds share a prompt (the matched block).
        ``weighted`` uses ``weights`` (equal weights when the view has none).
        """
        if kind == "prompts":
            return float(len({_nfc(it.prompt_text) for it in self._items}))
        w = None
        if kind == "weighted":
            w = self._weights if self._weights is not None else np.ones(len(self))
        return _effective_n(self.seed_ids(), kind=kind, weights=w, icc=icc)

    def effective_n_report(self, *, icc: float = 1.0) -> EffectiveN:
        """All named effective sample sizes at once."""
        s = self.seed_ids()
        w = self._weights if self._weights is not None else np.ones(len(s))
        return EffectiveN(
            seeds=_effective_n(s), rows=float(len(s)),
            kish_rows=_effective_n(s, kind="kish_rows"),
            design=_effective_n(s, kind="design", icc=icc), icc=icc,
            weighted=_effective_n(s, kind="weighted", weights=w) if len(s) else 0.0,
            prompts=self.effective_n("prompts"),
        )

    def checksum(self) -> str:
        """Content id ``ds:<32 hex>`` of the ordered items (and weights); computed once.

        Equals ``content_hash(material, "ds")`` where ``material`` is the list of item records
        ``[payload, seed_id, builder_id, ops, meta]`` (``item.__assay_record__()``), or
        ``{"items": records, "weights": weights}`` for a weighted view. So it is stable under
        Unicode normalization and changes with any text edit, reordering, seed, op or meta
        change. The view's name and derivation are labels, not content. The records are
        encoded in chunks and streamed into one SHA-256, so memory stays flat.
        """
        c = self._checksum
        if c is None:
            c = _stream_checksum(self._items, self._weights)
            self._checksum = c
        return c

    def __assay_content__(self) -> str:
        return self.checksum()

    # -- columnar ---------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """One row per item: ``kind, prompt, axis, chosen, rejected, seed_id, builder_id, ops,
        content_hash, weight, extra``. Plain pairs fill the text columns and leave ``extra``
        null; anything else (spans, meta, other item types) is the item's JSON in ``extra``.
        The view name sits in the schema metadata.
        """
        cols: dict[str, list[object]] = {k: [] for k in ARROW_SCHEMA.names}
        w = self._weights
        for i, it in enumerate(self._items):
            lin = it.lineage
            cols["kind"].append(it.kind)
            cols["seed_id"].append(lin.seed_id)
            cols["builder_id"].append(lin.builder_id)
            cols["ops"].append(list(lin.ops))
            cols["content_hash"].append(lin.content_hash)
            cols["weight"].append(None if w is None else w[i])
            plain = (type(it) is Pair and type(it.prompt) is str and not it.meta
                     and not it.chosen.spans and not it.chosen.meta
                     and not it.rejected.spans and not it.rejected.meta)
            if plain and isinstance(it, Pair):  # (plain: exactly a Pair; this narrows it)
                cols["prompt"].append(it.prompt)
                cols["axis"].append(it.axis)
                cols["chosen"].append(it.chosen.text)
                cols["rejected"].append(it.rejected.text)
                cols["extra"].append(None)
            else:
                cols["prompt"].append(it.prompt_text)
                cols["axis"].append(getattr(it, "axis", None))
                cols["chosen"].append(it.chosen.text if type(it) is Pair else None)
                cols["rejected"].append(it.rejected.text if type(it) is Pair else None)
                cols["extra"].append(json.dumps(it.to_dict(), ensure_ascii=False, sort_keys=True))
        meta = {b"assay.view": json.dumps({"name": self.name, "schema": VIEW_SCHEMA_VERSION,
                                           "weighted": w is not None}).encode()}
        return pa.table(cols, schema=ARROW_SCHEMA.with_metadata(meta))

    @classmethod
    def from_arrow(cls, table: pa.Table, name: str | None = None) -> DataView:
        """Rebuild a view from ``to_arrow`` output; every row's content hash is re-verified."""
        if not isinstance(table, pa.Table):
            raise DataError(f"from_arrow needs a pyarrow Table, got {type(table).__name__}")
        missing = [c for c in ARROW_SCHEMA.names if c not in table.column_names]
        if missing:
            raise DataError(f"from_arrow: table lacks columns {missing}; write it with to_arrow()")
        info = json.loads((table.schema.metadata or {}).get(b"assay.view", b"{}"))
        c = {k: table.column(k).to_pylist() for k in ARROW_SCHEMA.names}
        items = []
        for i in range(table.num_rows):
            try:
                if c["extra"][i] is not None:
                    items.append(item_from_dict(json.loads(c["extra"][i]), f"row {i}"))
                else:
                    lin = Lineage(c["seed_id"][i], c["builder_id"][i], tuple(c["ops"][i] or ()),
                                  c["content_hash"][i])
                    items.append(Pair(c["prompt"][i], Response(c["chosen"][i]),
                                      Response(c["rejected"][i]), c["axis"][i], lin, EMPTY_META))
            except DataError as e:
                raise DataError(f"from_arrow row {i}: {e}") from None
        ws = c["weight"]
        weights = None
        if info.get("weighted"):
            if any(x is None for x in ws):
                raise DataError("from_arrow: the table is weighted but some weights are null")
            weights = ws
        return cls(items, name if name is not None else info.get("name"), weights=weights)

    def to_parquet(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_arrow()`` to a Parquet file."""
        import pyarrow.parquet as pq

        pq.write_table(self.to_arrow(), str(path))

    @classmethod
    def read_parquet(cls, path: str | os.PathLike[str], name: str | None = None) -> DataView:
        """Read a view written by ``to_parquet`` (content hashes verified)."""
        import pyarrow.parquet as pq

        return cls.from_arrow(pq.read_table(str(path)), name)


ARROW_SCHEMA = pa.schema([
    pa.field("kind", pa.string(), nullable=False),
    pa.field("prompt", pa.string()),
    pa.field("axis", pa.string()),
    pa.field("chosen", pa.string()),
    pa.field("rejected", pa.string()),
    pa.field("seed_id", pa.string(), nullable=False),
    pa.field("builder_id", pa.string(), nullable=False),
    pa.field("ops", pa.list_(pa.string())),
    pa.field("content_hash", pa.string(), nullable=False),
    pa.field("weight", pa.float64()),
    pa.field("extra", pa.string()),
])


_CHUNK = 2048


def _stream_checksum(items: Sequence[Item], weights: Sequence[float] | None) -> str:
    # Byte-identical to canonical_json(material) (a JSON array's elements are joined by ","),
    # but encoded item by item in chunks so a 100k-item view never holds its whole JSON.
    h = hashlib.sha256()
    h.update(f"assay-hash-v{HASH_SCHEMA}\x00ds\x00".encode())
    h.update(b'{"items":[' if weights is not None else b"[")
    first = True
    for k in range(0, len(items), _CHUNK):
        body = ",".join([it.__assay_record_json__() for it in items[k : k + _CHUNK]]).encode()
        if not first:
            h.update(b",")
        h.update(body)
        first = False
    if weights is not None:
        h.update(b'],"weights":' + _dumps(list(weights)).encode() + b"}")
    else:
        h.update(b"]")
    return f"ds:{h.hexdigest()[:DIGEST_HEX]}"


def _check_weights(weights: Iterable[float], n: int) -> tuple[float, ...]:
    w = tuple(weights)
    if len(w) != n:
        raise DataError(f"DataView: {len(w)} weights for {n} items; give one weight per item")
    for i, x in enumerate(w):
        if (isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating))
                or not math.isfinite(x) or x < 0):
            raise DataError(f"DataView weights[{i}] is {x!r}; weights must be finite and >= 0")
    return tuple(float(x) for x in w)
