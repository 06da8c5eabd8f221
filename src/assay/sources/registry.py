"""The source registry: every ``kind`` a spec's ``sources:`` entry can name.

A source kind is a :class:`assay.sources.base.SourceSpec` subclass, its own spec model
(``@SOURCES.register("name")`` on the class).
"""

from typing import Any

from assay.registry import Registry

SOURCES: Registry[Any] = Registry("source", self_spec=True)
