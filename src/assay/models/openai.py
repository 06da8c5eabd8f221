"""The ``openai`` backend: any OpenAI-compatible server, one request per sample, over httpx.

Retries 408/429/5xx/timeouts with jittered backoff honouring Retry-After; one adaptive connection
budget per server; a circuit breaker when every request to a server fails the same way.

One request per sample (not ``n=k``): each sample then has its own seed, cache entry and retry,
and vLLM's ``n`` with a seed is not equivalent to k seeded requests (vLLM #7808). A body holds
what the spec sets and what reproducibility needs (:meth:`OpenAIBackend.body`). A 4xx other than
408/429 stops the run with the server's message, the parameter it names and the spec field that
sets it (:mod:`assay.models.rejection`; a bad request will not get better); a request whose
retries run out becomes an error record (``status: "error"``, ``completion: None``) that the
next run asks again.

The wire: each lane holds one keep-alive connection for the whole call; where no proxy
variable is set and the base URL is plain http(s), that is a :class:`assay.models.http1.Connection`
(one write per request, ~40 us of CPU per request; httpx's client took ~0.5 ms, which left a
20 ms, 32-connection server half idle from a 2-core machine), otherwise an ``httpx.AsyncClient``.
Both send the same body bytes and count a request as sent at the same point.

Liveness (why every call ends, and who wakes each waiter):

- A call runs ``min(max_connections, len(requests))`` lanes (asyncio tasks) that take work
  from two lists: new requests, and retries with the time they are due. A lane ends when both
  are empty, and :meth:`OpenAIBackend.run` ends when every lane has; a retry is only scheduled
  by a running lane, which sees it on its next turn, so none is left without a lane. A lane
  only ever waits in three places, each with a waker and a bound:
  1. ``ServerBudget.acquire`` (a connection slot of the server). A waiter is parked only while
     ``in_flight >= allowed`` and ``allowed >= 1``, so some request holds a slot; every holder
     gives it back through ``ServerBudget.done`` (in a ``finally``: on an answer, an error, a
     timeout or a cancellation), and ``done`` grants the freed slot (and any slot a raised
     limit opens) to the parked waiters in FIFO order, across threads and event loops. A slot
     is held at most ``timeout_s`` (2.).
  2. The request itself: ``asyncio.timeout(timeout_s)`` around the whole exchange, so a server
     that accepts and never answers, or trickles bytes, ends the attempt.
  3. The sleep until a retry is due (taken when no new request is left, or when
     ``max_connections`` retries already wait): at most ``W = min(retry_total_s,
     max(BACKOFF_MAX_S, Retry-After))``, since a longer wait gives up instead. A request
     waiting out its backoff holds no lane.
- Each request makes at most ``max_retries + 1`` attempts and spends at most ``retry_total_s``
  between its first attempt and its last retry decision, so every request ends, with exactly
  one commit: its answer or an error record. While the call runs, either an attempt is in
  flight (each at most ``timeout_s``, at least one slot always allowed) or every lane sleeps
  on a retry (each at most ``W``), so a call of N requests ends within
  ``N * (max_retries + 1) * timeout_s + N * max_retries * W`` in the worst case (limit cut to 1,
  every attempt timing out); in practice N / max_connections answer times plus one request's
  retry budget. The circuit breaker cuts a dead server to about one request's retry budget.
- The circuit breaker (one per server) opens after ``BREAKER_AFTER`` requests in a row (no
  success between, from at least two prompts) gave up with the same cause. While it is open,
  requests are not sent: they commit error records at once ("not sent: ..."), and one loud
  ``warning:`` line goes to stderr. A later call probes the server with one single-attempt
  request; an answer closes the breaker.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import email.utils
import heapq
import itertools
import os
import random
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, cast

from assay import stop
from assay.cluster_slots import cluster_semaphore, give, take
from assay.errors import GenerationError, SpecError
from assay.models import http1
from assay.models.base import Rendered, Request, RunStats, render_messages, trim_at_stop
from assay.models.registry import BACKENDS
from assay.models.rejection import RequestRejected, rejected_parameter
from assay.models.specs import OpenAISpec, SamplingParams

if TYPE_CHECKING:  # httpx loads on first request: a spec that names no server never pays for it
    import httpx

RETRY_STATUS = {408, 429}
#: Backoff: base * 2**attempt seconds, full jitter, capped per wait.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
#: On a 429 the server's concurrency limit is multiplied by this (inspect uses 0.8), at most once
#: per round trip (429s of requests sent before the last cut do not cut again); every answer
#: raises it by one, so it is back at ``max_connections`` within that many answers once the
#: server accepts again (a +1 after a streak of successes never recovers at a 10% 429 rate).
DECREASE = 0.8
#: What cuts the limit, and by how much: a 429, and a timeout or a reset connection, which say
#: the server holds more than it answers in ``timeout_s`` (a saturated server that does not
#: send 429s: retrying those at full concurrency only queues more on it). A timeout halves it,
#: as TCP does on a loss: the server was over its capacity by more than a 429's margin.
CUT: dict[int | str, float] = {429: DECREASE, "timeout": 0.5, "connection": 0.5}
#: Requests in a row that gave up with one cause (no answer between, two prompts or more) that
#: open a server's circuit breaker.
BREAKER_AFTER = 5
#: /v1/models fields recorded of the served checkpoint (``created`` and permission ids change on
#: every server restart: noise in a record).
IDENTITY_FIELDS = ("id", "object", "owned_by", "root", "parent", "max_model_len")


class _Waiter:
    __slots__ = ("fut", "loop", "cap", "rank", "seq")

    def __init__(self, fut: asyncio.Future[None], loop: asyncio.AbstractEventLoop,
                 cap: int, rank: int, seq: int) -> None:
        self.fut, self.loop, self.cap, self.rank, self.seq = fut, loop, cap, rank, seq

    def order(self) -> tuple[int, int]:
        """Served in this order: the earliest call's first, then the oldest waiter."""
        return self.rank, self.seq


