"""A tiny local chat checkpoint (the byte-level BPE Llama of tiny_bpe with a chat template) and a
real ``transformers serve`` process over it, for the tests against a server nobody here wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers.ports import free_port

#: A plain role-tagged template: every turn, then the assistant's cue when generation is asked.
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def build_tiny_chat_lm(path: str | Path, *, seed: int = 0, spread: float = 0.05) -> Path:
    """The tiny BPE Llama saved at ``path`` with :data:`CHAT_TEMPLATE` (what chat servers need);
    ``spread`` scales its output layer so that sampling at temperature 1 varies with the seed
    (tiny_bpe's spread logits make nearly every sample the greedy one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from helpers.tiny_bpe import build_tiny_bpe_lm

    path = build_tiny_bpe_lm(path, seed=seed)
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.lm_head.weight.mul_(spread)
    model.save_pretrained(path)
    # as released chat checkpoints do: transformers serve samples at temperature > 0 only when
    # the checkpoint's generation config says do_sample (else every request is greedy)
    GenerationConfig(do_sample=True, bos_token_id=model.config.bos_token_id,
                     eos_token_id=model.config.eos_token_id).save_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return Path(path)


class TransformersServe:
    """``transformers serve`` on a free 127.0.0.1 port: pinned to ``model`` (a checkpoint path),
    or on demand (``model`` None: the request's ``model`` is a path, loaded on first use).
    Started with :meth:`start` (bounded wait for /v1/models), killed by :meth:`stop`."""

    def __init__(self, model: str | None = None, *, log: Path, ready_s: float = 120.0) -> None:
        self.model, self.log_path, self.ready_s = model, log, ready_s
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> TransformersServe:
        """Launch and wait until it answers (bounded)."""
        return self.launch().ready()

    def launch(self) -> TransformersServe:
        """Start the process; :meth:`ready` waits for it (two servers can start side by side)."""
        exe = Path(sys.executable).with_name("transformers")
        args = [str(exe), "serve", *([self.model] if self.model else []), "--host", "127.0.0.1",
                "--port", str(self.port), "--device", "cpu"]
        # unbuffered: the access log (what :meth:`seen` counts) is written as requests end
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "PYTHONUNBUFFERED": "1"}
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        return self

    def ready(self) -> TransformersServe:
        assert self.proc is not None
        end = time.monotonic() + self.ready_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited {self.proc.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"transformers serve not up in {self.ready_s:g}s: "
                                   f"{self.log_path.read_text()[-2000:]}")
            time.sleep(0.2)

    def seen(self, what: str) -> int:
        """How many requests the server's access log shows, e.g. ``POST /v1/chat/completions``
        or ``GET /v1/models`` (uvicorn logs each answered request)."""
        return self.log_path.read_text(errors="replace").count(f'"{what} HTTP/1.1"')

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if getattr(self, "_log", None) is not None:
            self._log.close()
