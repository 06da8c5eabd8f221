"""The verifier registry: every verifier kind a spec's ``verifier: {kind: ...}`` can name.

Each verifier module registers its classes here; a user module can register more (spec
``plugins:``).
"""

from typing import Any

from assay.registry import Registry

VERIFIERS: Registry[Any] = Registry("verifier")
