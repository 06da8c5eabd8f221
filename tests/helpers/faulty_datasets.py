"""``datasets`` failing inside its own load, as a thread race in it does (issue 39): what
assay's loader gets from :func:`faulty` raises the issue's AttributeError from ``load_from_disk``
and ``load_dataset``; :func:`install` puts it in place of ``assay.libguard.datasets``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from assay import libguard

REAL = libguard.datasets
ERROR = "type object 'tqdm' has no attribute '_lock'"


class _Faulty:
    def __init__(self, ds: Any) -> None:
        self.ds = ds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ds, name)

    def load_from_disk(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(ERROR)

    load_dataset = load_from_disk


@contextlib.contextmanager
def faulty() -> Iterator[Any]:
    """:func:`assay.libguard.datasets`, whose loads raise."""
    with REAL() as ds:
        yield _Faulty(ds)


def install() -> None:
    """Every load assay makes in this process fails inside the library."""
    libguard.datasets = faulty  # type: ignore[assignment]  # the same call, a faulty module