class ServerBudget:
    """The connection budget of one server (base URL) in this process, shared by every call.

    ``in_flight`` requests never exceed ``allowed(cap)``: the caller's ``max_connections``
    (``cap``) and the adaptive ``limit`` (x0.8 on a 429, +1 per answer, between 1 and the largest
    cap of the calls running). Thread-safe: concurrent calls (shards on threads, each with its
    own event loop) share it; a freed slot is handed to a parked waiter with
    ``call_soon_threadsafe``. Also holds the server's circuit breaker.

    A freed slot goes to the call that started first (its ``rank``, from :meth:`start`), then
    to the oldest waiter of that call: shards sharing a server finish one after another instead
    of all at the end, so the study graph grades the first while the next generate. Total
    throughput is the same (a slot never idles while anyone waits).

    Example:
        >>> b = ServerBudget("http://127.0.0.1:1/v1")
        >>> rank = b.start(4); asyncio.run(b.acquire(4, rank)); b.in_flight
        1
        >>> b.done(sent_at=0.0, status=429); b.in_flight, b.allowed(4)
        (0, 3)
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self.in_flight = 0
        self.limit = 0.0
        self.high = 0
        self.calls = 0
        self.cut_at = float("-inf")
        #: parked waiters in the order slots go to them (:meth:`_Waiter.order`), kept sorted
        #: as they park: a freed slot is handed over without sorting them again
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self.breaker: str | None = None
        self._cause: str | None = None
        self._run: list[int] = []
        self._ranks = itertools.count()

    def allowed(self, cap: int) -> int:
        """Requests a caller with ``max_connections=cap`` may have in flight in all."""
        return max(1, min(cap, int(self.limit)))

    def start(self, cap: int) -> int:
        """A call with ``max_connections=cap`` begins (the limit's ceiling is the largest cap);
        returns its rank: earlier calls are served first."""
        with self._lock:
            self.calls += 1
            self.high = max(self.high, cap) if self.calls > 1 else cap
            self.limit = (float(self.high) if self.limit <= 0
                          else min(max(self.limit, 1.0), self.high))
            self._grant()
            return next(self._ranks)

    def finish(self) -> None:
        with self._lock:
            self.calls -= 1

    async def acquire(self, cap: int, rank: int = 0) -> None:
        """Wait for a slot. Woken by :meth:`done` (a slot freed or the limit raised), which
        counts the slot as taken before waking; a cancelled waiter leaves the queue or gives
        back a slot granted meanwhile."""
        loop = asyncio.get_running_loop()
        with self._lock:
            # no queued waiter has room (every change of in_flight or limit runs _grant), so a
            # caller with room takes it without passing anyone of its own cap
            if self.in_flight < self.allowed(cap):
                self.in_flight += 1
                return
            w = _Waiter(loop.create_future(), loop, cap, rank, next(self._seq))
            bisect.insort(self._waiters, w, key=_Waiter.order)
        try:
            await w.fut
        except BaseException:
            with self._lock:
                queued = w in self._waiters
                if queued:
                    self._waiters.remove(w)
            # granted and delivered: give the slot back (a grant still on its way sees the
            # cancelled future in _deliver and gives it back there)
            if not queued and w.fut.done() and not w.fut.cancelled():
                self.done(sent_at=None, status=None)
            raise

    def done(self, *, sent_at: float | None, status: int | str | None) -> None:
        """Give a slot back after an attempt (``status``: the HTTP status, ``"timeout"``,
        ``"connection"``, or None when nothing was learnt), adapt the limit, wake waiters."""
        with self._lock:
            self.in_flight -= 1
            if isinstance(status, int) and status < 400:
                self.limit = min(float(self.high), self.limit + 1)
                self._cause, self._run = None, []
                self.breaker = None
            elif status in CUT and sent_at is not None and sent_at >= self.cut_at:
                self.limit = max(1.0, self.limit * CUT[status])
                self.cut_at = time.monotonic()
            self._grant()

    def _grant(self) -> None:
        """Hand free slots to parked waiters, the earliest call's first, oldest first within a
        call (called with the lock held). A waiter whose own cap is full does not block a later
        one with room."""
        # no waiter may hold more than the limit: once it is reached the rest wait (the walk
        # stops there instead of visiting every parked waiter after every answer)
        full = max(1, int(self.limit))
        i = 0
        while i < len(self._waiters) and self.in_flight < full:
            w = self._waiters[i]
            if self.in_flight >= self.allowed(w.cap):
                i += 1
                continue
            del self._waiters[i]
            self.in_flight += 1
            try:
                w.loop.call_soon_threadsafe(self._deliver, w.fut)
            except RuntimeError:  # its event loop closed: that call is gone, the slot is free
                self.in_flight -= 1

    def _deliver(self, fut: asyncio.Future[None]) -> None:
        if fut.done():  # cancelled while the grant was on its way: the slot goes back
            self.done(sent_at=None, status=None)
        else:
            fut.set_result(None)

    def gave_up(self, cause: str, prompt: int) -> str | None:
        """A request gave up after its retries; returns the breaker's message when this opens it."""
        with self._lock:
            if cause != self._cause:
                self._cause, self._run = cause, []
            self._run.append(prompt)
            if (self.breaker is None and len(self._run) >= BREAKER_AFTER
                    and len(set(self._run)) >= 2):
                self.breaker = (f"{self.url}: {len(self._run)} requests in a row gave up after "
                                f"their retries with {cause} and none was answered between")
                return self.breaker
            return None


_BUDGETS: dict[str, ServerBudget] = {}
_BUDGETS_LOCK = threading.Lock()


_SSL: dict[bool, ssl.SSLContext] = {}
_SSL_LOCK = threading.Lock()


def ssl_context(verify: bool) -> ssl.SSLContext:
    """One TLS context per process and setting, shared by every client. Each lane of each shard
    opens its own client, and a client given ``verify=False`` builds a fresh context (3 ms of
    CPU; 26 ms with the CA store): 128 of them were ~0.4 s of GIL time at a study's start.
    ``verify=False`` is httpx's own (no certificate or host check; used for http:// only).

    Example:
        >>> ssl_context(False) is ssl_context(False)
        True
    """
    with _SSL_LOCK:
        ctx = _SSL.get(verify)
        if ctx is None:
            if verify:
                ctx = ssl.create_default_context()
            else:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            _SSL[verify] = ctx
        return ctx


def server_budget(base_url: str) -> ServerBudget:
    """The process-wide :class:`ServerBudget` of a server: concurrent calls to one base URL
    share one ``max_connections``; a judge on another server has its own.

    Example:
        >>> server_budget("http://a:1/v1") is server_budget("http://a:1/v1")
        True
        >>> server_budget("http://a:1/v1") is server_budget("http://judge:1/v1")
        False
    """
    with _BUDGETS_LOCK:
        if base_url not in _BUDGETS:
            _BUDGETS[base_url] = ServerBudget(base_url)
        return _BUDGETS[base_url]


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


def _server_message(resp: httpx.Response | http1.Response) -> str:
    try:
        doc = resp.json()
        # OpenAI/vLLM: {"error": {"message"}}; FastAPI servers (transformers serve, TGI's
        # routes): {"detail": text or a list of validation errors}
        err = doc.get("error", doc.get("detail", doc)) if isinstance(doc, dict) else doc
        msg = err.get("message", err) if isinstance(err, dict) else err
        if isinstance(msg, list):
            msg = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', e)}"
                            if isinstance(e, dict) else str(e) for e in msg)
        return str(msg)[:500]
    except ValueError:
        return resp.text[:500]


