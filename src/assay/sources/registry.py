"""The source registry: every ``kind`` a spec's ``sources:`` entry can name.

A source kind is a :class:`assay.sources.base.SourceSpec` subclass registered with ``spec=`` itself.
"""

from typing import Any

from assay.registry import Registry

SOURCES: Registry[Any] = Registry("source")
