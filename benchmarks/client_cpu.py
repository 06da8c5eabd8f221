"""Benchmark: the openai client's CPU per request near a server's limit, and how busy it keeps
a 20 ms, 32-connection server; old (a git revision) and new alternate in one run.

Run: ``.venv/bin/python benchmarks/client_cpu.py [--requests 2000] [--repeats 5] [--old main]``.

The server is a minimal asyncio HTTP/1.1 keep-alive server in its own process (``--serve``),
lean so that its CPU does not eat the client's core: it answers every completion after
``--latency`` seconds and integrates its requests in flight over time. Its busy share is that
integral over ``connections x wall``: 1.0 would be every connection always holding a request.

Each measurement is a fresh child process running ``OpenAIBackend.run`` (the whole client: lanes,
budget, retries, stats, record parsing; ``commit`` only keeps the records) over ``--requests``
requests after a warm-up of 64, importing ``assay`` either from this tree (new) or from
``git archive <old>`` (old); the two alternate, and each reports ``time.process_time`` (all its
threads) per request and the server's busy share during its measured run. ``--generate`` also
measures ``assay.generate`` into a fresh store (the journal and progress included). Completions
of old and new are checked equal.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# -- the server --------------------------------------------------------------------------------
class _Serve(asyncio.Protocol):
    state: dict[str, Any] = {}

    def connection_made(self, transport: Any) -> None:
        self.t, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            n = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    n = int(v)
            if len(self.buf) < end + 4 + n:
                return
            body, self.buf = self.buf[end + 4:end + 4 + n], self.buf[end + 4 + n:]
            self.handle(head.split(" ", 2)[1], body)

    def handle(self, path: str, body: bytes) -> None:
        s = self.state
        if path.endswith("/stats"):  # the busy integral since the last /stats, then reset
            now = time.monotonic()
            s["area"] += s["inflight"] * (now - s["at"])
            doc = {"area": s["area"], "wall": now - s["since"], "requests": s["n"]}
            s.update(area=0.0, at=now, since=now, n=0)
            self.reply(doc)
            return
        if path.endswith("/models"):
            self.reply({"object": "list", "data": [{"id": "tiny-ckpt", "object": "model"}]})
            return
        self.move(+1)
        # a completion that depends on the whole body: old and new must send the same bytes' worth
        text = "reply " + hashlib.sha256(body).hexdigest()[:16]
        doc = {"id": "x", "object": "chat.completion", "model": "tiny-ckpt",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}}
        asyncio.get_running_loop().call_later(s["latency"], self.answer, doc)

    def answer(self, doc: Any) -> None:
        self.move(-1)
        self.state["n"] += 1
        self.reply(doc)

    def move(self, d: int) -> None:
        s, now = self.state, time.monotonic()
        s["area"] += s["inflight"] * (now - s["at"])
        s["at"], s["inflight"] = now, s["inflight"] + d

    def reply(self, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(data)).encode() + b"\r\n\r\n" + data)


def serve(port_file: str, latency: float) -> None:
    async def main() -> None:
        now = time.monotonic()
        _Serve.state = {"latency": latency, "inflight": 0, "area": 0.0, "at": now,
                        "since": now, "n": 0}
        srv = await asyncio.get_running_loop().create_server(_Serve, "127.0.0.1", 0, backlog=512)
        port = srv.sockets[0].getsockname()[1]
        Path(port_file).write_text(f"http://127.0.0.1:{port}/v1")
        await srv.serve_forever()
    asyncio.run(main())


def start_server(latency: float) -> tuple[subprocess.Popen[bytes], str]:
    port_file = Path(tempfile.mkdtemp()) / "url"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), str(latency)])
    for _ in range(200):
        if port_file.exists() and port_file.read_text():
            return proc, port_file.read_text()
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the benchmark server did not start")


# -- one measurement (a child process) --------------------------------------------------------
def measure(url: str, n: int, conns: int, use_generate: bool, out: str) -> None:
    import httpx

    from assay.models.base import Request
    from assay.models.openai import OpenAIBackend
    from assay.models.specs import SamplingParams

    params = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=64)
    spec = {"kind": "openai", "base_url": url, "model": "tiny-ckpt"}

    def reqs(lo: int, hi: int) -> list[Request]:
        return [Request(f"k{i}", i, 0, 1000 + i, [{"role": "user", "content": f"What is {i}?"}])
                for i in range(lo, hi)]

    texts: dict[str, Any] = {}
    backend = OpenAIBackend(spec)
    backend.run(reqs(-64, 0), params, api="chat", max_connections=conns,
                commit=lambda r, rec: None)  # warm-up: imports, first connections
    httpx.get(url + "/stats")
    if use_generate:
        from assay.models import generate
        from assay.store import Store

        prompts = [f"What is {i}?" for i in range(n)]
        c0, w0 = time.process_time(), time.perf_counter()
        g = generate(prompts, spec, params=params.model_dump(), max_connections=conns,
                     store=Store(tempfile.mkdtemp()))
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        texts = {str(i): c[0] for i, c in enumerate(g.completions)}
    else:
        def commit(r: Request, rec: dict[str, Any]) -> None:
            texts[r.key] = rec["completion"]
        c0, w0 = time.process_time(), time.perf_counter()
        backend.run(reqs(0, n), params, api="chat", max_connections=conns, commit=commit)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    st = httpx.get(url + "/stats").json()
    Path(out).write_text(json.dumps({
        "cpu_ms": 1000 * cpu / n, "wall": wall, "rps": n / wall,
        "busy": st["area"] / (conns * st["wall"]), "inflight": st["area"] / st["wall"],
        "served": st["requests"], "digest": hashlib.sha256(
            json.dumps(texts, sort_keys=True).encode()).hexdigest()}))


def child(src: Path, url: str, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp()) / "r.json"
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, __file__, "--measure", url, str(args.requests),
                    str(args.connections), "1" if args.generate else "0", str(out)],
                   env=env, check=True)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--old", default="main", help="git revision of the baseline client")
    ap.add_argument("--generate", action="store_true", help="measure assay.generate, not run")
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--measure", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], float(args.serve[1]))
        return
    if args.measure:
        u, n, c, g, o = args.measure
        measure(u, int(n), int(c), g == "1", o)
        return
    old = Path(tempfile.mkdtemp())
    subprocess.run(f"git -C {REPO} archive {args.old} src | tar -x -C {old}", shell=True,
                   check=True)
    sides = {"old": old / "src", "new": REPO / "src"}
    proc, url = start_server(args.latency)
    try:
        res: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for _ in range(args.repeats):
            for name, src in sides.items():
                res[name].append(child(src, url, args))
        what = "assay.generate" if args.generate else "OpenAIBackend.run"
        print(f"{what}, {args.requests} requests, server {args.latency * 1000:g} ms x "
              f"{args.connections} connections, medians of {args.repeats} (old = {args.old}):")
        for name, rs in res.items():
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("cpu_ms", "rps", "busy", "inflight")}
            print(f"  {name}: client CPU {med['cpu_ms']:.2f} ms/request "
                  f"{[round(r['cpu_ms'], 2) for r in rs]}, {med['rps']:.0f} req/s, "
                  f"{med['inflight']:.1f} in flight, server busy {100 * med['busy']:.0f}%")
        digests = {r["digest"] for rs in res.values() for r in rs}
        assert len(digests) == 1, "old and new completions differ"
        print("  completions identical (old and new)")
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