class _Stopped(Exception):
    """The call was cancelled by a stop (``run`` raises it as :class:`assay.stop.Cancelled`)."""


class _Job:
    """One request through its attempts: the body, attempts so far, first-attempt time, when
    its retry is due."""

    __slots__ = ("req", "body", "data", "attempt", "start", "due")

    def __init__(self, req: Request, body: dict[str, object]) -> None:
        self.req, self.body = req, body
        self.data: bytes | None = None  # the body's bytes, once a lean connection sends it
        self.attempt = 0
        self.start: float | None = None
        self.due = 0.0


_SEQ = itertools.count()  # ties in the retry heap go in scheduling order


@BACKENDS.register("openai", spec=OpenAISpec,
                   help="an OpenAI-compatible server (vLLM, SGLang, TGI, OpenAI)")
class OpenAIBackend:
    """Client of one model on one OpenAI-compatible server (see module docstring).

    ``stats`` after a run: the :class:`RunStats` of the last call (requests sent, retries by
    cause, gave-ups, the breaker, ``min_limit``: the lowest adaptive concurrency it saw)."""

    kind = "openai"

    def __init__(self, spec: OpenAISpec | Mapping[str, object]) -> None:
        self.spec = spec if isinstance(spec, OpenAISpec) else OpenAISpec.model_validate(spec)
        self.headers = {"Content-Type": "application/json"}
        if self.spec.api_key_env:
            key = os.environ.get(self.spec.api_key_env)
            if not key:
                raise SpecError("model.api_key_env: environment variable "
                                f"{self.spec.api_key_env!r} is not set; export the API key or "
                                "remove api_key_env")
            self.headers["Authorization"] = f"Bearer {key}"
        # plain http needs no certificates: loading the CA bundle costs ~0.2 s per client
        self._verify = self.spec.base_url.startswith("https://")
        self._listing: dict[str, object] | None = None
        self._listing_lock = threading.Lock()
        self._listed: list[str] | None = None  # the listing's ids when it lacks the model
        self.stats = RunStats()

    def identity(self) -> dict[str, object]:
        """What the spec declares: backend, base URL, model name and pinned revision. Asks the
        server nothing: a fully cached rerun needs no request at all, and a server that loads
        models on demand (lists only those loaded now) keys the same completions whether or not
        the model happens to be loaded. Weights that change behind one name are the user's to
        declare (``revision``); what the server says is recorded by :meth:`listing`."""
        return {"backend": "openai", "base_url": self.spec.base_url, "model": self.spec.model,
                "revision": self.spec.revision}

    def listing(self) -> dict[str, object]:
        """What ``GET /v1/models`` says of the model, asked once per backend (by
        :func:`assay.models.generate` before a call's first request) and recorded (the generate
        stage's summary, run.json): ``{"listed": True, "entry": {id, root, ...}}``,
        ``{"listed": False, "models": [ids]}`` (a server that loads on demand lists only what is
        loaded now: the first request decides, and a server that does not serve the name
        answers it with its own error, quoted), or ``{"listed": None, "answer": "..."}`` where
        the server has no listing. Raises :class:`GenerationError` only when the server cannot
        be reached at all."""
        with self._listing_lock:
            if self._listing is None:
                self._listing = self._ask_listing()
            return self._listing

    def _ask_listing(self) -> dict[str, object]:
        import httpx

        url = f"{self.spec.base_url}/models"
        try:
            resp = httpx.get(url, headers=self.headers, timeout=self.spec.timeout_s,
                             verify=ssl_context(self._verify))
        except httpx.HTTPError as e:
            raise GenerationError(f"model.base_url: cannot reach {url} ({type(e).__name__}: {e}); "
                                  "is the server up?") from None
        if resp.status_code >= 400:
            return {"listed": None,
                    "answer": f"HTTP {resp.status_code}: {_server_message(resp)}"[:300]}
        try:
            data = resp.json().get("data") or []
        except (ValueError, AttributeError):
            return {"listed": None, "answer": f"not a model list: {resp.text[:200]!r}"}
        models = [m for m in data if isinstance(m, dict)]
        entry = next((m for m in models if m.get("id") == self.spec.model), None)
        if entry is None:
            self._listed = [str(m.get("id")) for m in models]
            return {"listed": False, "models": self._listed}
        return {"listed": True, "entry": {f: entry[f] for f in IDENTITY_FIELDS if f in entry}}

    def render(self, messages: list[dict[str, str]], api: str) -> Rendered:
        """Chat: the message list as sent; completions: the prompt text (single user turn)."""
        return render_messages(messages, api)

    # -- requests ----------------------------------------------------------------------------
    def body(self, req: Request, params: SamplingParams, api: str) -> dict[str, object]:
        """The JSON body of one request: what the spec sets and what reproducibility needs, no
        more. Always the model, the prompt, ``temperature``, ``top_p`` and ``max_tokens`` (a
        server fills unset ones from the checkpoint's generation config, which can change behind
        one name) and the sample's ``seed``; ``stop`` and the penalties only when set (their
        unset values are the protocol's defaults, and some servers refuse ``stop: []``); never
        ``n`` (1 is the default; one request per sample); never a null or an empty list."""
        body: dict[str, object] = {"model": self.spec.model}
        body["messages" if api == "chat" else "prompt"] = req.rendered
        body.update(temperature=params.temperature, top_p=params.top_p,
                    max_tokens=params.max_tokens)
        if params.stop:
            body["stop"] = list(params.stop)
        if params.presence_penalty:
            body["presence_penalty"] = params.presence_penalty
        if params.frequency_penalty:
            body["frequency_penalty"] = params.frequency_penalty
        body["seed"] = req.seed
        body.update({k: v for k, v in params.extra.items() if v is not None and v != []})
        return body

    def run(self, requests: list[Request], params: SamplingParams, *, api: str,
            max_connections: int, commit: Callable[[Request, dict[str, object]], None],
            stats: RunStats | None = None) -> None:
        """Send every request (at most ``max_connections`` in flight to this server, counting
        concurrent calls), calling ``commit`` once per request: its answer or an error record."""
        stats = stats if stats is not None else RunStats()
        self.stats = stats
        if not requests:
            return
        coro = self._run(requests, params, api, max_connections, commit, stats)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            try:
                asyncio.run(coro)
            except _Stopped as e:
                raise stop.Cancelled(f"stopped: {e}") from None
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
        t.join()  # bounded as the call is (module docstring); a stop cancels it
        if err:
            if isinstance(err[0], _Stopped):
                raise stop.Cancelled(f"stopped: {err[0]}") from None
            raise err[0]

    async def _run(self, requests: list[Request], params: SamplingParams, api: str,
                   max_connections: int, commit: Callable[[Request, dict[str, object]], None],
                   stats: RunStats) -> None:
        import httpx

        budget = server_budget(self.spec.base_url)
        path = "/chat/completions" if api == "chat" else "/completions"
        queue = [_Job(r, self.body(r, params, api)) for r in reversed(requests)]  # popped in order
        retries: list[tuple[float, int, _Job]] = []  # (due, seq, job): a heap
        verify = ssl_context(self._verify)

        # One client per lane, each with one keep-alive connection: httpx's pool does work
        # linear in its connections on every request, so one pool of 16 costs more CPU than
        # the server's answers at high request rates. The plain case (no proxy, a plain URL)
        # goes over http1.Connection, ~15x less CPU per request than httpx (benchmarks/
        # client_cpu.py); httpx keeps proxies and the rest.
        lean = http1.applies(self.spec.base_url, urllib.request.getproxies())

        def client() -> httpx.AsyncClient | http1.Connection:
            if lean:
                # the User-Agent httpx sent: a gateway that filters on it sees no change
                return http1.Connection(self.spec.base_url, self.headers, verify,
                                        user_agent=f"python-httpx/{httpx.__version__}")
            return httpx.AsyncClient(base_url=self.spec.base_url, headers=self.headers,
                                     limits=httpx.Limits(max_connections=1,
                                                         max_keepalive_connections=1),
                                     verify=verify, timeout=httpx.Timeout(self.spec.timeout_s))

        def attempt(c: httpx.AsyncClient | http1.Connection, job: _Job,
                    probe: bool = False) -> Awaitable[None]:
            return self._attempt(c, budget, max_connections, path, job, api, commit, stats,
                                 retries, probe, rank)

        # A lane takes a retry that is due, else a new request, else the earliest retry (and
        # sleeps until it is due): a request waiting out its backoff holds no lane, so the
        # other lanes keep the server busy. At most max_connections requests wait out a
        # backoff at once (then lanes take retries, not new requests): a dead server sees at
        # most BREAKER_AFTER + 2 * max_connections requests' attempts before the breaker
        # opens. No await between a test and its pop. A lane ends when both lists are empty;
        # a retry is only ever scheduled by a lane that is running, which then sees it on its
        # next turn, so no retry outlives every lane.
        async def lane() -> None:
            async with client() as c:
                while queue or retries:
                    if retries and (retries[0][0] <= time.monotonic() or not queue
                                    or len(retries) >= max_connections):
                        job = heapq.heappop(retries)[2]
                        if budget.breaker is None:  # an open breaker ends it without waiting
                            await asyncio.sleep(max(0.0, job.due - time.monotonic()))
                    else:
                        job = queue.pop()
                    await attempt(c, job)

        rank = budget.start(max_connections)
        tasks: list[asyncio.Task[None]] = []
        loop, me = asyncio.get_running_loop(), asyncio.current_task()

        def cancel() -> None:  # a stop (assay.stop), called from the thread that stops the run
            if me is not None:
                with contextlib.suppress(RuntimeError):  # this call's loop already closed
                    loop.call_soon_threadsafe(me.cancel)

        try:
            with stop.watch(cancel):
                if budget.breaker is not None:  # half-open: one single-attempt probe decides
                    async with client() as c:
                        await attempt(c, queue.pop(), probe=True)
                tasks = [asyncio.create_task(lane())
                         for _ in range(min(max_connections, len(queue)))]
                await asyncio.gather(*tasks)
        except BaseException as e:  # stop the other lanes: their slots go back as they end
            # (on a stop, cancelling a lane cancels its request: httpx closes the connection)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if isinstance(e, RequestRejected):
                raise e from None
            reason = stop.stopped()
            if isinstance(e, asyncio.CancelledError) and reason is not None:
                raise _Stopped(reason) from None  # leaves asyncio.run as an ordinary error
            raise
        finally:
            budget.finish()

    async def _attempt(self, client: httpx.AsyncClient | http1.Connection, budget: ServerBudget,
                       cap: int, path: str,
                       job: _Job, api: str, commit: Callable[[Request, dict[str, object]], None],
                       stats: RunStats, retries: list[tuple[float, int, _Job]],
                       probe: bool = False, rank: int = 0) -> None:
        """One attempt of a request. Ends it (exactly one ``commit``: its answer, or an error
        record once its retries are spent or while the server's breaker is open), or schedules
        its retry on ``retries`` after a backoff that honours Retry-After."""
        import httpx

        req = job.req
        if job.start is None:
            job.start = time.monotonic()
        if budget.breaker is not None and not probe:
            stats.failed(sent=job.attempt > 0)
            stats.breaker = stats.breaker or budget.breaker
            what = "not sent" if not job.attempt else f"stopped after {job.attempt} attempt(s)"
            commit(req, self._error(f"{what}: circuit breaker open ({budget.breaker}); the next "
                                    "run asks again", time.monotonic() - job.start,
                                    max(0, job.attempt - 1)))
            return
        why, cause, wait_hint = "", "", None
        await budget.acquire(cap, rank)
        # on a Dask worker or a Ray cluster: the cap holds across the whole cluster (a slot held
        # past the request's timeout was left by a dead worker: Ray's actor takes it back)
        cluster = cluster_semaphore(self.spec.base_url, cap, lease_s=self.spec.timeout_s + 60)
        if cluster is not None:
            try:
                await take(cluster)
            except BaseException:
                budget.done(sent_at=None, status=None)
                raise
        stats.limited(budget.allowed(cap))
        t0 = time.monotonic()
        status: int | str | None = None
        # counted as sent once httpcore starts writing the body (its trace says when; a lean
        # connection calls wrote() just before its one write of headers and body): from
        # there to the socket nothing yields, so a timeout cannot cancel it, while a timeout
        # waiting for a connection, connecting, or between the headers and the body sends the
        # server no request it can read. ("complete" would miss a request cancelled while the
        # write yields after handing its bytes to the socket.)
        written = [False]

        async def trace(event: str, info: dict[str, object]) -> None:
            if event.endswith("send_request_body.started"):
                written[0] = True

        def wrote() -> None:
            written[0] = True

        try:
            try:
                async with asyncio.timeout(self.spec.timeout_s):
                    if isinstance(client, http1.Connection):
                        if job.data is None:  # encoded once, sent as httpx's json= sends it
                            job.data = http1.encode_body(job.body)
                        resp: httpx.Response | http1.Response = await client.post(
                            path.encode("ascii"), job.data, wrote)
                    else:
                        resp = await client.post(path, json=job.body, extensions={"trace": trace})
            except (TimeoutError, httpx.TimeoutException) as e:
                why = f"timeout after {self.spec.timeout_s:g}s ({type(e).__name__})"
                status = cause = "timeout"
            except (httpx.TransportError, http1.TransportError) as e:
                why = f"connection error ({type(e).__name__}: {e})"
                status = cause = "connection"
            else:
                written[0] = True
                status = code = resp.status_code
                if code < 400:
                    # counted before its commit: the journalled tally (assay.models.generation)
                    # then holds this request, so a worker killed after the commit loses nothing
                    written[0] = False
                    stats.sent()
                    # body() sets stop to list(params.stop) or leaves it out (params.extra
                    # cannot set it: SamplingParams._extra_not_core)
                    stops = cast("list[str] | None", job.body.get("stop"))
                    commit(req, self._record(resp, api, time.monotonic() - t0, job.attempt, stops))
                    return
                msg = _server_message(resp)
                if code not in RETRY_STATUS and code < 500:
                    text = (f"POST {self.spec.base_url}{path} answered HTTP {code}: {msg!r} "
                            f"(prompt {req.prompt_index}, sample {req.sample_index})")
                    if self._listed is not None and self.spec.model not in self._listed:
                        text += (f"; GET /v1/models listed {self._listed} (model.model is "
                                 f"{self.spec.model!r})")
                    raise RequestRejected(text, status=code, message=msg,
                                          param=rejected_parameter(msg, job.body))
                why, cause = f"HTTP {code}: {msg}", f"HTTP {code}"
                wait_hint = retry_after_s(resp.headers.get("retry-after"))
        finally:  # the slot goes back on every path: the waker of parked lanes
            if cluster is not None:
                await give(cluster)
            budget.done(sent_at=t0, status=status)
            if written[0]:
                stats.sent()
        backoff = random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** job.attempt))
        wait = max(backoff, wait_hint) if wait_hint is not None else backoff
        elapsed = time.monotonic() - job.start
        max_retries = 0 if probe else self.spec.max_retries
        if job.attempt >= max_retries or elapsed + wait > self.spec.retry_total_s:
            cap_s = (f"{job.attempt} retries" if job.attempt >= max_retries
                     else f"the {self.spec.retry_total_s:g}s retry cap")
            stats.failed()
            commit(req, self._error(f"{why}; gave up after {cap_s}", elapsed, job.attempt))
            opened = budget.gave_up(cause, req.prompt_index)
            if opened is not None:
                stats.breaker = opened
                print(f"warning: generate: circuit breaker open: {opened}; the remaining "
                      "requests to this server are not sent (error rows the next run asks "
                      "again). Is the server up?", file=sys.stderr, flush=True)
            return
        job.attempt += 1
        job.due = time.monotonic() + wait
        stats.retry(cause.removeprefix("HTTP "))
        heapq.heappush(retries, (job.due, next(_SEQ), job))

    @staticmethod
    def _error(reason: str, elapsed: float, retries: int) -> dict[str, object]:
        return {"status": "error", "completion": None, "finish_reason": None, "reason": reason,
                "prompt_tokens": None, "completion_tokens": None, "served_model": None,
                "latency_s": round(elapsed, 6), "retries": retries}

    def _record(self, resp: httpx.Response | http1.Response, api: str, latency: float, retries: int,
                stops: list[str] | None = None) -> dict[str, object]:
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
               "prompt_tokens": usage.get("prompt_tokens"),
               "completion_tokens": usage.get("completion_tokens"),
               "served_model": doc.get("model")}
        if not isinstance(text, str):
            return {**rec, "status": "error", "completion": None,
                    "reason": "server returned no text content (finish_reason "
                              f"{choice.get('finish_reason')!r})"}
        # the text before the stop string, as OpenAI and vLLM return it (some servers keep it);
        # what was cut is recorded, and counted in run.json and the report
        text, cut = trim_at_stop(text, stops, rec["finish_reason"])
        return {**rec, "status": "ok", "completion": text, "reason": None, "stop_trimmed": cut}

    def close(self) -> None:
        pass
