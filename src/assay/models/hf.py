"""The ``hf`` backend: a local transformers causal LM, decoded by assay's own batched loop.

Chat template rendered once, left padding, token-budget batches sorted by length, per-row seeds.

Why a loop of our own rather than ``model.generate``: sampling there draws from one global RNG
stream for the whole batch, so a sampled completion depends on its batch neighbours; here each
row draws from its own ``torch.Generator`` seeded by the sample's seed. Greedy decoding is an
argmax per row, and at float32 it gives the same tokens whatever the batch size (tested), since
left padding plus explicit position ids make every row see exactly its own tokens.

Liveness: decoding is a bounded loop (at most ``max_tokens`` steps per batch, every batch
once); each batch's rows are committed as the batch ends, one record per request. A CUDA error
or an out-of-memory raises and ends the call (the longest batch runs first, so that shows at
once); what earlier batches committed stays.

The identity in each completion's key is a checksum of every file of the model directory
(weights, config, tokenizer, chat template): a new checkpoint in the same path recomputes. For a
hub snapshot the LFS blob names already are SHA-256 digests and are used as they are.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from assay.errors import GenerationError, SpecError
from assay.models.base import Request
from assay.models.registry import BACKENDS
from assay.models.specs import HFSpec, SamplingParams

if TYPE_CHECKING:
    import torch

_SUMS: dict[tuple[str, tuple[tuple[str, int, int], ...]], dict[str, str]] = {}


def _file_sha256(path: Path) -> str:
    real = path.resolve()
    if (path.is_symlink() and len(real.name) == 64
            and all(c in "0123456789abcdef" for c in real.name)):
        return real.name  # a hub cache blob: its name is the sha256 of its bytes
    h = hashlib.sha256()
    with open(real, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def directory_checksums(root: str | Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (hidden files skipped), computed
    once per process for an unchanged directory (same names, sizes and mtimes).

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "w.bin").write_bytes(b"x")
        >>> directory_checksums(d)["w.bin"][:12]
        '2d711642b726'
    """
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(root).parts))
    stat = tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    memo = (str(root.resolve()), stat)
    if memo not in _SUMS:
        _SUMS[memo] = {str(p.relative_to(root)): _file_sha256(p) for p in files}
    return _SUMS[memo]


def _resolve(spec: HFSpec) -> Path:
    """A relative ``path`` is a folder beside the spec file (as every path in a spec), else
    one relative to the working directory (specs written before this rule), else a hub id."""
    for local in (spec.spec_paths.resolve(spec.path), Path(spec.path).expanduser()):
        if local.is_dir():
            return local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec.path, revision=spec.revision))
    except Exception as e:
        raise SpecError(f"model.path: {spec.path!r} is not a local directory and could not be "
                        f"fetched from the hub ({type(e).__name__}: {e})") from None


