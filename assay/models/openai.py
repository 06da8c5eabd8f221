"""The ``openai`` backend: any OpenAI-compatible server, one request per sample, over httpx.

Retries 408/429/5xx/timeouts with jittered backoff honouring Retry-After; concurrency adapts on 429.

One request per sample (not ``n=k``): each sample then has its own seed, cache entry and retry,
and vLLM's ``n`` with a seed is not equivalent to k seeded requests (vLLM #7808). Every sampling
parameter is sent explicitly. A 4xx other than 408/429 stops the run with the server's message
(a bad request will not get better); a request whose retries run out becomes an error record
(``status: "error"``, ``completion: None``) that the next run asks again.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from assay.errors import GenerationError, SpecError
from assay.models.base import Request, render_messages
from assay.models.registry import BACKENDS
from assay.models.specs import OpenAISpec, SamplingParams

if TYPE_CHECKING:  # httpx loads on first request: a spec that names no server never pays for it
    import httpx

RETRY_STATUS = {408, 429}
#: Backoff: base * 2**attempt seconds, full jitter, capped per wait.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
#: On a 429 the concurrency limit is multiplied by this (inspect uses 0.8); it grows back by one
#: after this many successes in a row.
DECREASE = 0.8
GROW_AFTER = 8
#: /v1/models fields that identify the served checkpoint (``created`` and permission ids change
#: on every server restart, so they stay out of the cache key).
IDENTITY_FIELDS = ("id", "object", "owned_by", "root", "parent", "max_model_len")


class AdaptiveLimit:
    """A concurrency limit between 1 and ``high``: x0.8 on a 429, +1 after a run of successes.

    Requests run on ``high`` lanes (one connection each); lane ``i`` sends only while
    ``i < limit``, so a cut parks the top lanes until successes raise the limit again."""

    def __init__(self, high: int) -> None:
        self.high = high
        self.limit = float(high)
        self.streak = 0
        self.min_seen = high
        self._cond: asyncio.Condition | None = None

    def open(self, lane: int) -> bool:
        return lane < max(1, int(self.limit))

    async def admit(self, lane: int) -> None:
        """Wait until ``lane`` may send."""
        if self.open(lane):
            return
        if self._cond is None:
            self._cond = asyncio.Condition()
        async with self._cond:
            await self._cond.wait_for(lambda: self.open(lane))

    def throttled(self) -> None:
        self.limit = max(1.0, self.limit * DECREASE)
        self.min_seen = min(self.min_seen, int(self.limit))
        self.streak = 0

    async def succeeded(self) -> None:
        self.streak += 1
        if self.streak >= GROW_AFTER and self.limit < self.high:
            self.limit = min(float(self.high), self.limit + 1)
            self.streak = 0
            if self._cond is not None:
                async with self._cond:
                    self._cond.notify_all()


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), or None.

    Example:
        >>> retry_after_s("2"), retry_after_s(None), retry_after_s("soon")
        (2.0, None, None)
    """
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(resp: httpx.Response) -> str:
    try:
        doc = resp.json()
        err = doc.get("error", doc) if isinstance(doc, dict) else doc
        msg = err.get("message", err) if isinstance(err, dict) else err
        return str(msg)[:500]
    except ValueError:
        return resp.text[:500]


class _Fatal(Exception):
    pass


