"""A real OpenAI-protocol server on 127.0.0.1 whose ``/v1/completions`` echoes the prompt with
per-token logprobs computed by a local transformers model (what vLLM answers to ``echo: true,
logprobs: 1``), with injected faults; for the openai log-likelihood scorer's tests."""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from helpers.openai_server import JSONHandler


class LogprobServer:
    """Serves ``model_dir`` as ``name``; ``faults``: HTTP statuses answered (with Retry-After: 0)
    to the first completion requests; ``requests`` counts completion requests seen."""

    def __init__(self, model_dir: Path, name: str = "tiny", faults: list[int] | None = None,
                 echo: bool = True) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.name, self.faults, self.echo = name, list(faults or []), echo
        self.requests = 0
        self.lock = threading.Lock()
        server = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [
                    {"id": server.name, "object": "model", "root": "/ckpt", "owned_by": "test"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                    fault = server.faults.pop(0) if server.faults else None
                if fault is not None:
                    return self._send(fault, {"error": {"message": "injected"}},
                                      {"Retry-After": "0"})
                self._send(200, server.complete(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The echoed prompt's tokens with their logprobs (None for the first), top-1 of each,
        and one greedy token after the prompt."""
        import torch

        prompt = body["prompt"]
        enc = self.tok(prompt, return_offsets_mapping=True, add_special_tokens=False)
        ids = enc["input_ids"]
        with torch.inference_mode():
            lp = torch.log_softmax(self.model(torch.tensor([ids])).logits[0].float(), dim=-1)
        tokens, values, tops, offsets = [], [], [], []
        for j, (t, (s, _)) in enumerate(zip(ids, enc["offset_mapping"])):
            tokens.append(self.tok.convert_ids_to_tokens(t))
            offsets.append(s)
            if j == 0:
                values.append(None)
                tops.append(None)
                continue
            row = lp[j - 1]
            best = int(row.argmax())
            values.append(float(row[t]))
            tops.append({self.tok.convert_ids_to_tokens(best): float(row[best])})
        nxt = int(lp[-1].argmax())
        gen = self.tok.decode([nxt])
        tokens.append(self.tok.convert_ids_to_tokens(nxt))
        values.append(float(lp[-1][nxt]))
        tops.append({tokens[-1]: values[-1]})
        offsets.append(len(prompt))
        logprobs = {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
                    "text_offset": offsets}
        if not self.echo:  # a server that ignores echo: only the generated token
            logprobs = {k: v[-1:] for k, v in logprobs.items()}
        return {"id": "cmpl-1", "object": "text_completion", "created": int(time.time()),
                "model": self.name, "choices": [{"index": 0, "text": prompt + gen,
                                                 "logprobs": logprobs, "finish_reason": "length"}]}

    def __enter__(self) -> LogprobServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
