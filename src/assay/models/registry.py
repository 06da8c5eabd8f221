"""The model-backend registry: ``openai``, ``hf`` and ``function`` register here with their spec.

The spec's ``generate.model`` entry is derived from this registry, so a plugin backend works too.
"""

from __future__ import annotations

from assay.registry import Registry

#: Backends by kind; each entry's ``spec`` is its pydantic model, its object the backend class.
BACKENDS: Registry = Registry("model backend")
