"""The built-in diagnostic set v3: hand-written preference pairs over 14 dimensions, plus a
matched-prompt block and sycophancy quadruples, loaded from JSONL through a card with a pinned
checksum.

Layout: ``assay/data/builtin/diagnostic_v3/<dimension>.jsonl`` (pairs), ``matched.jsonl`` (the
same prompts across several axes) and ``sycophancy_quadruples.jsonl`` (agree/disagree x user
right/wrong). How to reach each part:

- ``load_diagnostic_v3()`` -> ``{dimension: DataView}`` of the 14 dimensions' pairs;
- ``load_diagnostic_v3_matched()`` -> one DataView of the matched block (``axis`` is the
  dimension, ``meta["match_id"]`` groups one prompt's pairs across axes);
- ``load_diagnostic_v3_quadruples()`` -> one DataView of :class:`Quadruple` items.

All three verify the whole set against ``DIAGNOSTIC_V3_CARD`` once (cached; views are immutable).
Every item is an unmutated hand-written seed, so each view's ``effective_n()`` is its length.

Example:
    >>> views = load_diagnostic_v3()
    >>> len(views), views["safety"].effective_n() == len(views["safety"])
    (14, True)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assay.data.cards import DatasetCard, data_checksum, load_dataset
from assay.data.items import Lineage, Pair, Quadruple, make_pair
from assay.data.view import DataView
from assay.errors import DataError
from assay.intervals import wilson_bounds
from assay.jsonl import iter_jsonl
from assay.results import Estimate, Interval, Result

DIMENSIONS: tuple[str, ...] = (
    "helpfulness", "safety", "verbosity", "sycophancy", "formatting", "confidence",
    "correctness", "refusal_quality", "factuality", "instruction_following",
    "code_correctness", "math_correctness", "receipts", "contested",
)
#: Dimensions defined by length: the length-balance rule does not apply to them.
LENGTH_DEFINED: tuple[str, ...] = ("verbosity",)
MATCHED_FILE = "matched.jsonl"
QUADRUPLE_FILE = "sycophancy_quadruples.jsonl"
BUILDER_ID = "diagnostic_v3"
DATA_DIR = Path(__file__).resolve().parent / "diagnostic_v3"

_PAIR_KEYS = ("kind", "dimension", "seed_id", "prompt", "chosen", "rejected", "contrast")
_QUAD_KEYS = ("kind", "dimension", "seed_id", "prompt", "prompts", "factors", "cells",
              "user_claim_correct", "contrast")
_CELL_KEYS = ("agree|right", "agree|wrong", "disagree|right", "disagree|wrong")


@dataclass(frozen=True)
class DiagnosticSet:
    """The parsed set: one DataView per dimension, the matched block, the quadruples."""

    dimensions: Mapping[str, DataView]
    matched: DataView
    quadruples: DataView

    def as_mapping(self) -> dict[str, DataView]:
        """Every part by name (the card's checksum covers exactly this mapping)."""
        out = dict(self.dimensions)
        out["matched"] = self.matched
        out["sycophancy_quadruples"] = self.quadruples
        return out


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    return list(iter_jsonl(path, error=DataError, where=path.name))


def _need(obj: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise DataError(f"{where}: missing keys {missing}")
    for k in ("seed_id", "prompt", "contrast", "dimension"):
        if k in obj and (not isinstance(obj[k], str) or not obj[k].strip()):
            raise DataError(f"{where}: {k} must be a non-empty string, got {obj[k]!r}")


def _pair(obj: dict[str, Any], where: str, extra_meta: Mapping[str, object]) -> Pair:
    try:
        return make_pair(obj["prompt"], obj["chosen"], obj["rejected"], obj["dimension"],
                         seed_id=obj["seed_id"], builder_id=BUILDER_ID,
                         meta={"contrast": obj["contrast"], **extra_meta})
    except DataError as e:
        raise DataError(f"{where}: {e}") from None


def read_diagnostic_dir(path: str | Path) -> DiagnosticSet:
    """Parse and check a diagnostic_v3 directory (no checksum check; see the card for that).

    Checks: every file present, valid JSON lines with the contract's keys, each pair's
    dimension equal to its file, matched seed ids ``matched-<match_id>-<dim>``, quadruple
    factors/cells/prompts, and seed ids unique across the whole set. Errors name file and line.
    """
    root = Path(path)
    wanted = [f"{d}.jsonl" for d in DIMENSIONS] + [MATCHED_FILE, QUADRUPLE_FILE]
    missing = [f for f in wanted if not (root / f).is_file()]
    if missing:
        raise DataError(f"diagnostic set at {root}: missing files {missing}")
    seen: dict[str, str] = {}

    def claim(seed: str, where: str) -> None:
        if seed in seen:
            raise DataError(f"{where}: seed_id {seed!r} already used at {seen[seed]}; "
                            "seed ids must be unique across the whole set")
        seen[seed] = where

    dims: dict[str, DataView] = {}
    for d in DIMENSIONS:
        items = []
        for no, obj in _lines(root / f"{d}.jsonl"):
            where = f"{d}.jsonl:{no}"
            _need(obj, _PAIR_KEYS, where)
            if obj["kind"] != "pair" or obj["dimension"] != d:
                raise DataError(f"{where}: expected kind 'pair' and dimension {d!r}, got "
                                f"{obj['kind']!r} / {obj['dimension']!r}")
            claim(obj["seed_id"], where)
            items.append(_pair(obj, where, {}))
        dims[d] = DataView(items, f"diagnostic_v3/{d}")
    matched = []
    for no, obj in _lines(root / MATCHED_FILE):
        where = f"{MATCHED_FILE}:{no}"
        _need(obj, (*_PAIR_KEYS, "match_id"), where)
        if obj["kind"] != "pair" or obj["dimension"] not in DIMENSIONS:
            raise DataError(f"{where}: expected a pair of one of the 14 dimensions")
        expect = f"matched-{obj['match_id']}-{obj['dimension']}"
        if obj["seed_id"] != expect:
            raise DataError(f"{where}: seed_id {obj['seed_id']!r} should be {expect!r}")
        claim(obj["seed_id"], where)
        matched.append(_pair(obj, where, {"match_id": obj["match_id"]}))
    quads = []
    for no, obj in _lines(root / QUADRUPLE_FILE):
        where = f"{QUADRUPLE_FILE}:{no}"
        _need(obj, _QUAD_KEYS, where)
        if obj["kind"] != "quadruple" or obj["dimension"] != "sycophancy":
            raise DataError(f"{where}: expected kind 'quadruple' and dimension 'sycophancy'")
        if list(obj["factors"]) != ["stance", "user"]:
            raise DataError(f"{where}: factors must be ['stance', 'user'], got {obj['factors']!r}")
        cells, prompts = obj["cells"], obj["prompts"]
        if not isinstance(cells, dict) or sorted(cells) != list(_CELL_KEYS):
            raise DataError(f"{where}: cells must have exactly the keys {list(_CELL_KEYS)}")
        if not isinstance(prompts, dict) or sorted(prompts) != ["right", "wrong"]:
            raise DataError(f"{where}: prompts must have exactly the keys ['right', 'wrong']")
        if obj["prompt"] != prompts["right"]:
            raise DataError(f"{where}: prompt must equal prompts['right']")
        if not isinstance(obj["user_claim_correct"], bool):
            raise DataError(f"{where}: user_claim_correct must be true or false")
        claim(obj["seed_id"], where)
        try:
            quads.append(Quadruple(
                obj["prompt"], cells, ("stance", "user"), Lineage(obj["seed_id"], BUILDER_ID),
                meta={"contrast": obj["contrast"], "user_claim_correct": obj["user_claim_correct"]},
                cell_prompts=prompts,
            ))
        except DataError as e:
            raise DataError(f"{where}: {e}") from None
    return DiagnosticSet(dims, DataView(matched, "diagnostic_v3/matched"),
                         DataView(quads, "diagnostic_v3/sycophancy_quadruples"))


@functools.lru_cache(maxsize=1)
def _package_set() -> DiagnosticSet:
    return read_diagnostic_dir(DATA_DIR)


#: The card: count and checksum are pinned literals (recompute with
#: ``data_checksum(read_diagnostic_dir(DATA_DIR).as_mapping())`` only when the data is meant to
#: change, and bump the version with it).
DIAGNOSTIC_V3_CARD = DatasetCard(
    name="diagnostic_v3",
    version="3.0",
    count=438,
    checksum="ds:9b0abbcee4508d3f2606559ff2651662",
    loader=lambda: _package_set().as_mapping(),
    description=(
        "Hand-written preference pairs over 14 dimensions (at least 24 independent seeds each, "
        "every item an unmutated seed with a one-sentence contrast in meta['contrast']), a "
        "matched-prompt block (the same prompts across several axes) and 2x2 sycophancy "
        "quadruples (agree/disagree x user right/wrong)."
    ),
    notes=(
        "Length is balanced within each dimension: the chosen response is the longer one in "
        "35-65% of pairs, so 'prefer the longer' cannot pass an axis (see length_baseline).",
        "Exception: verbosity is defined by length. Its chosen response is the concise one "
        "(padding, preambles and filler are what the rejected one adds), so its length balance "
        "is not controlled: 'prefer the longer' fails it by construction, and there length is "
        "the axis, not a confound.",
    ),
)


@functools.lru_cache(maxsize=1)
def _verified() -> DiagnosticSet:
    load_dataset(DIAGNOSTIC_V3_CARD)
    return _package_set()


def load_diagnostic_v3() -> dict[str, DataView]:
    """The 14 dimensions as ``{name: DataView}``, verified against the pinned card (cached)."""
    return dict(_verified().dimensions)


def load_diagnostic_v3_matched() -> DataView:
    """The matched-prompt block: pairs whose ``meta['match_id']`` share a prompt across axes."""
    return _verified().matched


def load_diagnostic_v3_quadruples() -> DataView:
    """The sycophancy quadruples (``cells[(stance, user)]``, ``prompt_for`` per user level)."""
    return _verified().quadruples


# ---------------------------------------------------------------------- length baseline


@dataclass(frozen=True)
class LengthBaseline(Result):
    """Per-dimension accuracy of "prefer the longer response" (ties count one half).

    Each estimate's interval is a Wilson score interval over seeds (Wilson 1927): per-seed
    accuracies are averaged first, so clones never count twice. ``warnings`` list the
    dimensions where length alone predicts the label (interval above 0.5) or anti-predicts it
    (below 0.5).
    """

    by_dimension: Mapping[str, Estimate]
    warnings: tuple[str, ...] = ()

    def _headline(self) -> Estimate:
        """The one dimension's estimate; with several, pick one from ``by_dimension``."""
        if len(self.by_dimension) == 1:
            return next(iter(self.by_dimension.values()))
        raise DataError(f"length baseline over {len(self.by_dimension)} dimensions has no single "
                           f"estimate: use by_dimension[name] ({sorted(self.by_dimension)})")

    def __str__(self) -> str:
        return "length-only baseline: " + "; ".join(str(e) for e in self.by_dimension.values())


def length_baseline(views: Mapping[str, DataView] | DataView, *, unit: str = "chars",
                    level: float = 0.95) -> LengthBaseline:
    """Score each dimension by "prefer the longer" so the length confound is visible.

    ``unit`` is ``"chars"`` or ``"words"``. Only Pair items are scored.

    Example:
        >>> r = length_baseline(load_diagnostic_v3())
        >>> 0.35 <= r.by_dimension["safety"].value <= 0.65
        True
    """
    if unit not in ("chars", "words"):
        raise DataError(f"length_baseline: unit must be 'chars' or 'words', got {unit!r}")
    if isinstance(views, DataView):
        views = {views.name or "view": views}
    out: dict[str, Estimate] = {}
    warns = []
    for name, v in views.items():
        per_seed: dict[str, list[float]] = {}
        for i, it in enumerate(v):
            if not isinstance(it, Pair):
                raise DataError(f"length_baseline: {name} item {i} is a {it.kind}, not a pair")
            c, r = it.chosen.text, it.rejected.text
            lc, lr = (len(c), len(r)) if unit == "chars" else (len(c.split()), len(r.split()))
            per_seed.setdefault(it.seed_id, []).append(1.0 if lc > lr else 0.5 if lc == lr else 0.0)
        k = len(per_seed)
        if k == 0:
            out[name] = Estimate(f"{name} longer-wins", float("nan"), None, 0, "seeds", 0,
                                 "empty view")
            continue
        p = float(np.mean([np.mean(x) for x in per_seed.values()]))
        lo, hi = wilson_bounds(p, k, level)
        out[name] = Estimate(f"{name} longer-wins", p, Interval(lo, hi, level, "Wilson, seeds"), k,
                             "seeds", len(v))
        why = " (expected: this axis is defined by length)" if name in LENGTH_DEFINED else ""
        if lo > 0.5:
            warns.append(f"{name}: length alone predicts the label ({p:.2f}, {k} seeds){why}")
        elif hi < 0.5:
            warns.append(f"{name}: length alone anti-predicts the label ({p:.2f}, {k} seeds){why}")
    return LengthBaseline(out, tuple(warns))


def pinned_checksum_now() -> tuple[int, str]:
    """``(count, checksum)`` of the files as they are (to pin in the card when data changes)."""
    m = read_diagnostic_dir(DATA_DIR).as_mapping()
    return sum(len(v) for v in m.values()), data_checksum(m)
