"""Dataset cards: name, version, declared count and a checksum pinned in source, plus the loader.

``load_dataset(card)`` loads through the card and refuses data whose count or checksum differ.

Example:
    >>> from assay.data.items import make_pair
    >>> from assay.data.view import DataView
    >>> def build():
    ...     return DataView([make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")])
    >>> card = DatasetCard("tiny", "1", 1, "ds:b1a4c1d6b1e0d7d5a3b8c2f4e6a8b0c2", build)
    >>> try:
    ...     load_dataset(card)
    ... except DataError as e:
    ...     print(str(e)[:70])
    dataset tiny v1: checksum mismatch: the card pins ds:b1a4c1d6b1e0d7d5a
    >>> ok = DatasetCard("tiny", "1", 1, data_checksum(build()), build)
    >>> len(load_dataset(ok))
    1
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from assay.data.view import DataView
from assay.errors import DataError
from assay.hashing import content_hash

_CHECKSUM_RE = re.compile(r"^ds:[0-9a-f]{32}$")


def data_checksum(data: DataView | Mapping[str, DataView]) -> str:
    """Checksum of a view, or of named views: ``content_hash([[name, view.checksum()], ...])``
    over the names in sorted order (prefix ``ds``).

    Example:
        >>> data_checksum({"a": DataView([])}) == data_checksum({"a": DataView([])})
        True
    """
    if isinstance(data, DataView):
        return data.checksum()
    if isinstance(data, Mapping):
        parts = []
        for k in sorted(data):
            v = data[k]
            if not isinstance(v, DataView):
                raise DataError(f"data_checksum: entry {k!r} is a {type(v).__name__}, not a "
                                "DataView")
            parts.append([k, v.checksum()])
        return content_hash(parts, "ds")
    raise DataError("data_checksum needs a DataView or a mapping of them, got "
                    f"{type(data).__name__}")


def data_count(data: DataView | Mapping[str, DataView]) -> int:
    """Number of items (summed over named views)."""
    if isinstance(data, DataView):
        return len(data)
    return sum(len(v) for v in data.values())


@dataclass(frozen=True)
class DatasetCard:
    """What a dataset is and how to verify it.

    ``checksum`` is written in the source that defines the card (never computed from the
    builder at import), so a loader that silently changes rows cannot also change the id it is
    checked against. ``count`` is the declared number of items. ``loader`` builds the data (a
    DataView or a mapping of named DataViews). ``notes`` carry caveats users must see (e.g.
    an axis defined by length).
    """

    name: str
    version: str
    count: int
    checksum: str
    loader: Callable[[], DataView | Mapping[str, DataView]] = field(repr=False, compare=False)
    description: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DataError(f"DatasetCard.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.version, str) or not self.version:
            raise DataError(f"DatasetCard {self.name}: version must be a non-empty string")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise DataError(f"DatasetCard {self.name}: count must be a non-negative int")
        if not isinstance(self.checksum, str) or not _CHECKSUM_RE.match(self.checksum):
            raise DataError(
                f"DatasetCard {self.name}: checksum must be a pinned 'ds:<32 hex>' literal, got "
                f"{self.checksum!r}"
            )
        if not callable(self.loader):
            raise DataError(f"DatasetCard {self.name}: loader must be callable")

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "version": self.version, "count": self.count,
                "checksum": self.checksum, "description": self.description,
                "notes": list(self.notes)}


def load_dataset(card: DatasetCard) -> DataView | Mapping[str, DataView]:
    """Load through ``card`` and verify the declared count and the pinned checksum.

    Raises DataError naming the dataset, both values and the fix when either differs.
    """
    if not isinstance(card, DatasetCard):
        raise DataError(f"load_dataset needs a DatasetCard, got {type(card).__name__}")
    data = card.loader()
    got_n = data_count(data)
    if got_n != card.count:
        raise DataError(
            f"dataset {card.name} v{card.version}: the card declares {card.count} items but the "
            f"loader returned {got_n}; a truncated or subset load is refused"
        )
    got = data_checksum(data)
    if got != card.checksum:
        raise DataError(
            f"dataset {card.name} v{card.version}: checksum mismatch: the card pins "
            f"{card.checksum} but the loaded data is {got}. The data changed (or the loader "
            "returned other rows); if the change is intended, pin the new checksum in the card's "
            "source and bump its version."
        )
    return data
