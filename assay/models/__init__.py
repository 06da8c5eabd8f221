"""Models in the loop: sample completions from the model under test, cached and resumable.

Backends ``openai`` (HTTP), ``hf`` (local transformers) and ``function`` register in BACKENDS.
"""

from assay.models.entry import GenerateSpec
from assay.models.generation import Generations, generate, make_backend
from assay.models.registry import BACKENDS
from assay.models.specs import FunctionSpec, HFSpec, OpenAISpec, SamplingParams

__all__ = ["BACKENDS", "FunctionSpec", "GenerateSpec", "Generations", "HFSpec", "OpenAISpec",
           "SamplingParams", "generate", "make_backend"]
