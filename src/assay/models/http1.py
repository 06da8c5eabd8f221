"""A lean HTTP/1.1 keep-alive client for the openai backend's completion requests: one write per
request, one ``asyncio.Protocol`` per connection, about 40 us of CPU per request (httpx: ~600).

Near a server's limit the client's CPU decides how busy the server is: with httpx (its pool,
anyio cancel scopes, trace hooks, header models, two writes per request) a 2-core machine kept a
20 ms, 32-connection server about half busy. This covers the plain case only (``http``/``https``
URL, no proxy variable, no userinfo or query); :func:`applies` says when, and the backend keeps
httpx for the rest, so proxies and odd URLs behave as before.

Example:
    >>> applies("http://127.0.0.1:8000/v1", {}), applies("http://u:p@h/v1", {})
    (True, False)
    >>> applies("https://api.openai.com/v1", {"https": "http://proxy:3128"})
    False
    >>> encode_body({"model": "m", "prompt": "café"})
    b'{"model":"m","prompt":"caf\\xc3\\xa9"}'
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import ssl
import zlib
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

#: Header block over this many bytes is a broken server, not an answer.
MAX_HEAD = 65536


class TransportError(Exception):
    """The connection failed: no answer came back (the backend retries it as ``connection``)."""


class ConnectError(TransportError):
    """The server could not be reached (refused, unreachable, TLS handshake failed)."""


class RemoteProtocolError(TransportError):
    """The server closed the connection before a whole answer, or sent something not HTTP."""


def encode_body(body: object) -> bytes:
    """The request body as httpx's ``json=`` writes it (compact, UTF-8, no NaN), so a body is
    byte-for-byte the same whichever client sends it."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")


def applies(base_url: str, proxies: Mapping[str, str]) -> bool:
    """Whether this client serves ``base_url``: http(s), no userinfo, query or fragment, and no
    proxy variable for its scheme (``proxies``: ``urllib.request.getproxies()``; any one set,
    even with NO_PROXY, keeps httpx, which honours them). ``ASSAY_HTTP_CLIENT=httpx`` keeps
    httpx for every URL (a server this client meets wrongly can still be reached as before)."""
    if os.environ.get("ASSAY_HTTP_CLIENT", "").strip().lower() == "httpx":
        return False
    s = urlsplit(base_url)
    return (s.scheme in ("http", "https") and bool(s.hostname) and "@" not in s.netloc
            and not s.query and not s.fragment and s.scheme not in proxies
            and "all" not in proxies)


class Response:
    """An answer: ``status_code``, ``headers`` (lower-case names), ``content``; ``json()`` and
    ``text`` as httpx's response has them (what the backend reads)."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def _dechunk(buf: bytearray) -> tuple[bytes, int] | None:
    """A chunked body at the start of ``buf``: (body, bytes consumed), or None while
    incomplete. Re-parsed from the start on each read: chunked JSON answers are rare and short."""
    out, i = bytearray(), 0
    while True:
        j = buf.find(b"\r\n", i)
        if j < 0:
            return None
        try:
            size = int(bytes(buf[i:j]).split(b";")[0], 16)
        except ValueError:
            raise RemoteProtocolError(f"bad chunk size {bytes(buf[i:j])[:40]!r}") from None
        i = j + 2
        if size == 0:  # trailers (ignored) up to an empty line
            end = buf.find(b"\r\n", i)
            while end > i:
                i = end + 2
                end = buf.find(b"\r\n", i)
            return (bytes(out), end + 2) if end >= 0 else None
        if len(buf) < i + size + 2:
            return None
        out += buf[i:i + size]
        i += size + 2


class _Protocol(asyncio.Protocol):
    """One connection: parses the answer to the request in flight (``waiter``); bytes while
    idle, or a server that closes, make it unusable (``closed``)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False
        self._head: tuple[int, dict[str, str], int | None, bool, bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.waiter is None or self.waiter.done():  # nothing asked: not ours to read
            self.close()
            return
        try:
            self._parse(eof=False)
        except TransportError as e:
            self._fail(e)

    def eof_received(self) -> bool:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            try:
                self._parse(eof=True)
            except TransportError as e:
                self._fail(e)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(RemoteProtocolError(
                "server disconnected without sending a whole answer"
                + (f" ({type(exc).__name__}: {exc})" if exc else "")))

    def readable(self) -> bool:
        """Whether the idle socket has bytes or an EOF the event loop has not read yet (a
        server that answered, then closed: its FIN lands after the answer was taken)."""
        sock = self.transport.get_extra_info("socket") if self.transport else None
        return sock is not None and bool(select.select([sock], [], [], 0)[0])

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, e: TransportError) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(e)
        self.close()

    def _parse(self, *, eof: bool) -> None:
        buf = self.buf
        while self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise RemoteProtocolError("answer headers over 64 KiB")
                if eof:
                    raise RemoteProtocolError("server closed the connection mid-headers")
                return
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            del buf[:end + 4]
            version, _, rest = lines[0].partition(" ")
            try:
                status = int(rest[:3])
            except ValueError:
                raise RemoteProtocolError(f"not an HTTP answer: {lines[0][:60]!r}") from None
            if not version.startswith("HTTP/1."):
                raise RemoteProtocolError(f"not an HTTP/1 answer: {lines[0][:60]!r}")
            if 100 <= status < 200:  # informational: the real answer follows
                continue
            headers: dict[str, str] = {}
            for line in lines[1:]:
                k, sep, v = line.partition(":")
                if not sep:
                    raise RemoteProtocolError(f"bad header line {line[:60]!r}")
                k, v = k.strip().lower(), v.strip()
                headers[k] = f"{headers[k]}, {v}" if k in headers else v
            conn = headers.get("connection", "").lower()
            keep = "close" not in conn and (version == "HTTP/1.1" or "keep-alive" in conn)
            chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            length: int | None = None
            if status in (204, 304):
                length = 0
            elif not chunked and "content-length" in headers:
                try:
                    length = int(headers["content-length"].split(",")[0])
                except ValueError:
                    raise RemoteProtocolError("bad Content-Length "
                                              f"{headers['content-length'][:40]!r}") from None
            elif not chunked:
                keep = False  # the body runs to the end of the connection
            self._head = (status, headers, length, chunked, keep)
        status, headers, length, chunked, keep = self._head
        if chunked:
            got = _dechunk(buf)
            if got is None:
                if eof:
                    raise RemoteProtocolError("server closed the connection mid-body")
                return
            body, used = got
        elif length is not None:
            if len(buf) < length:
                if eof:
                    raise RemoteProtocolError("server closed the connection mid-body")
                return
            body, used = bytes(buf[:length]), length
        elif not eof:
            return
        else:
            body, used = bytes(buf), len(buf)
        del buf[:used]
        self._head = None
        coding = headers.get("content-encoding", "identity").lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            try:
                body = zlib.decompress(body, 47)  # 47: a gzip or zlib header, detected
            except zlib.error as e:
                raise RemoteProtocolError(f"bad {coding} body ({e})") from None
        elif coding != "identity":
            raise RemoteProtocolError(f"unsupported Content-Encoding {coding!r}")
        if not keep or buf:  # closing, or bytes past the answer: not reusable
            self.close()
        assert self.waiter is not None
        self.waiter.set_result(Response(status, headers, body))


