"""Models in the loop: sample completions from the model under test, cached and resumable.

Backends ``openai`` (HTTP), ``hf`` (local transformers) and ``function`` register in BACKENDS.
"""

from assay.models import function as _function  # noqa: F401  (registers "function")
from assay.models import hf as _hf  # noqa: F401  (registers "hf"; torch loads only when used)
from assay.models import openai as _openai  # noqa: F401  (registers "openai")
from assay.models.generation import Generations, generate, make_backend
from assay.models.registry import BACKENDS
from assay.models.specs import FunctionSpec, GenerateSpec, HFSpec, OpenAISpec, SamplingParams

__all__ = ["BACKENDS", "FunctionSpec", "GenerateSpec", "Generations", "HFSpec", "OpenAISpec",
           "SamplingParams", "generate", "make_backend"]
