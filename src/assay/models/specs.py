"""The spec models of the models package: a source's ``generate:`` entry (the model under test
as any registered backend, the API, k, the sampling parameters, the seed), each backend's entry
and the sampling parameters they all take.

Every field has a default that is sent or applied explicitly, so a cache key names the full config.

Example:
    >>> p = SamplingParams(temperature=0.7)
    >>> p.top_p, p.max_tokens, p.stop
    (1.0, 512, [])
    >>> g = GenerateSpec.model_validate({"model": {"kind": "function", "callable": "m:f"}, "k": 2})
    >>> g.model.kind, g.k, g.params.temperature, g.params.max_tokens
    ('function', 2, 1.0, 512)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import BaseModel, Field, GetJsonSchemaHandler, field_validator, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from assay.errors import SpecError
from assay.libguard import TRANSFORMERS
from assay.models.registry import BACKENDS
from assay.specbase import QuietSpecModel, version_field
from assay.specbase import SpecModel as _Strict


class SamplingParams(_Strict):
    """Every sampling parameter, with the value used when the spec leaves it out; all are part of
    each completion's cache key. An OpenAI-protocol server is always sent temperature, top_p and
    max_tokens (vLLM fills unset ones from the model's generation config), ``stop`` and the
    penalties only when set (their defaults are the protocol's; some servers refuse
    ``stop: []``). ``extra`` is passed through verbatim to OpenAI-protocol servers (e.g. vLLM's
    ``top_k``, ``min_p``, ``repetition_penalty``)."""

    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(512, ge=1)
    stop: list[str] = Field(default_factory=list)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    extra: dict[str, object] = Field(default_factory=dict)

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, v: list[str]) -> list[str]:
        if any(s == "" for s in v):
            raise ValueError("an empty stop string would stop every completion at once; remove it")
        return v

    @field_validator("extra")
    @classmethod
    def _extra_not_core(cls, v: dict[str, object]) -> dict[str, object]:
        clash = sorted(set(v) & {"temperature", "top_p", "max_tokens", "stop", "presence_penalty",
                                 "frequency_penalty", "seed", "n", "model", "messages", "prompt"})
        if clash:
            raise ValueError(f"extra must not set {clash}: give them as params fields (seed is "
                             "derived per sample from generate.seed)")
        return v


class OpenAISpec(_Strict):
    """An OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp server, OpenAI)."""

    kind: Literal["openai"] = "openai"
    base_url: str = Field(description="the server's API root, e.g. http://127.0.0.1:8000/v1")
    model: str = Field(description="the served model name sent as 'model'")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    revision: str | None = Field(None, description="a checkpoint revision you pin; part of the "
                                 "cache key")
    revision_immutable: bool = Field(
        False, description="you vouch that the weights behind this revision never change: a "
        "nightly then reuses earlier nights' completions of it (a server cannot prove it)")
    timeout_s: float = Field(120.0, gt=0, description="seconds one request may take")
    max_retries: int = Field(8, ge=0, description="retries of 408/429/5xx/timeouts per request")
    retry_total_s: float = Field(900.0, gt=0,
                                 description="cap on the time one request spends retrying")

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url {v!r} must start with http:// or https://")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _immutable_needs_revision(self) -> OpenAISpec:
        if self.revision_immutable and not self.revision:
            raise ValueError("revision_immutable: needs the revision it vouches for; set revision")
        return self


class HFSpec(QuietSpecModel):
    """A local transformers causal LM: a local directory, or a hub id with a ``revision``."""

    QUIET: ClassVar[dict[str, object]] = {"max_length": None}

    #: imported before the study's nodes run side by side (assay.libguard)
    WARM_IMPORTS: ClassVar[tuple[str, ...]] = (*TRANSFORMERS, "transformers:AutoModelForCausalLM")

    #: its tokenizer's chat template is rendered into the prompt text here (lm-eval's HFLM
    #: does the same), not sent as messages (:func:`renders_chat_template`)
    TEXT_CHAT_TEMPLATE: ClassVar[bool] = True

    kind: Literal["hf"] = "hf"
    path: str = Field(description="local directory or hub id")
    revision: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: bfloat16 on CUDA, float32 on CPU")
    device: str | None = Field(None, description="cuda / cpu / cuda:1; default cuda when available")
    batch_tokens: int = Field(
        8192, ge=1, description="generation: padded tokens (prompt + new) per batch; "
        "log-likelihood scoring (one input per pass, for bit-identical answers): tokens scored "
        "between journal commits")
    max_length: int | None = Field(
        None, ge=2, description="log-likelihood scoring: the context window in tokens (lm-eval's "
        "model_args max_length); default: the model config's")
    trust_remote_code: bool = False

    def local_device(self) -> str:
        """Where the weights run in this process (``auto``: CUDA when available); a server
        backend's spec has no such method (the server holds its own devices)."""
        return self.device or "auto"


class FunctionSpec(_Strict):
    """A user's ``module:callable`` taking prompts and returning completions."""

    kind: Literal["function"] = "function"
    callable: str = Field(description="module:callable; called by parameter name: f(prompts), "
                          "optionally also seeds and params (any order)")
    revision: str | None = Field(None, description="bump to recompute: part of the cache key")
    version: str | None = version_field("the generations")


class _BackendEntry:
    """JSON Schema of a ``model:`` entry: any backend registered when the schema is built
    (validation goes through :func:`backend_spec`, so plugin backends validate too)."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
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
    def _backend(cls, v: object) -> BaseModel:
        return backend_spec(v)

    @model_validator(mode="after")
    def _system_needs_chat(self) -> GenerateSpec:
        if self.system is not None and self.api != "chat":
            raise ValueError("system: a system prompt needs api: chat (the completions API takes "
                             "one text); put it into the prompt instead")
        return self


#: A ``model:`` entry: a mapping read from YAML, or the spec model it validates to.
ModelEntry: TypeAlias = "Mapping[str, object] | BaseModel"


def renders_chat_template(model: object) -> bool:
    """Whether a ``model:`` entry's backend renders a chat template into the prompt text itself
    (its tokenizer's, as lm-eval's HFLM does), declared by its spec model's
    ``TEXT_CHAT_TEMPLATE``, rather than sending messages to a server that applies its own.

    Example:
        >>> renders_chat_template({"kind": "hf", "path": "m"})
        True
        >>> renders_chat_template({"kind": "openai", "base_url": "http://x/v1", "model": "m"})
        False
    """
    return bool(getattr(type(backend_spec(model)), "TEXT_CHAT_TEMPLATE", False))


def backend_spec(v: object) -> BaseModel:
    """Validate a ``model:`` entry against the spec model its ``kind`` registered."""
    if isinstance(v, BaseModel):
        return v
    if not isinstance(v, dict) or "kind" not in v:
        raise SpecError(f"model: expected a mapping with 'kind' (one of {BACKENDS.names()}), "
                        f"got {v!r:.80}")
    kind = BACKENDS.get(v["kind"])
    if kind.spec is None:
        raise SpecError(f"model backend {v['kind']!r} registered no spec model")
    return kind.spec.model_validate(v)
