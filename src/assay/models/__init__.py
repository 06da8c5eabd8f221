"""Models in the loop: sample completions from the model under test, cached and resumable.

Backends ``openai`` (HTTP), ``hf`` (local transformers) and ``function`` register in BACKENDS.
"""

# The built-in backends register on import (torch and httpx load only when a backend is used).
from assay.models import function as function
from assay.models import hf as hf
from assay.models import openai as openai
from assay.models.generation import Generations, generate, make_backend
from assay.models.registry import BACKENDS
from assay.models.specs import FunctionSpec, GenerateSpec, HFSpec, OpenAISpec, SamplingParams

__all__ = ["BACKENDS", "FunctionSpec", "GenerateSpec", "Generations", "HFSpec", "OpenAISpec",
           "SamplingParams", "generate", "make_backend"]
