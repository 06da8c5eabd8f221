"""``generate:`` of a source: the model under test (any registered backend), the API, k, the
sampling parameters, the seed. Importing this module registers the built-in backends.

Example:
    >>> g = GenerateSpec.model_validate({"model": {"kind": "function", "callable": "m:f"}, "k": 2})
    >>> g.model.kind, g.k, g.params.temperature, g.params.max_tokens
    ('function', 2, 1.0, 512)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from assay.errors import SpecError
from assay.models import function as _function  # noqa: F401  (registers "function")
from assay.models import hf as _hf  # noqa: F401  (registers "hf"; torch loads only when used)
from assay.models import openai as _openai  # noqa: F401  (registers "openai"; httpx loads when used)
from assay.models.registry import BACKENDS
from assay.models.specs import SamplingParams, _Strict


class _BackendEntry:
    """JSON Schema of a ``model:`` entry: any backend registered when the schema is built
    (validation goes through :func:`backend_spec`, so plugin backends validate too)."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {"anyOf": [k.spec.model_json_schema() for k in BACKENDS if k.spec is not None],
                "description": f"the model under test: kind one of {BACKENDS.names()}"}


class GenerateSpec(_Strict):
    """``generate:`` of a source: the model under test, the API, k samples and the parameters.
    ``model`` is any registered backend's entry (validated by that kind's spec model)."""

    model: Annotated[Any, _BackendEntry()]
    api: Literal["chat", "completions"] = "chat"
    k: int = Field(1, ge=1)
    params: SamplingParams = Field(default_factory=SamplingParams)
    seed: int = 0
    max_connections: int = Field(16, ge=1)
    system: str | None = None
    reuse: Literal["auto", "across_nights"] = Field(
        "auto", description="nightly only: 'auto' reuses last nights' completions only when the "
        "model's identity is proven unchanged (hf: the weights' checksum; function: its code; "
        "openai: a revision declared revision_immutable), else each night asks afresh (a rerun "
        "of the same night still resumes); 'across_nights': reuse whenever the identity key "
        "matches (you vouch that the served weights did not change)")

    @field_validator("model", mode="before")
    @classmethod
    def _backend(cls, v: Any) -> Any:
        return backend_spec(v)

    @model_validator(mode="after")
    def _system_needs_chat(self) -> GenerateSpec:
        if self.system is not None and self.api != "chat":
            raise ValueError("system: a system prompt needs api: chat (the completions API takes "
                             "one text); put it into the prompt instead")
        return self


def backend_spec(v: Any) -> BaseModel:
    """Validate a ``model:`` entry against the spec model its ``kind`` registered."""
    if isinstance(v, BaseModel):
        return v
    if not isinstance(v, dict) or "kind" not in v:
        raise SpecError(f"model: expected a mapping with 'kind' (one of {BACKENDS.names()}), got {v!r:.80}")
    kind = BACKENDS.get(v["kind"])
    if kind.spec is None:
        raise SpecError(f"model backend {v['kind']!r} registered no spec model")
    return kind.spec.model_validate(v)
