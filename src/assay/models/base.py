"""What every backend shares: what a backend does (:class:`Backend`), one request (a rendered
prompt, its seed and sample index) and how prompts become message lists and rendered prompts.

Example:
    >>> to_messages("2+3?", system="Be brief.")
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+3?'}]
    >>> render_messages([{"role": "user", "content": "2+3?"}], "completions")
    '2+3?'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, overload

from assay.errors import RowsError, RowsTypeError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from assay.models.specs import SamplingParams
    from assay.progress import Unit

#: A prompt as a backend receives it: the messages (chat) or one text (completions).
Rendered: TypeAlias = "str | list[dict[str, str]]"


@dataclass(frozen=True)
class Request:
    """One completion to ask for: its cache key, where it goes, the rendered prompt and seed."""

    key: str
    prompt_index: int
    sample_index: int
    seed: int
    rendered: Any  # a Rendered prompt; Any: the hf backend reads it as its own str


class Backend(Protocol):
    """What :func:`assay.models.generate` asks of a model backend (the registered ``openai``,
    ``hf`` and ``function`` classes, or a plugin's): its spec entry, the identity that keys its
    completions, how a prompt is rendered for it, and a run that commits each completion as it
    arrives. A backend may also offer ``listing()`` (what a server says of the model) and take
    ``stats=`` (a :class:`RunStats`) in ``run``."""

    @property
    def spec(self) -> BaseModel: ...

    def identity(self) -> dict[str, object]: ...

    def render(self, messages: list[dict[str, str]], api: str) -> Rendered: ...

    def run(self, requests: list[Request], params: SamplingParams, *, api: str,
            max_connections: int, commit: Callable[[Request, dict[str, object]], None]) -> None: ...

    def close(self) -> None: ...


class RunStats:
    """What one backend call did, as facts of the run (thread-safe): requests sent, retries by
    cause (``"429"``, ``"503"``, ``"timeout"``, ``"connection"``), requests that gave up after
    their retries, requests not sent because the server's circuit breaker was open, and the
    breaker's message. Retries also count on the progress ``unit`` as they happen.

    Example:
        >>> s = RunStats(); s.sent(); s.retry("429"); s.sent(); s.as_dict()["retries"]
        {'429': 1}
    """

    def __init__(self, unit: Unit | None = None) -> None:
        self.unit = unit
        self._lock = threading.Lock()
        self.requests = 0
        self.retries: dict[str, int] = {}
        self.gave_up = 0
        self.not_sent = 0
        self.breaker: str | None = None
        self.min_limit: int | None = None
        self.completions = 0
        self.failures: dict[str, int] = {}

    def sent(self) -> None:
        with self._lock:
            self.requests += 1

    def retry(self, cause: str) -> None:
        with self._lock:
            self.retries[cause] = self.retries.get(cause, 0) + 1
        if self.unit is not None:
            self.unit.count(retries=1)

    def failed(self, *, sent: bool = True) -> None:
        """A request ended as an error row: it gave up (after its retries, or stopped by an open
        circuit breaker after some attempts), or was never sent."""
        with self._lock:
            if sent:
                self.gave_up += 1
            else:
                self.not_sent += 1

    def committed(self, record: dict[str, Any]) -> None:
        """A sample ended: a completion received, or a failure counted by its cause
        (:func:`failure_cause`)."""
        with self._lock:
            if record.get("status") == "ok":
                self.completions += 1
            else:
                cause = failure_cause(record.get("reason"))
                self.failures[cause] = self.failures.get(cause, 0) + 1

    def limited(self, limit: int) -> None:
        with self._lock:
            self.min_limit = limit if self.min_limit is None else min(self.min_limit, limit)

    def as_dict(self) -> dict[str, object]:
        """``{"requests", "completions", "failures" (by cause, sorted), "retries" (by cause,
        sorted), "gave_up", "not_sent", "breaker", "min_limit"}``: ``requests`` are HTTP requests
        that reached the server (every attempt, retries included), ``completions`` the samples
        answered, ``failures`` the samples that ended as error records (``min_limit``: the lowest
        adaptive concurrency seen, None if none)."""
        with self._lock:
            return {"requests": self.requests, "completions": self.completions,
                    "failures": dict(sorted(self.failures.items())),
                    "retries": dict(sorted(self.retries.items())),
                    "gave_up": self.gave_up, "not_sent": self.not_sent, "breaker": self.breaker,
                    "min_limit": self.min_limit}


def failure_cause(reason: str | None) -> str:
    """The cause of a failed request, from its error record's reason: ``HTTP 503``,
    ``timeout``, ``connection``, ``circuit breaker`` (not sent, or stopped, while the server's
    breaker was open), or ``other`` (a reply without a completion, a callable's error).

    Example:
        >>> failure_cause("HTTP 503: overloaded; gave up after 8 retries")
        'HTTP 503'
        >>> failure_cause("not sent: circuit breaker open (http://h/v1: ...)")
        'circuit breaker'
    """
    r = reason or ""
    if r.startswith(("not sent: circuit breaker", "stopped after")):
        return "circuit breaker"
    if r.startswith("HTTP ") and r[5:8].isdigit():
        return r[:8]
    if r.startswith("timeout"):
        return "timeout"
    if r.startswith("connection error"):
        return "connection"
    return "other"


def trim_at_stop(text: str, stops: Sequence[str] | None, finish_reason: str | None
                 ) -> tuple[str, str | None]:
    """The completion as OpenAI and vLLM return it: the text before the first requested stop
    string, where the server stopped on one (``finish_reason`` ``stop``) or the text ends with one;
    and what was cut (None when nothing was). Some servers (transformers serve) keep the stop
    string and the rest of its token.

    Example:
        >>> trim_at_stop("ara", ["a"], "stop"), trim_at_stop("x. y", [". "], "length")
        (('', 'ara'), ('x. y', None))
        >>> trim_at_stop("done. END", ["END"], "length"), trim_at_stop("ok", [], "stop")
        (('done. ', 'END'), ('ok', None))
    """
    if not stops:
        return text, None
    if finish_reason == "stop":
        hits = [i for i in (text.find(s) for s in stops) if i >= 0]
        if hits:
            cut = min(hits)
            return text[:cut], text[cut:]
        return text, None
    for s in stops:
        if text.endswith(s):
            return text[:-len(s)], s
    return text, None


def to_messages(prompt: object, *, system: str | None = None, i: int = 0) -> list[dict[str, str]]:
    """A prompt (a string or ``[{"role", "content"}]``) as a message list, system prompt first."""
    if isinstance(prompt, str):
        msgs = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
        msgs = []
        for j, m in enumerate(prompt):
            if (not isinstance(m, Mapping) or not isinstance(m.get("role"), str)
                    or not isinstance(m.get("content"), str)):
                raise RowsError(f"prompts[{i}][{j}]: a message is {{'role': str, 'content': str}}, "
                                f"got {m!r:.120}")
            msgs.append({"role": m["role"], "content": m["content"]})
        if not msgs:
            raise RowsError(f"prompts[{i}] is an empty message list")
    else:
        raise RowsTypeError(f"prompts[{i}]: expected a string or a list of messages, got "
                            f"{type(prompt).__name__}")
    if system is not None:
        if msgs[0]["role"] == "system":
            raise RowsError(f"prompts[{i}] already starts with a system message and system= is "
                            "set; give one or the other")
        msgs = [{"role": "system", "content": system}, *msgs]
    return msgs


@overload
def render_messages(messages: list[dict[str, str]], api: Literal["completions"]) -> str: ...


@overload
def render_messages(messages: list[dict[str, str]], api: str) -> Rendered: ...


def render_messages(messages: list[dict[str, str]], api: str) -> Rendered:
    """The prompt as an OpenAI-protocol server receives it: the messages (chat) or one text
    (completions, which takes a single user turn)."""
    if api == "chat":
        return messages
    if len(messages) != 1 or messages[0]["role"] != "user":
        raise RowsError("api: completions takes one text per prompt; got a conversation of "
                        f"{len(messages)} messages (roles {[m['role'] for m in messages]}); "
                        "use api: chat")
    return messages[0]["content"]
