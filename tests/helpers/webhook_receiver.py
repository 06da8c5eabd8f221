"""A webhook receiver on 127.0.0.1 for alert tests: records every request body it gets.

``fail_first`` answers that many requests with HTTP 503 first (to exercise retries).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def webhook_receiver(fail_first: int = 0, status: int = 200) -> Iterator[dict[str, Any]]:
    """Yields ``{"url": ..., "messages": [decoded JSON bodies], "requests": int, "times":
    [time.time() each message arrived]}``."""
    state: dict[str, Any] = {"messages": [], "requests": 0, "fail": fail_first, "times": []}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                state["requests"] += 1
                if state["fail"] > 0:
                    state["fail"] -= 1
                    code = 503
                else:
                    code = status
                    if code < 300:
                        state["messages"].append(json.loads(body))
                        state["times"].append(time.time())
            self.send_response(code)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    state["url"] = f"http://127.0.0.1:{srv.server_address[1]}/hook"
    try:
        yield state
    finally:
        srv.shutdown()
        srv.server_close()
