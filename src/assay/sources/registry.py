"""The source registry: every ``kind`` a spec's ``sources:`` entry can name.

A source kind is a :class:`assay.sources.base.SourceSpec` subclass, its own spec model
(``@SOURCES.register("name")`` on the class).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.registry import Registry

if TYPE_CHECKING:
    from assay.sources.base import SourceSpec

SOURCES: Registry[type[SourceSpec]] = Registry("source", self_spec=True)
