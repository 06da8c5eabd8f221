"""A real OpenAI-protocol HTTP server on 127.0.0.1 for the model tests: a scripted policy,
request counting, injected faults (429 with Retry-After, 500, timeouts, 400) and latency.

The policy is deterministic in (model, prompt, seed, temperature), so a cached completion and a
fresh one can be compared; it honours ``max_tokens`` (finish_reason ``length``) and ``stop``.
Run as a script (``python openai_server.py PORT_FILE [LATENCY [P429 P500]]``) it serves until
killed, optionally failing first attempts (:func:`first_attempt_faults`).
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def scripted_policy(body: dict[str, Any]) -> str:
    """The model: sums ``a + b`` questions (with a seed-dependent slip when sampling), grades a
    judge prompt by the answer it quotes, otherwise echoes a hash of everything that matters."""
    prompt = body.get("prompt")
    if prompt is None:
        prompt = "\n".join(m["content"] for m in body["messages"])
    last = prompt if "prompt" in body else body["messages"][-1]["content"]
    judge = re.search(r"\[Submission\]: (.*?)\n.*\[Criterion\]: (.*?)\n", prompt, re.S)
    if judge:
        sub, crit = judge.group(1).strip(), judge.group(2).strip()
        if "UNPARSEABLE" in sub:
            return "I am not sure how to grade this."
        return f"The submission says {sub}. GRADE: {'C' if sub == crit else 'I'}"
    m = re.search(r"What is (\d+) \+ (\d+)\?", last)
    seed = body.get("seed")
    if m:
        ans = int(m.group(1)) + int(m.group(2))
        if body.get("temperature", 1.0) > 0 and seed is not None and seed % 4 == 0:
            ans += 1  # a sampled slip: a quarter of seeds answer wrong
        return f"The answer is {ans}. done"
    h = hashlib.sha256(json.dumps([body["model"], prompt, seed,
                                   body.get("temperature")]).encode()).hexdigest()
    return f"reply {h[:12]} to {last[:40]}"


def latch(pred: Callable[[], bool]) -> Callable[[], bool]:
    """``pred`` until it first holds, then True for good: a gate (``Fault(until=...)``) that
    opens once for every request it holds, however late each one looks."""
    opened = threading.Event()

    def check() -> bool:
        if not opened.is_set() and pred():
            opened.set()
        return opened.is_set()
    return check


class JSONHandler(BaseHTTPRequestHandler):
    """The loopback test servers' request handler: keep-alive HTTP/1.1, quiet, JSON answers."""

    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK add ~40 ms to every keep-alive answer
    disable_nagle_algorithm = True

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, code: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog of 5 refuses bursts of concurrent clients
    daemon_threads = True


class Fault:
    """One scripted answer in place of a completion: an HTTP status (with Retry-After and a
    message), a stall of ``sleep`` seconds (a timeout for the client), a dropped connection
    (closed without an answer), or, with ``status=None``, the normal answer after the stall
    and after ``until()`` holds (polled; ``until_s`` caps the wait, counted in
    ``gate_timeouts``)."""

    def __init__(self, status: int | None = 500, *, retry_after: str | None = None,
                 message: str = "injected", sleep: float = 0.0, drop: bool = False,
                 until: Callable[[], bool] | None = None, until_s: float = 30.0) -> None:
        self.status, self.retry_after = status, retry_after
        self.message, self.sleep = message, sleep
        self.drop, self.until, self.until_s = drop, until, until_s


