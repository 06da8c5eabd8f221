"""The openai backend's wire: the Python work per request (the client's CPU near a server's
limit), the bytes it sends, and HTTP/1.1 answers it must read (chunked, gzip, close, 100,
a late answer after a timeout, a server closing idle connections), against raw sockets."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from assay.models import generate
from assay.models.base import Request
from assay.models.openai import OpenAIBackend
from assay.models.specs import SamplingParams

PARAMS = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=64)


def completion(text: str) -> bytes:
    return json.dumps({"model": "tiny-ckpt", "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                       "choices": [{"message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}]}).encode()


def ok(data: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
            f"\r\n{extra}\r\n").encode() + data


class RawServer:
    """A raw-socket HTTP server: records each request (its line, headers, body bytes) and
    writes what ``answer(n, body)`` returns: bytes, or (seconds to wait, bytes), or None to
    close the connection without an answer. ``close_after``: answers per connection."""

    def __init__(self, answer: Callable[[int, bytes], Any], close_after: int = 0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.answer, self.close_after, self.tls = answer, close_after, tls
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self.on_close: Callable[[], None] = lambda: None  # called once a connection is closed
        self.connections = 0
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf, served = b"", 0
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                return
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in
                           (ln.partition(":") for ln in lines[1:])}
                n = int(headers.get("content-length", 0))
                while len(buf) < n:
                    buf += conn.recv(65536)
                body, buf = buf[:n], buf[n:]
                with self.lock:
                    self.seen.append((lines[0], headers, body))
                    i = len(self.seen) - 1
                out = self.answer(i, body)
                if out is None:
                    return
                if isinstance(out, tuple):
                    if self.stopped.wait(out[0]):
                        return
                    out = out[1]
                try:
                    conn.sendall(out)
                except OSError:
                    return
                served += 1
                if self.close_after and served >= self.close_after:
                    conn.close()
                    self.on_close()
                    return

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.fixture
def raw():
    servers: list[RawServer] = []

    def make(answer: Callable[[int, bytes], Any], close_after: int = 0,
             tls: ssl.SSLContext | None = None) -> RawServer:
        servers.append(RawServer(answer, close_after, tls))
        return servers[-1]
    yield make
    for s in servers:
        s.stop()


def run(url: str, n: int, **spec: Any) -> list[dict[str, Any]]:
    got: dict[int, dict[str, Any]] = {}
    b = OpenAIBackend({"kind": "openai", "base_url": url, "model": "tiny-ckpt",
                       "max_retries": 2, **spec})
    reqs = [Request(f"k{i}", i, 0, 100 + i, [{"role": "user", "content": f"q{i} é"}])
            for i in range(n)]
    b.run(reqs, PARAMS, api="chat", max_connections=4,
          commit=lambda r, rec: got.__setitem__(r.prompt_index, rec))
    return [got[i] for i in range(n)]


def test_python_work_per_request_is_a_small_fixed_amount(server):
    # The client's CPU near a server's limit: httpx ran ~2,800 Python calls per request (its
    # pool, anyio cancel scopes, trace hooks, header models), which kept a 20 ms,
    # 32-connection server about half busy from a 2-core machine. Python calls are counted
    # (deterministic), not timed; the 64 requests after the first 32 (connections open).
    b = OpenAIBackend({"kind": "openai", "base_url": server.base_url, "model": "tiny-ckpt"})

    def calls(lo: int, hi: int) -> int:
        reqs = [Request(f"k{i}", i, 0, i, [{"role": "user", "content": f"q{i}"}])
                for i in range(lo, hi)]
        count = [0]

        def prof(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                count[0] += 1
        sys.setprofile(prof)
        try:
            b.run(reqs, PARAMS, api="chat", max_connections=8, commit=lambda r, rec: None)
        finally:
            sys.setprofile(None)
        return count[0]

    calls(0, 32)
    per_request = (calls(32, 96) - calls(96, 128)) / 32  # the fixed cost of a call cancels out
    assert 0 < per_request < 400, per_request


def test_the_body_is_byte_for_byte_what_httpx_json_sends(raw):
    srv = raw(lambda n, body: ok(completion(f"a{n}")))
    recs = run(srv.url, 3)
    assert [r["status"] for r in recs] == ["ok"] * 3
    for line, headers, body in srv.seen:
        assert line == "POST /v1/chat/completions HTTP/1.1"
        assert headers["content-type"] == "application/json"
        doc = json.loads(body)
        assert body == httpx.Request("POST", srv.url, json=doc).content  # compact, UTF-8
        assert doc["messages"][0]["content"].endswith(" é") and b"\\u" not in body
    assert srv.connections <= 3  # keep-alive: one connection per lane


def test_a_proxy_variable_sends_requests_through_the_proxy(raw, monkeypatch):
    proxy = raw(lambda n, body: ok(completion("via proxy")))
    monkeypatch.setenv("HTTP_PROXY", proxy.url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    recs = run("http://model-server.invalid:8000/v1", 2)
    assert [r["completion"] for r in recs] == ["via proxy"] * 2
    assert {line for line, _, _ in proxy.seen} == {
        "POST http://model-server.invalid:8000/v1/chat/completions HTTP/1.1"}


def test_assay_http_client_httpx_keeps_httpx_for_every_url(monkeypatch):
    """The escape hatch: a server the lean client meets wrongly is reached through httpx."""
    from assay.models.http1 import applies

    assert applies("http://127.0.0.1:8000/v1", {})
    monkeypatch.setenv("ASSAY_HTTP_CLIENT", "httpx")
    assert not applies("http://127.0.0.1:8000/v1", {})
    assert not applies("https://api.example.com/v1", {})


def test_chunked_gzip_continue_and_close_answers_are_read(raw):
    def answer(_: int, body: bytes) -> bytes:
        n = int(json.loads(body)["messages"][0]["content"][1:].split()[0])  # the prompt's
        data = completion(f"a{n}")
        if n % 3 == 0:  # chunked, with a chunk extension and a trailer
            return (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                    b"\r\n\r\n" + b"%x;x=1\r\n%s\r\n" % (5, data[:5]) +
                    b"%x\r\n%s\r\n" % (len(data) - 5, data[5:]) + b"0\r\nX-T: 1\r\n\r\n")
        if n % 3 == 1:
            z = gzip.compress(data)
            return ok(z, "Content-Encoding: gzip\r\n")
        return ok(data, "Connection: close\r\n")  # then a new connection
    srv = raw(answer)
    recs = run(srv.url, 9)
    assert [r["completion"] for r in recs] == [f"a{n}" for n in range(9)]
    assert all(r["retries"] == 0 for r in recs)


def test_a_connection_the_server_closed_is_not_reused(raw):
    # The server answers, then closes. The loop is held (a blocking wait) until that close has
    # happened, so the event loop has not read the FIN when the next request goes: the
    # connection must see it unread on the socket and open a new one, not lose the request.
    import asyncio

    from assay.models.http1 import Connection

    closed = threading.Event()
    srv = raw(lambda n, body: ok(completion(f"a{n}")), close_after=1)
    srv.on_close = closed.set

    async def two() -> list[str]:
        c = Connection(srv.url, {"Content-Type": "application/json"})
        first = await c.post(b"/chat/completions", b"{}")
        assert closed.wait(10)  # blocks the loop: the FIN stays unread by asyncio
        second = await c.post(b"/chat/completions", b"{}")
        await c.aclose()
        return [first.json()["choices"][0]["message"]["content"],
                second.json()["choices"][0]["message"]["content"]]

    assert asyncio.run(two()) == ["a0", "a1"] and srv.connections == 2
    # and through the backend: every request answered
    recs = run(srv.url, 6)
    assert [r["status"] for r in recs] == ["ok"] * 6


def test_a_late_answer_after_a_timeout_is_never_read_as_the_retrys(raw, monkeypatch):
    from assay.models import openai

    monkeypatch.setattr(openai, "BACKOFF_BASE_S", 0.001)
    # the first attempt's answer comes after the client gave up; the retry is answered at once
    srv = raw(lambda n, body: (1.5, ok(completion("late"))) if n == 0
              else ok(completion("fresh")))
    [rec] = run(srv.url, 1, timeout_s=0.5)
    assert rec["status"] == "ok" and rec["completion"] == "fresh" and rec["retries"] == 1
    assert srv.connections == 2


def test_an_answer_cut_mid_body_is_a_connection_error_then_retried(raw, monkeypatch):
    from assay.models import openai

    monkeypatch.setattr(openai, "BACKOFF_BASE_S", 0.001)
    data = completion("whole")
    srv = raw(lambda n, body: (0.0, ok(data)[:-10]) if n == 0 else ok(data), close_after=1)
    [rec] = run(srv.url, 1)
    assert rec["completion"] == "whole" and rec["retries"] == 1


def test_the_generate_path_keeps_the_api_key_header(raw, monkeypatch, tmp_path):
    from assay.store import Store

    monkeypatch.setenv("WIRE_KEY", "sk-test")
    srv = raw(lambda n, body: ok(completion("k")))
    g = generate(["hi"], {"kind": "openai", "base_url": srv.url, "model": "tiny-ckpt",
                          "api_key_env": "WIRE_KEY"}, store=Store(tmp_path / "s"))
    assert g.completions == [["k"]]
    assert {h.get("authorization") for _, h, _ in srv.seen} == {"Bearer sk-test"}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI for a cert")
def test_https_with_a_verified_certificate_and_keep_alive(raw, tmp_path):
    import asyncio

    from assay.models.http1 import ConnectError, Connection

    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    srv = raw(lambda n, body: ok(completion(f"t{n}")), tls=server_ctx)
    url = srv.url.replace("http://127.0.0.1", "https://localhost")

    async def ask(ctx: ssl.SSLContext) -> list[str]:
        async with Connection(url, {"Content-Type": "application/json"}, ctx) as c:
            return [(await c.post(b"/chat/completions", b"{}")).json()["choices"][0]
                    ["message"]["content"] for _ in range(3)]

    assert asyncio.run(ask(ssl.create_default_context(cafile=str(cert)))) == ["t0", "t1", "t2"]
    assert srv.connections == 1  # kept alive over TLS
    with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(ask(ssl.create_default_context()))  # a certificate nobody vouches for
