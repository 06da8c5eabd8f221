"""The reward-model kinds a spec can name: the bundled embedder, a transformers model, a function.

Each entry builds its adapter and states its identity without loading it (a cached rerun never
imports torch); the loaded adapter's own ``fingerprint`` is stored with the results.

Example:
    >>> from assay.reward.registry import REWARD_MODELS
    >>> REWARD_MODELS.names()
    ['embedding', 'function', 'hf']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from assay.hashing import code_identity, dir_digest
from assay.libguard import TRANSFORMERS
from assay.paths import Paths
from assay.registry import load_callable
from assay.reward.registry import REWARD_MODELS
from assay.specbase import SpecModel, version_field


class RewardModelEntry(SpecModel):
    """Base of a ``reward.models`` entry: a name, adapter keyword arguments, build + identity."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    params: dict[str, Any] = Field(default_factory=dict, description="adapter keyword arguments")

    def build(self, paths: Paths) -> Any:
        raise NotImplementedError

    def identity(self, paths: Paths) -> dict[str, object]:
        return {"kind": self.kind,  # type: ignore[attr-defined]  # declared by each subclass
                "params": self.params}

    def local_device(self) -> str | None:
        """Where the model's weights run (``params.device``, default ``auto``); None for a
        model that holds no device (a Python function)."""
        return str(self.params.get("device", "auto"))


@REWARD_MODELS.register("embedding")
class EmbeddingModel(RewardModelEntry):
    """The bundled all-MiniLM-L6-v2 embedding reward model (or another sentence-transformers
    folder given as ``params.path``)."""

    kind: Literal["embedding"]

    def warm_imports(self) -> tuple[str, ...]:
        """What the encoder :func:`~assay.reward.sentence_encoder.load_encoder` picks imports:
        torch and tokenizers (the direct BERT path), transformers' AutoModel, or
        sentence-transformers itself (imported before the study's nodes run side by side:
        assay.libguard)."""
        from assay.libguard import TRANSFORMERS
        from assay.reward.bert import bert_reason
        from assay.reward.embedding import bundled_model_path
        from assay.reward.sentence_encoder import direct_reason

        path = self.params.get("path") or bundled_model_path()
        backend = self.params.get("backend", "auto")
        library = (*TRANSFORMERS, "sentence_transformers")
        try:
            if backend == "sentence-transformers" or direct_reason(path) is not None:
                return library
            if backend == "auto" and bert_reason(path) is None:
                return ("torch", "tokenizers")
        except Exception:  # noqa: BLE001 (a folder it cannot read: building it says why)
            return library
        return (*TRANSFORMERS, "transformers:AutoModel")

    def build(self, paths: Paths) -> Any:
        from assay.reward.embedding import EmbeddingRewardModel

        return EmbeddingRewardModel(**self.params)

    def identity(self, paths: Paths) -> dict[str, object]:
        from assay.reward.embedding import bundled_model_path

        path = self.params.get("path")
        return {**super().identity(paths),
                "files": dir_digest(paths.resolve(path) if path else bundled_model_path())}


@REWARD_MODELS.register("hf")
class HFModel(RewardModelEntry):
    """A transformers sequence-classification reward model: a hub id (pin ``revision``) or a
    local folder (relative to the spec)."""

    #: imported before the study's nodes run side by side (assay.libguard)
    WARM_IMPORTS: ClassVar[tuple[str, ...]] = (
        *TRANSFORMERS, "transformers:AutoModelForSequenceClassification")

    kind: Literal["hf"]
    path: str = Field(description="model id or local path")
    revision: str | None = None

    def build(self, paths: Paths) -> Any:
        from assay.reward.hf import HFRewardModel

        local = paths.resolve(self.path)
        return HFRewardModel(str(local) if local.exists() else self.path, revision=self.revision,
                             **self.params)

    def identity(self, paths: Paths) -> dict[str, object]:
        local = paths.resolve(self.path)
        if local.is_dir():
            return {**super().identity(paths), "files": dir_digest(local)}
        # a hub id: pin `revision` to a commit hash for a key that cannot go stale
        return {**super().identity(paths), "hub": {"id": self.path, "revision": self.revision}}


@REWARD_MODELS.register("function")
class FunctionModel(RewardModelEntry):
    """A Python function scoring batches: ``module:callable`` called once per batch as
    ``fn(prompts, completions)`` (by parameter name, any order; ``responses`` also accepted)
    with two equal-length lists, returning one score per pair (``params: {batch_size: N}`` caps
    a batch, default all items of a call; ``params: {batched: false}`` calls
    ``fn(prompt, completion)`` per pair instead)."""

    #: the spec field naming the user's code; ``assay validate`` builds the entry to check it
    user_code_field: ClassVar[str] = "function"
    kind: Literal["function"]
    function: str = Field(description="'module:callable' called once per batch as fn(prompts, "
                                      "completions) by parameter name -> one number per pair "
                                      "(params: batch_size caps a batch; batched: false for "
                                      "fn(prompt, completion) per pair)")
    version: str | None = version_field("cached scores")

    @field_validator("function")
    @classmethod
    def _ref(cls, v: str) -> str:
        if ":" not in v:
            raise ValueError("kind 'function' needs function: 'package.module:callable'")
        return v

    def local_device(self) -> str | None:
        return None  # plain Python: no weights, no device

    def _callable(self, paths: Paths) -> Callable[..., object]:
        return load_callable(self.function, what=f"reward model {self.name!r}",
                             base_dir=paths.base_dir)

    def build(self, paths: Paths) -> Any:
        from assay.reward.function import FunctionRewardModel

        return FunctionRewardModel(self._callable(paths), version=self.version,
                                   base_dir=paths.base_dir,
                                   **{"batched": True, **self.params, "by_name": True})

    def identity(self, paths: Paths) -> dict[str, object]:
        fn = None if self.version is not None else self._callable(paths)
        return {**super().identity(paths),
                "function": {"name": self.function, **code_identity(
                    fn, version=self.version, base_dir=paths.base_dir,
                    what=f"reward model {self.name!r}")}}

