"""A TCP relay that holds every chunk it forwards for a set delay each way: a loopback server
made to answer like one a network away (an object store in another building or region).

Example:
    >>> with LatencyProxy("127.0.0.1", 9, delay_s=0.005) as p:  # doctest: +SKIP
    ...     url = f"http://127.0.0.1:{p.port}"
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType


class LatencyProxy:
    """Relays 127.0.0.1:``port`` to ``host``:``target_port``; each chunk, in either direction,
    is delivered ``delay_s`` after it arrived (in order: a pipe, not a queue that reorders), so
    a request-response exchange costs 2 x ``delay_s`` more, as over a link of that latency."""

    def __init__(self, host: str, target_port: int, delay_s: float) -> None:
        self.host, self.target_port, self.delay_s = host, target_port, delay_s
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("latency proxy did not start")
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in rest:
            t.cancel()
        await asyncio.wait(rest, timeout=5) if rest else None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            cw.close()
            return
        try:
            await asyncio.gather(self._pipe(cr, sw), self._pipe(sr, cw))
        except asyncio.CancelledError:  # the proxy closes: end quietly (asyncio logs otherwise)
            cw.close()
            sw.close()

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await chunks.get()
                if not data:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                w.write(data)
                await w.drain()
            w.close()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await r.read(1 << 16)
                await chunks.put((loop.time() + self.delay_s, data))
                if not data:
                    break
        except (ConnectionError, OSError):
            await chunks.put((0.0, b""))
        try:
            await sender
        except (ConnectionError, OSError):
            pass