@BACKENDS.register("openai", spec=OpenAISpec, help="an OpenAI-compatible server (vLLM, SGLang, TGI, OpenAI)")
class OpenAIBackend:
    """Client of one model on one OpenAI-compatible server (see module docstring).

    ``stats`` after a run: ``sent`` HTTP requests, ``retries``, ``min_limit`` (lowest adaptive
    concurrency reached)."""

    kind = "openai"

    def __init__(self, spec: OpenAISpec | dict[str, Any]) -> None:
        self.spec = spec if isinstance(spec, OpenAISpec) else OpenAISpec.model_validate(spec)
        self.headers = {"Content-Type": "application/json"}
        if self.spec.api_key_env:
            key = os.environ.get(self.spec.api_key_env)
            if not key:
                raise SpecError(f"model.api_key_env: environment variable {self.spec.api_key_env!r} "
                                "is not set; export the API key or remove api_key_env")
            self.headers["Authorization"] = f"Bearer {key}"
        # plain http needs no certificates: loading the CA bundle costs ~0.2 s per client
        self._verify = self.spec.base_url.startswith("https://")
        self._identity: dict[str, Any] | None = None
        self.stats: dict[str, int] = {"sent": 0, "retries": 0, "min_limit": 0}

    def identity(self) -> dict[str, Any]:
        """Model name, base URL, pinned revision and what ``/v1/models`` reports for the model
        (asked on every call: one small request per generate call, so a server that now serves
        another checkpoint under the same name is noticed)."""
        import httpx

        url = f"{self.spec.base_url}/models"
        try:
            resp = httpx.get(url, headers=self.headers, timeout=self.spec.timeout_s, verify=self._verify)
        except httpx.HTTPError as e:
            raise GenerationError(f"model.base_url: cannot reach {url} ({type(e).__name__}: {e}); "
                                  "is the server up?") from None
        if resp.status_code == 404:
            served: Any = "no /v1/models endpoint"
        elif resp.status_code >= 400:
            raise GenerationError(f"GET {url} answered HTTP {resp.status_code}: {_server_message(resp)}")
        else:
            data = resp.json().get("data") or []
            entry = next((m for m in data if isinstance(m, dict) and m.get("id") == self.spec.model), None)
            if entry is None:
                ids = [m.get("id") for m in data if isinstance(m, dict)]
                raise GenerationError(f"model.model: {self.spec.model!r} is not served at "
                                      f"{self.spec.base_url}; it serves {ids}")
            served = {f: entry[f] for f in IDENTITY_FIELDS if f in entry}
        self._identity = {"backend": "openai", "base_url": self.spec.base_url,
                          "model": self.spec.model, "revision": self.spec.revision,
                          "served": served}
        return self._identity

    def render(self, messages: list[dict[str, str]], api: str) -> Any:
        """Chat: the message list as sent; completions: the prompt text (single user turn)."""
        return render_messages(messages, api)

    # -- requests ----------------------------------------------------------------------------
    def body(self, req: Request, params: SamplingParams, api: str) -> dict[str, Any]:
        """The JSON body of one request: every sampling parameter explicit, the sample's seed."""
        body: dict[str, Any] = {"model": self.spec.model}
        body["messages" if api == "chat" else "prompt"] = req.rendered
        body.update(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
                    stop=list(params.stop), presence_penalty=params.presence_penalty,
                    frequency_penalty=params.frequency_penalty, seed=req.seed, n=1)
        body.update(params.extra)
        return body

    def run(self, requests: list[Request], params: SamplingParams, *, api: str,
            max_connections: int, commit: Callable[[Request, dict[str, Any]], None]) -> None:
        """Send every request (``max_connections`` at a time), calling ``commit`` per answer."""
        if not requests:
            return
        coro = self._run(requests, params, api, max_connections, commit)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(coro)
            return
        # called from inside an event loop (a notebook, an async flow): run on a thread of our own
        err: list[BaseException] = []

        def target() -> None:
            try:
                asyncio.run(coro)
            except BaseException as e:  # re-raised in the caller's thread
                err.append(e)

        t = threading.Thread(target=target, name="assay-openai")
        t.start()
        t.join()
        if err:
            raise err[0]

    async def _run(self, requests: list[Request], params: SamplingParams, api: str,
                   max_connections: int, commit: Callable[[Request, dict[str, Any]], None]) -> None:
        import httpx

        limit = AdaptiveLimit(max_connections)
        path = "/chat/completions" if api == "chat" else "/completions"
        queue = list(reversed(requests))  # lanes pop from the end: requests go out in order
        verify = ssl.create_default_context() if self._verify else False  # one CA load, shared

        # One client per lane, each with one keep-alive connection: httpx's pool does work
        # linear in its connections on every request, so one pool of 16 costs more CPU than
        # the server's answers at high request rates.
        async def lane(i: int) -> None:
            async with httpx.AsyncClient(base_url=self.spec.base_url, headers=self.headers,
                                         limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                                         verify=verify, timeout=httpx.Timeout(self.spec.timeout_s)) as client:
                while queue:
                    await limit.admit(i)
                    if not queue:
                        return
                    await self._one(client, limit, i, path, queue.pop(), params, api, commit)

        tasks = [asyncio.create_task(lane(i)) for i in range(min(max_connections, len(requests)))]
        try:
            await asyncio.gather(*tasks)
        except _Fatal as e:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise GenerationError(str(e)) from None
        self.stats["min_limit"] = limit.min_seen

    async def _one(self, client: httpx.AsyncClient, limit: AdaptiveLimit, lane: int, path: str,
                   req: Request, params: SamplingParams, api: str,
                   commit: Callable[[Request, dict[str, Any]], None]) -> None:
        import httpx

        body = self.body(req, params, api)
        start = time.monotonic()
        attempt = 0
        while True:
            why, wait_hint = "", None
            if attempt:
                await limit.admit(lane)  # a lane parked by a 429 cut waits before its retry too
            t0 = time.monotonic()
            self.stats["sent"] += 1
            try:
                resp = await client.post(path, json=body)
            except httpx.TimeoutException as e:
                why = f"timeout after {self.spec.timeout_s:g}s ({type(e).__name__})"
            except httpx.TransportError as e:
                why = f"connection error ({type(e).__name__}: {e})"
            else:
                code = resp.status_code
                if code < 400:
                    await limit.succeeded()
                    commit(req, self._record(resp, api, time.monotonic() - t0, attempt))
                    return
                msg = _server_message(resp)
                if code not in RETRY_STATUS and code < 500:
                    raise _Fatal(f"POST {self.spec.base_url}{path} answered HTTP {code}: {msg} "
                                 f"(prompt {req.prompt_index}, sample {req.sample_index}); a "
                                 "4xx other than 408/429 is not retried: fix the request or spec")
                if code == 429:
                    limit.throttled()
                why = f"HTTP {code}: {msg}"
                wait_hint = retry_after_s(resp.headers.get("retry-after"))
            backoff = random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** attempt))
            wait = max(backoff, wait_hint) if wait_hint is not None else backoff
            elapsed = time.monotonic() - start
            if attempt >= self.spec.max_retries or elapsed + wait > self.spec.retry_total_s:
                cap = (f"{attempt} retries" if attempt >= self.spec.max_retries
                       else f"the {self.spec.retry_total_s:g}s retry cap")
                commit(req, {"status": "error", "completion": None, "finish_reason": None,
                             "reason": f"{why}; gave up after {cap}", "prompt_tokens": None,
                             "completion_tokens": None, "served_model": None,
                             "latency_s": round(elapsed, 6), "retries": attempt})
                return
            attempt += 1
            self.stats["retries"] += 1
            await asyncio.sleep(wait)

    def _record(self, resp: httpx.Response, api: str, latency: float, retries: int) -> dict[str, Any]:
        base = {"latency_s": round(latency, 6), "retries": retries}
        try:
            doc = resp.json()
            choice = doc["choices"][0]
            text = choice["message"].get("content") if api == "chat" else choice.get("text")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return {**base, "status": "error", "completion": None, "finish_reason": None,
                    "reason": f"server answered HTTP {resp.status_code} without a completion: "
                              f"{resp.text[:200]!r}", "prompt_tokens": None,
                    "completion_tokens": None, "served_model": None}
        usage = doc.get("usage") or {}
        rec = {**base, "finish_reason": choice.get("finish_reason"),
               "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
               "served_model": doc.get("model")}
        if not isinstance(text, str):
            return {**rec, "status": "error", "completion": None,
                    "reason": f"server returned no text content (finish_reason {choice.get('finish_reason')!r})"}
        return {**rec, "status": "ok", "completion": text, "reason": None}

    def close(self) -> None:
        pass