class OpenAIServer:
    """Serves /v1/models, /v1/chat/completions and /v1/completions on 127.0.0.1:<free port>.

    ``faults``: a list consumed in order, one per completion request (None = answer normally),
    or a callable ``(n, body) -> Fault | None``. ``latency``: seconds before each answer.
    ``requests``: every completion request body seen, with its arrival time."""

    def __init__(self, models: list[str] | None = None, *, latency: float = 0.0,
                 policy: Callable[[dict[str, Any]], str] = scripted_policy, port: int = 0) -> None:
        self.models = models or ["tiny-ckpt"]
        self.latency = latency
        self.policy = policy
        self.faults: list[Fault | None] | Callable[[int, dict[str, Any]], Fault | None] = []
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.gate_timeouts = 0
        self.lock = threading.Lock()
        self.sockets: set[Any] = set()
        server = self

        class Handler(JSONHandler):
            def setup(self) -> None:
                super().setup()
                with server.lock:
                    server.sockets.add(self.connection)

            def finish(self) -> None:
                with server.lock:
                    server.sockets.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            counted = False  # this request is counted in server.in_flight

            def _leave(self) -> None:
                """The request stops counting as in flight: before its answer goes out, since
                the client may send its next request the moment it reads the answer."""
                if self.counted:
                    self.counted = False
                    with server.lock:
                        server.in_flight -= 1

            def _send(self, code: int, doc: Any, headers: dict[str, str] | None = None) -> None:
                self._leave()
                super()._send(code, doc, headers)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "created": int(time.time()),
                         "owned_by": "test", "root": f"/ckpt/{m}", "parent": None,
                         "max_model_len": 2048}
                        for m in server.models]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                chat = self.path == "/v1/chat/completions"
                if not chat and self.path != "/v1/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                with server.lock:
                    n = len(server.requests)
                    server.requests.append({**body, "_path": self.path, "_t": time.monotonic(),
                                            "_auth": self.headers.get("Authorization")})
                    server.in_flight += 1
                    self.counted = True
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    f = server.faults(n, body) if callable(server.faults) else (
                        server.faults.pop(0) if server.faults else None)
                try:
                    if server.latency:
                        time.sleep(server.latency)
                    if f is not None and f.sleep:
                        time.sleep(f.sleep)
                    if f is not None and f.until is not None:
                        end = time.monotonic() + f.until_s
                        while not f.until():
                            if time.monotonic() > end:
                                with server.lock:
                                    server.gate_timeouts += 1
                                break
                            time.sleep(0.002)
                    if f is not None and f.drop:
                        self._leave()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return None
                    if f is not None and f.status is not None:
                        hdr = {"Retry-After": f.retry_after} if f.retry_after is not None else None
                        return self._send(f.status,
                                          {"error": {"message": f.message, "code": f.status}}, hdr)
                    if body.get("model") not in server.models:
                        return self._send(404, {"error": {
                            "message": f"The model `{body.get('model')}` does not exist."}})
                    missing = [p for p in ("temperature", "top_p", "max_tokens", "seed")
                               if p not in body]
                    if missing:
                        return self._send(400, {"error": {
                            "message": f"test server wants explicit {missing}"}})
                    text = server.policy(body)
                    words = text.split(" ")
                    finish = "stop"
                    for s in body.get("stop") or []:
                        if s in text:
                            text = text[:text.index(s)]
                            words = text.split(" ")
                    if len(words) > body["max_tokens"]:
                        words, finish = words[:body["max_tokens"]], "length"
                    text = " ".join(words)
                    choice = {"index": 0, "finish_reason": finish}
                    n_in = len(str(body.get("messages") or body.get("prompt")).split())
                    if chat:
                        choice["message"] = {"role": "assistant", "content": text}
                    else:
                        choice["text"] = text
                    self._send(200,
                               {"id": f"cmpl-{n}",
                                "object": "chat.completion" if chat else "text_completion",
                                "model": body["model"], "choices": [choice],
                                "usage": {"prompt_tokens": n_in, "completion_tokens": len(words),
                                          # as real servers send (inspect_ai requires it)
                                          "total_tokens": n_in + len(words)}})
                finally:
                    self._leave()

        self.httpd = _Server(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> OpenAIServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def kill(self) -> None:
        """Die as a restarted server does: stop listening and reset every open connection."""
        self.stop()
        with self.lock:
            socks = list(self.sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def settle(self) -> int:
        """Wait until no request is in flight and the count stops moving (requests a killed
        client had sent have all arrived), then return the count."""
        seen, still = -1, 0
        while still < 5:
            time.sleep(0.05)
            n = self.count()
            still = still + 1 if n == seen and self.in_flight == 0 else 0
            seen = n
        return seen

    def count(self, since: int = 0) -> int:
        return len(self.requests) - since


def first_attempt_faults(p429: float, p500: float) -> Callable[[int, dict[str, Any]], Fault | None]:
    """Faults on first attempts only: a share ``p429`` of samples (drawn from a hash of the
    prompt and seed, so the same ones every run) get a 429, a share ``p500`` a 500."""
    seen: set[str] = set()
    lock = threading.Lock()

    def faults(n: int, body: dict[str, Any]) -> Fault | None:
        key = json.dumps([body.get("messages") or body.get("prompt"), body.get("seed")])
        with lock:
            if key in seen:
                return None
            seen.add(key)
        u = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 2 ** 32
        if u < p429:
            return Fault(429, message="rate limited")
        return Fault(500, message="engine hiccup") if u < p429 + p500 else None
    return faults


@contextmanager
def served_in_child(folder: Path, latency: float = 0.1) -> Iterator[dict[str, Any]]:
    """This server as a script in a child process (so a test can ``SIGSTOP`` it: its kernel
    still accepts connections, nothing answers). Yields ``{"url": ..., "proc": Popen}``; the
    child is resumed and killed at the end."""
    port_file = folder / "server-port.txt"
    proc = subprocess.Popen([sys.executable, __file__, str(port_file), str(latency)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text()):
            assert time.monotonic() < end and proc.poll() is None, "the server did not start"
            time.sleep(0.05)
        yield {"url": port_file.read_text(), "proc": proc}
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)


def hung_study(folder: Path, url: str, stall: str | None = None, notify: str | None = None,
               tasks: int = 40) -> Path:
    """``folder/s.yaml``: study ``hung``, ``tasks`` sums in ``a.jsonl`` asked k=2 over four
    connections of the server at ``url`` (``timeout_s: 300``: only a stop ends a wait on a
    frozen server), with ``execution.stall_after: stall`` and ``nightly.notify: notify``."""
    (folder / "a.jsonl").write_text("".join(
        json.dumps({"q": f"What is {i} + 1?", "gold": str(i + 1), "id": f"t{i}"}) + "\n"
        for i in range(tasks)))
    spec = folder / "s.yaml"
    spec.write_text(f"""name: hung
sources:
  - name: a
    kind: file
    path: a.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt, max_retries: 2, timeout_s: 300}}
      k: 2
      max_connections: 4
    verifier: {{kind: exact_match}}
""" + (f"execution: {{stall_after: {stall}}}\n" if stall else "")
        + (f"nightly: {{notify: '{notify}'}}\n" if notify else ""))
    return spec


if __name__ == "__main__":
    # python openai_server.py PORT_FILE [LATENCY [P429 P500]]
    srv = OpenAIServer(latency=float(sys.argv[2]) if len(sys.argv) > 2 else 0.0).start()
    if len(sys.argv) > 4:
        srv.faults = first_attempt_faults(float(sys.argv[3]), float(sys.argv[4]))
    with open(sys.argv[1], "w") as fh:
        fh.write(srv.base_url)
    srv.thread.join()


def served_source(max_connections: int, verifier: str) -> str:
    """A spec's ``sources:`` entry, as a ``str.format`` template over ``{url}``: file source
    ``a`` (a.jsonl with fields q, gold, id) generating k=2 from the loopback server at ``{url}``
    with ``max_connections``, graded by ``verifier`` (YAML, braces doubled)."""
    return ("  - name: a\n    kind: file\n    path: a.jsonl\n"
            "    fields: {{prompt: q, reference: gold, task_id: id}}\n    generate:\n"
            '      model: {{kind: openai, base_url: "{url}", model: m, max_retries: 0, '
            "timeout_s: 300}}\n"
            f"      k: 2\n      max_connections: {max_connections}\n    verifier: {verifier}\n")
