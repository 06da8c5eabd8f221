"""Log-likelihood scoring through an OpenAI-protocol ``/v1/completions`` endpoint that echoes
the prompt with per-token logprobs (``echo: true, logprobs: 1``), as lm-eval's
``local-completions`` model does.

One request per ``(context, continuation)``: the prompt is their concatenation (a trailing space
of the context moved to the continuation, as lm-eval does), ``max_tokens: 1``, temperature 0.
The continuation's tokens are the echoed prompt tokens whose ``text_offset`` lies at or after
the end of the context, so the server's own tokenizer decides the boundary; a token that spans
the boundary counts with the context (the server gave one logprob for both). ``is_greedy``: each
continuation token's logprob is the top of its ``top_logprobs``. An empty context has no token
to condition on through this API and is refused.

Which servers answer: vLLM's OpenAI server (echo with logprobs on /v1/completions); OpenAI
itself only for its legacy completion models (babbage-002, davinci-002); SGLang's OpenAI
completions (echo with logprobs). llama.cpp's server and TGI's OpenAI route return no prompt
logprobs there (TGI has them on its native ``/generate`` with ``decoder_input_details``); vLLM's
``prompt_logprobs`` extension is not used here. Tested against a loopback server that serves a
tiny transformers model's logprobs in this protocol.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from assay.errors import GenerationError
from assay.models.scorers import SCORERS, Loglik
from assay.models.specs import ModelEntry

if TYPE_CHECKING:
    import httpx

RETRY_STATUSES = (408, 429, 500, 502, 503, 504)


@SCORERS.register("openai")
class OpenAIScorer:
    """Scores pairs on an ``openai`` model entry (module docstring); identity as the generation
    backend's (``/v1/models``' answer for the model, base URL, pinned revision)."""

    no_rolling = (
        "a document's perplexity is scored in windows of the model's context, cut by its "
        "tokenizer; the OpenAI protocol gives the client neither (and several servers, "
        "transformers serve among them, ignore echo and logprobs); score the checkpoint with "
        "kind: hf")

    def __init__(self, spec: ModelEntry) -> None:
        from assay.models.registry import BACKENDS

        self.backend = BACKENDS.get("openai").obj(spec)
        self.spec = self.backend.spec
        self.device = "remote"
        self.stats = {"requests": 0, "retries": 0}

    def identity(self) -> dict[str, object]:
        return {**self.backend.identity(), "scorer": "openai-echo-loglik/1"}

    def _post(self, client: httpx.Client, body: dict[str, object]) -> Any:
        import httpx

        url = f"{self.spec.base_url}/completions"
        start = time.monotonic()
        for attempt in range(self.spec.max_retries + 1):
            self.stats["requests"] += 1
            try:
                resp = client.post(url, json=body, timeout=self.spec.timeout_s)
            except httpx.TimeoutException:
                resp = None
            if resp is not None and resp.status_code < 400:
                return resp.json()
            status = None if resp is None else resp.status_code
            if status not in (None, *RETRY_STATUSES) or attempt == self.spec.max_retries or \
                    time.monotonic() - start > self.spec.retry_total_s:
                text = "timed out" if resp is None else f"HTTP {status}: {resp.text[:200]}"
                raise GenerationError(f"POST {url} (echo logprobs) failed: {text}")
            self.stats["retries"] += 1
            wait = 0.5 * 2 ** attempt
            if resp is not None and resp.headers.get("retry-after", "").replace(".", "").isdigit():
                wait = float(resp.headers["retry-after"])
            time.sleep(min(wait, 30.0))
        raise AssertionError("unreachable")

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Loglik]:
        import httpx

        out = []
        with httpx.Client(headers=self.backend.headers) as client:
            for i, (context, continuation) in enumerate(pairs):
                out.append(self._one(client, i, context, continuation))
        return out

    def _one(self, client: httpx.Client, i: int, context: str, continuation: str) -> Loglik:
        if context == "":
            raise GenerationError(f"request {i}: an empty context cannot be scored through "
                                  "/v1/completions (no token to condition on); give a context")
        n = len(context) - len(context.rstrip())
        if n:
            context, continuation = context[:-n], context[-n:] + continuation
        prompt = context + continuation
        doc = self._post(client, {"model": self.spec.model, "prompt": prompt, "max_tokens": 1,
                                  "temperature": 0.0, "echo": True, "logprobs": 1})
        try:
            lp = doc["choices"][0]["logprobs"]
            offsets, values, tops = lp["text_offset"], lp["token_logprobs"], lp["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise GenerationError(f"request {i}: the server's answer has no echoed logprobs "
                                  "(choices[0].logprobs.text_offset/token_logprobs/top_logprobs); "
                                  "this server does not support echo with logprobs") from None
        total, greedy, count = 0.0, True, 0
        for off, v, top in zip(offsets, values, tops):
            if off < len(context) or off >= len(prompt):
                continue  # a context token, or the generated one after the prompt
            if v is None:
                raise GenerationError(f"request {i}: no logprob for the continuation token at "
                                      f"offset {off}")
            total += v
            count += 1
            greedy = greedy and top is not None and v >= max(top.values()) - 1e-6
        if count == 0:
            raise GenerationError(f"request {i}: the continuation {continuation!r} got no token "
                                  "of its own in the server's tokenization")
        return Loglik(float(total), bool(greedy), count)

