"""Log-likelihood scoring on a local transformers causal LM, tokenized and windowed exactly as
lm-evaluation-harness's ``HFLM`` does, in batched forward passes.

Tokenization (lm-eval ``TemplateLM._encode_pair``): trailing spaces of the context move to the
start of the continuation, the whole text is encoded once and the continuation's tokens are what
follows the context's own encoding, so a boundary space lands in the same token as there. An
empty context is replaced by the prefix token (BOS, else EOS). The input is
``(context + continuation)[-(max_length + 1):][:-1]``; the continuation's
log-probabilities are read off the last ``len(continuation)`` positions.

One computation per request, whatever else is scored (issue 52): requests whose model inputs
and continuation lengths are equal share one forward pass (a multiple-choice question with
one-token choices " A".." D" is one pass, as lm-eval's ``logits_cache``), and every pass is that
input alone: a batch of one row, unpadded, the logits of its last ``len(continuation)`` positions
only (transformers' ``logits_to_keep``; the output layer is most of a small model's cost on CPU),
``log_softmax`` in float32 over those. Batching rows of different requests, padding them, or
keeping the logits of the union of several requests' positions changes the last bits of a
log-likelihood at float32 (CPU GEMM blocking depends on the matrix shapes), so the bits of an
answer would depend on its neighbours, on what a resumed run found in its journal, on the order.
On CPU each pass also runs at a fixed number of intra-op threads (:func:`cpu_threads`, under one
process-wide lock), since a GEMV's reduction order depends on the thread count (measured: 3
threads differ from 1 at ``[1, 4096] x [4096, 32000]``). ``batch_tokens`` only bounds how many
input tokens one commit (one yield of :meth:`HFScorer.score_batches`) covers. The cost, measured
(docs/concurrency.md): the log-likelihood section.

Perplexity windows (lm-eval ``loglikelihood_rolling``): the document's tokens, the prefix token
in front, cut into disjoint windows of ``max_length`` predictions, each with as much preceding
text as fits. ``max_length`` is the model config's ``n_positions`` / ``max_position_embeddings``
/ ``n_ctx``, else the tokenizer's ``model_max_length``, else 2048 (lm-eval's order), unless the
model entry sets ``max_length`` (lm-eval's ``model_args=max_length=...``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from assay.errors import GenerationError, SpecError
from assay.models.scorers import SCORERS, Loglik
from assay.models.specs import HFSpec

_TOKENIZER_INFINITY = 1000000000000000019884624838656

def cpu_threads() -> int:
    """Intra-op threads of every CPU forward pass: ``ASSAY_LOGLIK_THREADS``, default 1 (the one
    count whose reduction order no library splits). Part of the scorer's identity, so answers
    computed at another count are never mixed into one journal.

    Example:
        >>> cpu_threads() >= 1
        True
    """
    raw = os.environ.get("ASSAY_LOGLIK_THREADS", "").strip() or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise SpecError(f"ASSAY_LOGLIK_THREADS={raw!r}: expected a whole number of threads >= 1")
    return int(raw)


# torch.set_num_threads is process-wide (MKL's count is global): one pass at a time sets it
_THREADS_LOCK = threading.Lock()


@contextmanager
def fixed_threads(device_type: str) -> Iterator[None]:
    """On CPU: hold the process-wide lock and run at :func:`cpu_threads` intra-op threads,
    restoring the caller's count after; elsewhere nothing (a GPU kernel's order does not follow
    the CPU thread count).

    Example:
        >>> import torch
        >>> before = torch.get_num_threads()
        >>> with fixed_threads("cpu"):
        ...     torch.get_num_threads() == cpu_threads()
        True
        >>> torch.get_num_threads() == before
        True
    """
    if device_type != "cpu":
        yield
        return
    import torch

    n = cpu_threads()
    with _THREADS_LOCK:
        before = torch.get_num_threads()
        if before != n:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if before != n:
                torch.set_num_threads(before)


def rolling_windows(tokens: list[int], prefix: int, max_len: int
                    ) -> list[tuple[list[int], list[int]]]:
    """Disjoint ``(context, continuation)`` token windows covering ``tokens``: every token is
    predicted once, each window with the longest context that fits ``max_len`` (lm-eval's
    ``get_rolling_token_windows`` with ``context_len=1``, then ``make_disjoint_window``).

    Example:
        >>> rolling_windows([1, 2, 3, 4, 5, 6, 7], prefix=0, max_len=4)
        [([0], [1, 2, 3, 4]), ([3, 4], [5, 6, 7])]
    """
    if not tokens:
        return []
    out = []
    first = min(max_len, len(tokens))
    windows = [([prefix] + tokens[:first - 1], tokens[:first])]
    done = first
    while done < len(tokens):
        n = min(len(tokens) - done, max_len)
        end = done + n
        windows.append((tokens[max(0, end - max_len - 1):end - 1], tokens[end - n:end]))
        done += n
    for ctx, cont in windows:
        out.append((ctx[:len(ctx) - (len(cont) - 1)], cont))
    return out


@SCORERS.register("hf")
class HFScorer:
    """Scores ``(context, continuation)`` pairs and documents on an ``hf`` model entry (see the
    module docstring). The model loads on first use; ``identity()`` is the backend's (the
    checksum of every model file and the dtype)."""

    def __init__(self, spec: HFSpec | Mapping[str, object]) -> None:
        from assay.models.hf import HFBackend

        self.backend = HFBackend(spec)
        self.tok = self.backend.tok
        self.device = self.backend.device
        self.batch_tokens = self.backend.spec.batch_tokens
        bos, eos = self.tok.bos_token_id, self.tok.eos_token_id
        self.prefix_id = bos if bos is not None else eos
        if self.prefix_id is None:
            raise GenerationError(f"model.path {self.backend.spec.path}: the tokenizer has neither "
                                  "a BOS nor an EOS token to condition an empty context on")
        self._prefix_text = str(self.tok.decode(self.prefix_id))
        self.stats = {"forward_rows": 0, "batches": 0, "padded_tokens": 0}

    def identity(self) -> dict[str, object]:
        # /2: one unpadded pass per input (issue 52); /1's batched bits are not mixed in
        ident = {**self.backend.identity(), "scorer": "hf-loglik/2"}
        if self.device.type == "cpu":
            ident["cpu_threads"] = cpu_threads()
        if self.backend.spec.max_length is not None:  # unset: existing caches keep their key
            ident["max_length"] = self.backend.spec.max_length
        return ident

    @property
    def max_length(self) -> int:
        if self.backend.spec.max_length is not None:
            return int(self.backend.spec.max_length)
        cfg = self.backend.model.config
        cfg = getattr(cfg, "text_config", None) or cfg
        for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
            v = getattr(cfg, attr, None)
            if v is not None:
                return int(v)
        m = getattr(self.tok, "model_max_length", None)
        return int(m) if m is not None and m != _TOKENIZER_INFINITY else 2048

    def encode(self, text: str, add_special_tokens: bool | None = None) -> list[int]:
        """lm-eval's ``tok_encode``: the tokenizer's own special-token default, except that a
        text already starting with the prefix token's text gets no second one."""
        kw: dict[str, bool] = {}
        if add_special_tokens is not None:
            kw["add_special_tokens"] = add_special_tokens
        elif self._prefix_text and text.startswith(self._prefix_text):
            kw["add_special_tokens"] = False
        return list(self.tok.encode(text, **kw))

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens as lm-eval splits them (module docstring)."""
        if context == "":
            cont = self.encode(continuation, add_special_tokens=False)
            if cont and cont[0] == self.prefix_id:
                return cont[:1], cont[1:]
            return [self.prefix_id], cont
        n = len(context) - len(context.rstrip())
        if n:
            context, continuation = context[:-n], context[-n:] + continuation
        whole = self.encode(context + continuation)
        ctx = self.encode(context)
        return ctx, whole[len(ctx):]

    def score_batches(self, pairs: Sequence[tuple[str, str]]
                      ) -> Iterator[tuple[list[int], list[Loglik]]]:
        """``(indices, answers)`` per batch of forward passes, for the pairs in any order."""
        toks = []
        for i, (c, x) in enumerate(pairs):
            ctx, cont = self.encode_pair(c, x)
            if not cont:
                raise GenerationError(f"request {i}: the continuation {x!r} is empty once "
                                      f"tokenized (context ends {c[-40:]!r}); nothing to score")
            toks.append((ctx, cont))
        yield from self._score_tokens(toks)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Loglik]:
        """One answer per pair, in order."""
        out: list[Loglik | None] = [None] * len(pairs)
        for idx, ans in self.score_batches(pairs):
            for i, a in zip(idx, ans):
                out[i] = a
        done = [o for o in out if o is not None]
        assert len(done) == len(out)  # score_batches covers every pair
        return done

    def score_rolling_batches(self, texts: Sequence[str], docs_per_step: int = 64
                              ) -> Iterator[tuple[list[int], list[Loglik]]]:
        """``(indices, answers)`` per group of documents: each document's summed log-probability
        over its rolling windows, ``is_greedy`` whether every window's tokens are greedy."""
        for lo in range(0, len(texts), docs_per_step):
            idx = list(range(lo, min(lo + docs_per_step, len(texts))))
            windows, owner = [], []
            for i in idx:
                for w in rolling_windows(self.encode(texts[i]), self.prefix_id, self.max_length):
                    windows.append(w)
                    owner.append(i)
            got: list[Loglik | None] = [None] * len(windows)
            for widx, ans in self._score_tokens(windows):
                for wi, a in zip(widx, ans):
                    got[wi] = a
            sums = {i: [0.0, True, 0] for i in idx}
            for wi, win in enumerate(got):  # in window order: the same float sum in any run
                assert win is not None  # _score_tokens answers every window
                s = sums[owner[wi]]
                s[0] += win.logprob
                s[1] = s[1] and win.is_greedy
                s[2] += win.tokens
            yield idx, [Loglik(float(sums[i][0]), bool(sums[i][1]), int(sums[i][2])) for i in idx]

    def _score_tokens(self, toks: Sequence[tuple[list[int], list[int]]]
                      ) -> Iterator[tuple[list[int], list[Loglik]]]:
        """``(indices, answers)`` per commit group; each answer from the pass of its own input
        alone (module docstring), so it has the same bits in any call, order and process."""
        import inspect

        model = self.backend.model
        self._keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        L = self.max_length
        # (model input, positions read) -> the requests reading exactly those logits
        rows: dict[tuple[tuple[int, ...], int], list[int]] = {}
        for i, (ctx, cont) in enumerate(toks):
            if len(cont) > L:
                raise GenerationError(f"request {i}: the continuation has {len(cont)} tokens, "
                                      f"more than the model's context of {L}")
            inp = tuple((ctx + cont)[-(L + 1):][:-1])
            rows.setdefault((inp, len(cont)), []).append(i)
        # longest first: a pass that does not fit in memory fails at once
        order = sorted(rows, key=lambda r: (-len(r[0]), r))
        idx: list[int] = []
        ans: list[Loglik] = []
        tokens = 0
        for key in order:
            for i, a in zip(rows[key], self._one_pass(key[0], [toks[i][1] for i in rows[key]])):
                idx.append(i)
                ans.append(a)
            tokens += len(key[0])
            if tokens >= self.batch_tokens:
                self.stats["batches"] += 1
                yield idx, ans
                idx, ans, tokens = [], [], 0
        if idx:
            self.stats["batches"] += 1
            yield idx, ans

    def _one_pass(self, inp: tuple[int, ...], conts: list[list[int]]) -> list[Loglik]:
        """The answers of continuations ``conts`` (all of one length) that read input ``inp``:
        one forward pass of ``inp`` alone, the logits of its last ``len(conts[0])`` positions."""
        import torch

        k = len(conts[0])
        ids = torch.tensor([inp], dtype=torch.long, device=self.device)
        kw: dict[str, int] = {"logits_to_keep": k} if self._keep_arg else {}
        out = []
        with fixed_threads(self.device.type), torch.inference_mode():
            logits = self.backend.model(ids, use_cache=False, **kw).logits[0, -k:]
            lp = torch.log_softmax(logits.float(), dim=-1)
            greedy_ids = lp.argmax(dim=-1)
            for cont in conts:
                target = torch.tensor(cont, dtype=torch.long, device=lp.device)
                total = lp.gather(1, target[:, None]).sum().item()
                greedy = bool((greedy_ids == target).all().item())
                out.append(Loglik(float(total), greedy, k))
        self.stats["forward_rows"] += 1
        self.stats["padded_tokens"] += len(inp)
        return out

    def close(self) -> None:
        self.backend.close()

