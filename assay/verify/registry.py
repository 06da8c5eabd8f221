"""The verifier registry: every verifier kind a spec may name, with its spec model.

Verifier modules register their kinds here; the spec derives ``verifier:`` entries from it.
"""

from assay.registry import Registry

VERIFIERS = Registry("verifier")