@BACKENDS.register("hf", spec=HFSpec, help="a local transformers causal LM")
class HFBackend:
    """A causal LM (see module docstring), loaded on first generation. ``fixed_batch``: rows per
    batch in input order instead of sorted token-budget batches (the naive baseline of the
    benchmark)."""

    kind = "hf"

    def __init__(self, spec: HFSpec | Mapping[str, object], *,
                 fixed_batch: int | None = None) -> None:
        import torch
        from transformers import AutoTokenizer

        self.spec = spec if isinstance(spec, HFSpec) else HFSpec.model_validate(spec)
        self.fixed_batch = fixed_batch
        self.dir = _resolve(self.spec)
        self.device = torch.device(self.spec.device
                                   or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = {"auto": torch.bfloat16 if self.device.type == "cuda" else torch.float32,
                      "float32": torch.float32, "bfloat16": torch.bfloat16,
                      "float16": torch.float16}[self.spec.dtype]
        self.tok = AutoTokenizer.from_pretrained(self.dir,
                                                 trust_remote_code=self.spec.trust_remote_code)
        self.pad_id = (self.tok.pad_token_id if self.tok.pad_token_id is not None
                       else self.tok.eos_token_id)
        if self.pad_id is None:
            raise GenerationError(f"model.path {self.spec.path}: the tokenizer has neither a pad "
                                  "nor an eos token; set one in tokenizer_config.json")
        self._model: Any = None  # loaded on first use: a cached stage needs only the identity
        self.eos_ids: set[int] = set()
        self._cache_arg = "past_key_values"
        self._identity: dict[str, object] | None = None
        self.stats: dict[str, int] = {"batches": 0, "padded_tokens": 0}

    @property
    def model(self) -> Any:
        """The causal LM, loaded on first use."""
        if self._model is None:
            from transformers import AutoModelForCausalLM

            loaded: Any = AutoModelForCausalLM.from_pretrained(
                self.dir, dtype=self.dtype, trust_remote_code=self.spec.trust_remote_code)
            self._model = loaded.to(self.device).eval()
            gc = self._model.generation_config
            eos = (gc.eos_token_id if gc is not None and gc.eos_token_id is not None
                   else self.tok.eos_token_id)
            self.eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
            # transformers 5.2x renamed the KV cache argument and output past_key_values -> cache
            fwd = inspect.signature(self._model.forward).parameters
            self._cache_arg = "cache" if "cache" in fwd else "past_key_values"
        return self._model

    def identity(self) -> dict[str, object]:
        """Backend, the path as given, the revision and the checksum of every model file
        (re-checked on every call, hashed again only when a file's size or mtime changed; new
        files under the path also drop the loaded model, so it is never used stale)."""
        sums = directory_checksums(self.dir)
        digest = hashlib.sha256("\n".join(f"{k} {v}" for k, v in sorted(sums.items()))
                                .encode()).hexdigest()
        ident: dict[str, object] = {
            "backend": "hf", "path": self.spec.path, "revision": self.spec.revision,
            "files_sha256": digest, "dtype": str(self.dtype).removeprefix("torch.")}
        if self._identity is not None and ident != self._identity and self._model is not None:
            self._model = None
            from transformers import AutoTokenizer

            self.tok = AutoTokenizer.from_pretrained(
                self.dir, trust_remote_code=self.spec.trust_remote_code)
        self._identity = ident
        return ident

    def render(self, messages: list[dict[str, str]], api: str) -> str:
        """Chat: the chat template applied once, with the generation prompt; completions: the
        text."""
        if api == "completions":
            from assay.models.base import render_messages

            return render_messages(messages, "completions")
        if not getattr(self.tok, "chat_template", None):
            raise SpecError(f"model.path {self.spec.path}: the tokenizer has no chat template; "
                            "use api: completions or add a chat_template")
        # tokenize=False: the rendered text
        return cast(str, self.tok.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=True))

    def _batches(self, ids: list[list[int]], max_new: int) -> list[list[int]]:
        order = list(range(len(ids)))
        if self.fixed_batch:
            return [order[i:i + self.fixed_batch] for i in range(0, len(order), self.fixed_batch)]
        order.sort(key=lambda i: -len(ids[i]))  # longest first: an out-of-memory shows at once
        out: list[list[int]] = []
        cur: list[int] = []
        for i in order:
            width = len(ids[cur[0]]) + max_new if cur else len(ids[i]) + max_new
            if cur and (len(cur) + 1) * width > self.spec.batch_tokens:
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
        return out

    def run(self, requests: list[Request], params: SamplingParams, *, api: str,
            max_connections: int, commit: Callable[[Request, dict[str, object]], None]) -> None:
        """Decode every request in token-budget batches, committing each batch's rows."""
        if params.presence_penalty or params.frequency_penalty or params.extra:
            raise GenerationError("model kind hf: presence_penalty, frequency_penalty and "
                                  "params.extra are OpenAI-server options; the hf backend samples "
                                  "with temperature, "
                                  "top_p, max_tokens and stop")
        if not requests:
            return
        # a rendered chat template already has its BOS; so has a text that starts with it (an
        # lm-eval context rendered by a template that writes bos_token: HFLM adds none then)
        bos = self.tok.bos_token
        ids = [self.tok(r.rendered, add_special_tokens=api == "completions" and not (
            bos and r.rendered.startswith(bos)))["input_ids"] for r in requests]
        for batch in self._batches(ids, params.max_tokens):
            t0 = time.monotonic()
            outs = self._decode([ids[i] for i in batch], [requests[i].seed for i in batch], params)
            latency = round((time.monotonic() - t0) / len(batch), 6)
            for i, (text, finish, n_new) in zip(batch, outs):
                commit(requests[i], {"status": "ok", "completion": text, "reason": None,
                                     "finish_reason": finish, "prompt_tokens": len(ids[i]),
                                     "completion_tokens": n_new, "served_model": self.spec.path,
                                     "latency_s": latency, "retries": 0})

    def _decode(self, ids: list[list[int]], seeds: list[int], params: SamplingParams
                ) -> list[tuple[str, str, int]]:
        import torch

        model = self.model  # loads it (and the eos ids) on first use
        n, width = len(ids), max(len(x) for x in ids)
        self.stats["batches"] += 1
        self.stats["padded_tokens"] += n * width
        inp = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for r, x in enumerate(ids):  # left padding: every row's last token is at the same column
            inp[r, width - len(x):] = torch.tensor(x)
            mask[r, width - len(x):] = 1
        inp, mask = inp.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gens = None
        if params.temperature > 0:  # CPU generators: the same draws whatever the device
            gens = [torch.Generator().manual_seed(s) for s in seeds]
        new: list[list[int]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        texts: list[str | None] = [None] * n
        with torch.inference_mode():
            out = model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=True)
            for _step in range(params.max_tokens):
                logits = out.logits[:, -1, :].float()
                nxt = self._pick(logits, gens, params, finish)
                for r in range(n):
                    if finish[r] is not None:
                        continue
                    t = int(nxt[r])
                    if t in self.eos_ids:
                        finish[r] = "stop"
                        continue
                    new[r].append(t)
                    if params.stop:
                        text = self._text(new[r])
                        hit = [text.index(s) for s in params.stop if s in text]
                        if hit:
                            finish[r], texts[r] = "stop", text[:min(hit)]
                            continue
                    if len(new[r]) >= params.max_tokens:
                        finish[r] = "length"
                if all(f is not None for f in finish):
                    break
                nxt = torch.where(torch.tensor([f is None for f in finish], device=self.device),
                                  nxt, torch.full_like(nxt, self.pad_id))
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=self.device)],
                                 dim=1)
                pos = pos[:, -1:] + 1
                out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                                 use_cache=True, **{self._cache_arg: getattr(out, self._cache_arg)})
        result = []
        for r in range(n):
            stopped = texts[r]
            text = stopped if stopped is not None else self._text(new[r])
            n_new = len(new[r]) + (finish[r] == "stop" and texts[r] is None)  # the eos counts
            result.append((text, finish[r] or "length", n_new))
        return result

    def _text(self, ids: list[int]) -> str:
        """The decoded text of one completion's token ids, special tokens left out."""
        return cast(str, self.tok.decode(ids, skip_special_tokens=True))  # one sequence: a str

    @staticmethod
    def _pick(logits: torch.Tensor, gens: list[torch.Generator] | None, params: SamplingParams,
              finish: list[str | None]) -> torch.Tensor:
        """Greedy: the argmax per row. Sampling: one uniform draw per row from that row's own
        CPU generator, turned into a token by inverse CDF over the temperature-scaled, nucleus-cut
        distribution, batched (finished rows draw too; their draws are never used)."""
        import torch

        if gens is None:
            return logits.argmax(-1)
        u = torch.tensor([float(torch.rand(1, generator=g)) for g in gens], dtype=torch.float64,
                         device=logits.device)
        probs = torch.softmax(logits.double() / params.temperature, -1)
        sp, si = probs.sort(dim=-1, descending=True)
        if params.top_p < 1.0:
            sp = sp * ((sp.cumsum(-1) - sp) < params.top_p)  # the smallest prefix reaching top_p
        cdf = sp.cumsum(-1)
        pos = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True)
        return si.gather(1, pos.clamp(max=sp.shape[-1] - 1)).squeeze(-1)

    def close(self) -> None:
        """Drop the model (and, on CUDA, return its memory to the pool)."""
        import torch

        self._model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