class Connection:
    """One keep-alive connection to one server, (re)opened when the next request needs it; one
    request at a time. A request cut short (a timeout, a cancellation, an error) closes it, so a
    late answer is never read as the next request's.

    Example:
        >>> c = Connection("http://127.0.0.1:1/v1", {"Content-Type": "application/json"})
        >>> c.path(b"/chat/completions")
        b'/v1/chat/completions'
        >>> try:
        ...     asyncio.run(c.post(b"/chat/completions", b"{}"))
        ... except ConnectError as e:
        ...     print("refused")
        refused
    """

    def __init__(self, base_url: str, headers: Mapping[str, str],
                 ssl_context: ssl.SSLContext | None = None, user_agent: str = "assay") -> None:
        s = urlsplit(base_url)
        self.tls = s.scheme == "https"
        self.host = s.hostname or ""
        self.port = s.port or (443 if self.tls else 80)
        self.ssl = (ssl_context or ssl.create_default_context()) if self.tls else None
        self.prefix = s.path.rstrip("/").encode("ascii")
        fixed = {"Host": s.netloc, "Accept": "*/*", "Accept-Encoding": "identity",
                 "Connection": "keep-alive", "User-Agent": user_agent}
        fixed.update(headers)
        # the request's fixed headers, encoded once per connection (Content-Length follows)
        self.head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._proto: _Protocol | None = None

    def path(self, path: bytes) -> bytes:
        """The request target: the base URL's path, then ``path``."""
        return self.prefix + path

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(
                _Protocol, self.host, self.port, ssl=self.ssl,
                server_hostname=self.host if self.tls else None)
        except OSError as e:  # refused, unreachable, DNS, TLS (ssl.SSLError is an OSError)
            raise ConnectError(f"{type(e).__name__}: {e}") from None
        return proto

    async def post(self, path: bytes, body: bytes,
                   on_write: Callable[[], None] | None = None) -> Response:
        """POST ``body`` (JSON bytes) to the base URL's path + ``path``; ``on_write`` is called
        just before the request's bytes go to the socket (nothing yields from there on)."""
        p = self._proto
        if p is not None and not p.closed and p.readable():
            p.close()  # a close (or junk) from the server still unread: it would eat this request
        if p is None or p.closed:
            self._proto = None
            p = self._proto = await self._connect()
        assert p.transport is not None
        p.waiter = asyncio.get_running_loop().create_future()
        try:
            if on_write is not None:
                on_write()
            p.transport.write(b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
                              % (self.path(path), self.head, len(body), body))
            return await p.waiter
        except BaseException:
            p.close()
            raise
        finally:
            p.waiter = None

    async def aclose(self) -> None:
        if self._proto is not None:
            self._proto.close()
            self._proto = None

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
