"""Which request parameter a server refused (HTTP 400/422), and the spec field that sets it.

Servers differ in what they accept; the error of a refused request names the parameter, quotes the
server and says where in the spec the value came from, so the fix is one edit.

Example:
    >>> body = {"model": "m", "messages": [], "temperature": 0.0, "top_k": 5}
    >>> rejected_parameter("Unexpected fields in the request: {'top_k'}", body)
    'top_k'
    >>> spec_field("top_k", "generate"), spec_field("max_tokens", "judge")
    ('generate.params.extra.top_k', 'verifier.params.max_tokens')
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from assay.errors import GenerationError

#: Body fields of a generation request and the ``generate:`` field each comes from (anything
#: else in a body came from ``generate.params.extra``).
GENERATE_FIELDS = {
    "model": "generate.model.model", "messages": "the prompt (source fields, generate.system)",
    "prompt": "the prompt (source fields)", "temperature": "generate.params.temperature",
    "top_p": "generate.params.top_p", "max_tokens": "generate.params.max_tokens",
    "stop": "generate.params.stop", "presence_penalty": "generate.params.presence_penalty",
    "frequency_penalty": "generate.params.frequency_penalty",
    "seed": "generate.seed (each sample's seed is derived from it)",
}
#: A judge's requests: what ``verifier: {kind: judge, params: ...}`` sets (temperature 0 and
#: top_p 1 are the judge's own: a judge is asked greedily).
JUDGE_FIELDS = {
    "model": "verifier.params.model.model", "messages": "verifier.params.template",
    "prompt": "verifier.params.template", "max_tokens": "verifier.params.max_tokens",
    "seed": "verifier.params.seed", "temperature": "the judge's fixed temperature 0",
    "top_p": "the judge's fixed top_p 1",
}


def rejected_parameter(message: str, body: Mapping[str, object]) -> str | None:
    """The body field a server's refusal names: one quoted in the message first (``'top_k'``,
    `` `stop` ``), else one named as a word (``Stop string ...``); None when none is."""
    fields = [f for f in body if f not in ("messages", "prompt")] + ["messages", "prompt"]
    model = body.get("model")
    if isinstance(model, str) and re.search(rf"['\"`]{re.escape(model)}['\"`]", message):
        return "model"  # the model's own name quoted: "requested 'nope'"
    for f in fields:
        if re.search(rf"['\"`]{re.escape(f)}['\"`]", message):
            return f
    for f in fields:
        if f in body and re.search(rf"(?<![\w.]){re.escape(f).replace('_', '[_ ]')}(?![\w])",
                                   message, re.IGNORECASE):
            return f
    return None


def spec_field(param: str, stage: str) -> str:
    """The spec field that sets body field ``param`` for a ``stage`` (``generate``/``judge``)."""
    table = JUDGE_FIELDS if stage == "judge" else GENERATE_FIELDS
    if param in table:
        return table[param]
    return f"generate.params.extra.{param}"


class RequestRejected(GenerationError):
    """A server refused a request (a 4xx other than 408/429): the server's message, the
    parameter it names (or None) and the request it refused; :meth:`for_stage` names the spec
    field."""

    def __init__(self, text: str, *, status: int, message: str, param: str | None) -> None:
        super().__init__(text)
        self.text, self.status, self.message, self.param = text, status, message, param

    def for_stage(self, stage: str) -> GenerationError:
        """The error as the user reads it: which field of the spec to change."""
        if self.param is None:
            return GenerationError(f"{self.text}; a 4xx other than 408/429 is not retried: fix "
                                   "the request or the spec")
        return GenerationError(f"{self.text}; the server refused parameter {self.param!r}, set "
                               f"by {spec_field(self.param, stage)}: change or remove it for "
                               "this server")
