"""``assay view RUN --serve``: the page's folder over HTTP on 127.0.0.1 (the page needs no server;
this is for viewing a run on a remote machine through an SSH tunnel).

Example:
    >>> import tempfile, urllib.request
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "index.html").write_text("<p>hi</p>")
    >>> server = make_server(d, port=0)
    >>> import threading; t = threading.Thread(target=server.serve_forever, daemon=True); t.start()
    >>> urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/index.html").read()
    b'<p>hi</p>'
    >>> server.shutdown(); server.server_close()
"""

from __future__ import annotations

import functools
import os
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # one line per request is noise
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")  # a rewritten page is never served stale
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()


def make_server(folder: str | os.PathLike[str], port: int = 0) -> ThreadingHTTPServer:
    """A server for ``folder`` on 127.0.0.1 (``port`` 0: any free port); the caller runs it."""
    handler = functools.partial(_Quiet, directory=str(Path(folder)))
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


def serve(folder: str | os.PathLike[str], port: int = 0) -> None:
    """Serve ``folder`` until interrupted, printing its address first."""
    server = make_server(folder, port)
    print(f"serving {folder} on http://127.0.0.1:{server.server_address[1]}/index.html "
          "(Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
