"""The ``function`` backend: a user's ``module:callable`` that takes prompts, returns completions.

For clients assay does not ship; cached and resumed like the other backends.

The callable is called by its parameter names (:mod:`assay.binding`): ``prompts`` (the rendered
prompts: message lists for ``api: chat``, texts for ``completions``) and, when it takes them,
``seeds`` (one per prompt) and ``params`` (the sampling parameters as a dict). It returns one
item per prompt: a string, or a
dict ``{"completion", "finish_reason", "prompt_tokens", "completion_tokens"}``; ``None`` or a
dict with ``"error"`` makes that one an error record. Its identity is the reference,
:func:`assay.hashing.code_identity` (its ``version``, else its module source and local helpers)
and the spec's ``revision``: editing the function recomputes.

Liveness: the callable is called once per chunk of ``CHUNK`` requests, in this thread; every
answer of a chunk is committed (one record per request) as soon as the call returns, so the call
ends when the callable's calls do. A callable that raises ends the call with its exception
(what earlier chunks committed stays); one that never returns is what the run's stall detector
reports (nothing here can interrupt a Python call safely).

Example:
    >>> b = FunctionBackend({"kind": "function", "callable": "assay.models.function:echo"})
    >>> b.identity()["callable"]
    'assay.models.function:echo'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import ClassVar

from assay.binding import Binding
from assay.errors import GenerationError, SpecError
from assay.hashing import code_identity
from assay.models.base import Rendered, Request, render_messages
from assay.models.registry import BACKENDS
from assay.models.specs import FunctionSpec, SamplingParams
from assay.registry import load_callable

#: Requests handed to the callable per call (each call's answers are committed together).
CHUNK = 64


def echo(prompts: list[Rendered]) -> list[str]:
    """A trivial model for examples and tests: answers each prompt with its last user turn."""
    return [p if isinstance(p, str) else p[-1]["content"] for p in prompts]


@BACKENDS.register(
    "function", spec=FunctionSpec, help="a module:callable taking prompts, returning completions"
)
class FunctionBackend:
    """Calls ``spec.callable`` on chunks of rendered prompts (see module docstring)."""

    kind = "function"
    #: the spec field naming the user's code; ``assay validate`` builds the backend to check it
    user_code_field: ClassVar[str] = "callable"

    def __init__(self, spec: FunctionSpec | Mapping[str, object]) -> None:
        self.spec = spec if isinstance(spec, FunctionSpec) else FunctionSpec.model_validate(spec)
        self.fn: Callable[..., object] = load_callable(self.spec.callable, what="model.callable")
        self._bind = Binding(self.fn, ("prompts", "seeds", "params"),
                             what=f"model.callable {self.spec.callable!r}")
        if "prompts" not in self._bind.takes:
            raise SpecError(f"model.callable {self.spec.callable!r} takes no 'prompts' parameter; "
                            "it is called as f(prompts), f(prompts, seeds) or f(prompts, seeds, "
                            "params), by parameter name")
        self._code = code_identity(self.fn, version=self.spec.version,
                                   what=f"model.callable {self.spec.callable!r}")

    def identity(self) -> dict[str, object]:
        return {"backend": "function", "callable": self.spec.callable, "code": self._code,
                "revision": self.spec.revision}

    def render(self, messages: list[dict[str, str]], api: str) -> Rendered:
        return render_messages(messages, api)

    def run(self, requests: list[Request], params: SamplingParams, *, api: str,
            max_connections: int, commit: Callable[[Request, dict[str, object]], None]) -> None:
        for lo in range(0, len(requests), CHUNK):
            chunk = requests[lo:lo + CHUNK]
            t0 = time.monotonic()
            out = self._bind.call({"prompts": [r.rendered for r in chunk],
                                   "seeds": [r.seed for r in chunk],
                                   "params": params.model_dump(mode="json")})
            latency = round((time.monotonic() - t0) / len(chunk), 6)
            out = list(out) if out is not None else None
            if out is None or len(out) != len(chunk):
                raise GenerationError(f"model.callable {self.spec.callable}: returned "
                                      f"{'None' if out is None else len(out)} completions for "
                                      f"{len(chunk)} prompts; return one per prompt")
            for r, o in zip(chunk, out):
                commit(r, self._record(o, latency))

    def _record(self, o: object, latency: float) -> dict[str, object]:
        base = {"latency_s": latency, "retries": 0, "served_model": self.spec.callable,
                "prompt_tokens": None, "completion_tokens": None, "finish_reason": None}
        if isinstance(o, str):
            return {
                **base,
                "status": "ok",
                "completion": o,
                "reason": None,
                "finish_reason": "stop",
            }
        if isinstance(o, dict) and isinstance(o.get("completion"), str) and not o.get("error"):
            return {
                **base,
                "status": "ok",
                "completion": o["completion"],
                "reason": None,
                "finish_reason": o.get("finish_reason", "stop"),
                "prompt_tokens": o.get("prompt_tokens"),
                "completion_tokens": o.get("completion_tokens"),
            }
        why = (
            o.get("error")
            if isinstance(o, dict) and o.get("error")
            else f"returned {o!r:.80}, not a string"
        )
        return {
            **base,
            "status": "error",
            "completion": None,
            "reason": f"model.callable {self.spec.callable}: {why}",
        }

    def close(self) -> None:
        pass
