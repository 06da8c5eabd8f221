"""HFRewardModel: any transformers sequence-classification reward model, scored carefully.

Chat template rendered once, single BOS, counted truncation, token-budget batches, fp32 head.

The scoring protocol (what the fingerprint's ``protocol`` part names):

1. Render ``[{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]``
   with the tokenizer's chat template to text, once (``template="chat"``; models without a
   template score the text pair ``(prompt, response)`` with the tokenizer's pair encoding,
   ``template="pair"``).
2. Tokenize that text. When the rendered text already starts with the BOS token the tokenizer
   is told not to add special tokens again, otherwise it adds its usual ones; either way every
   item is checked to start with exactly one BOS (a second BOS shifts every score).
3. Inputs longer than ``max_length`` follow ``truncation``: ``"left-prompt"`` (default) drops
   tokens from the start of the prompt and keeps the template and the whole response;
   ``"right"`` cuts the end of the token sequence (the response's end: usually wrong for a
   reward model, offered for parity with other tools); ``"error"`` raises. Every run counts
   its truncated items (``last_run.truncated``); nothing is cut silently.
4. Every distinct input is scored alone (``batching="alone"``, the default): one forward pass
   per input, one row, no padding, so its score's bits do not depend on which other inputs
   were scored with it (issue 49: a rerun after an edit scores only the new inputs and must
   equal a cold run byte for byte). Measured on the tests' tiny Llama, 200 varied inputs at
   float32 on CPU: 115 scores' bits differ between alone and padded length-sorted batches,
   60 between alone and unpadded batches of equal-length inputs (GEMM blocking follows the
   matrix shapes), none at 1 vs 2-4 threads (a larger model's GEMV does; hf_loglik measured it).
   On CPU each pass runs at :func:`assay.models.hf_loglik.cpu_threads` intra-op threads under
   its process-wide lock. ``batching="padded"`` is the faster option for a GPU: items sorted by
   length and batched under a padded-token budget (``batch_tokens``), right padded with
   ``config.pad_token_id`` and an attention mask; its scores then agree with alone only within
   :meth:`HFRewardModel.check_invariance`'s tolerance, not bit for bit. A model whose config has
   no pad token cannot locate the last token in a padded batch, so it is scored one item at a
   time (noted in ``last_run.notes``) instead of editing its config.
5. Forward under ``torch.inference_mode``; on CUDA the weights are bf16 and the reward head
   fp32 (re-read from the checkpoint); on CPU everything is fp32. An out-of-memory error halves
   the token budget and retries.

The model's config is never modified (a test compares it before and after loading and
scoring). The attention implementation transformers picked is recorded in ``info``.

The CUDA branches (device/dtype selection, bf16 weights with the fp32 head, ``empty_cache`` on
OOM) are the same code paths the CPU tests exercise with ``dtype="bfloat16"`` on CPU and a
simulated ``torch.OutOfMemoryError``; they have not been run on a GPU in this repository's CI.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias, cast

import numpy as np

from assay.errors import DataError
from assay.hashing import combine, dir_digest
from assay.models.hf_loglik import cpu_threads, fixed_threads
from assay.results import Estimate, Result
from assay.reward.base import (
    PROTOCOL_VERSION,
    RewardModelError,
    ScoreRun,
    check_scores,
    check_texts,
    unique_index,
)
from assay.reward.batching import PlanRun, run_plan
from assay.reward.runtime import (
    quiet_loading,
    resolve_device,
    resolve_dtype,
    torch_dtype,
    upcast_head,
)

#: What a prompt is here: a user turn, or a whole conversation as (role, content) turns.
Prompt: TypeAlias = str | Sequence[tuple[str, str]]

TRUNCATION_POLICIES = ("left-prompt", "right", "error")
TEMPLATES = ("auto", "chat", "pair")
BATCHING = ("alone", "padded")
#: Bump when the same input's score can change bits (part of ``fingerprint``); 2: each input alone
SCORING_VERSION = 2

# Varied lengths so batches mix short and long sequences (the case padding bugs show up in).
PROBE_PROMPTS = (
    "What is 2 + 2?",
    "Explain, in a few sentences, why the sky looks blue during the day but red at sunset.",
    "Name a prime number.",
    "Write a haiku about autumn leaves falling on a quiet pond in the early morning light.",
    "Is the Great Wall of China visible from the Moon with the naked eye?",
    "Translate 'good morning' into French.",
)
PROBE_RESPONSES = (
    "4.",
    "Sunlight scatters off air molecules; blue light scatters most, so the sky looks blue. At "
    "sunset the light crosses more air, the blue is scattered away and red remains.",
    "7",
    "Leaves drift and settle / ripples fold the morning light / the pond keeps its hush",
    "No. It is far too narrow to see from the Moon without aid.",
    "Bonjour.",
)


@dataclass(frozen=True)
class Invariance(Result):
    """Whether scores depend on batch composition or padding (they must not, beyond ``atol``).

    ``single_vs_batched`` is the largest absolute score change between scoring each item alone
    and scoring in the model's usual batches; ``padding`` the change when every batch carries
    ``extra_padding`` more pad tokens.

    Example:
        >>> r = Invariance(8, 1e-6, 2e-6, 1e-4, 8, 4, True)
        >>> print(r)  # doctest: +NORMALIZE_WHITESPACE
        invariance ok: batch-size change 1e-06, padding change 2e-06 (atol 0.0001; 8 items,
        largest batch 4)
    """

    n_items: int
    single_vs_batched: float
    padding: float
    atol: float
    extra_padding: int
    largest_batch: int
    passed: bool
    note: str = ""

    def _headline(self) -> Estimate:
        """The largest |single - batched| score difference over the items checked."""
        return Estimate("max |single - batched|", float(self.single_vs_batched), None,
                        self.n_items, "items")

    def __str__(self) -> str:
        word = "ok" if self.passed else "FAILED"
        note = f"; {self.note}" if self.note else ""
        return (f"invariance {word}: batch-size change {self.single_vs_batched:.3g}, padding "
                f"change {self.padding:.3g} (atol {self.atol:g}; {self.n_items} items, largest "
                f"batch {self.largest_batch}{note})")


class HFRewardModel:
    """A transformers ``AutoModelForSequenceClassification`` reward model (local path or hub id).

    See the module docstring for the scoring protocol. ``batching="alone"`` (default) scores each
    distinct input in its own unpadded pass, so its bits never depend on the other inputs;
    ``"padded"`` uses token-budget batches (faster on a GPU, equal only within tolerance).
    ``score(prompts, responses)`` returns float64 scores; ``last_run`` counts truncations,
    batches and OOM backoffs of the last call; ``info`` records device, dtype, head precision,
    attention implementation and template mode.

    Example (a hub model needs a network; any local directory works the same way):
        >>> rm = HFRewardModel("path/to/reward-model")           # doctest: +SKIP
        >>> rm.score(["What is 2+2?"], ["4"])                     # doctest: +SKIP
        array([1.83...])
    """

    def __init__(
        self,
        name_or_path: str | Path,
        *,
        revision: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        max_length: int | None = None,
        truncation: str = "left-prompt",
        batch_tokens: int | None = None,
        max_batch: int = 256,
        template: str = "auto",
        batching: str = "alone",
        label_index: int = 0,
        trust_remote_code: bool = False,
        name: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if truncation not in TRUNCATION_POLICIES:
            raise RewardModelError(
                f"truncation must be one of {TRUNCATION_POLICIES}, got {truncation!r}")
        if template not in TEMPLATES:
            raise RewardModelError(f"template must be one of {TEMPLATES}, got {template!r}")
        if batching not in BATCHING:
            raise RewardModelError(f"batching must be one of {BATCHING}, got {batching!r}")
        if max_batch < 1:
            raise RewardModelError(f"max_batch must be >= 1, got {max_batch!r}")
        self.name_or_path = str(name_or_path)
        self.name = name or Path(self.name_or_path).name or self.name_or_path
        self.revision = revision
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.truncation = truncation
        self.batching = batching
        self.max_batch = max_batch
        self.label_index = label_index
        self.batch_tokens = batch_tokens or (65536 if self.device.startswith("cuda") else 8192)
        if self.batch_tokens < 1:
            raise RewardModelError(f"batch_tokens must be >= 1, got {batch_tokens!r}")

        kw: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
        quiet_loading()
        self.tokenizer = AutoTokenizer.from_pretrained(self.name_or_path, **kw)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            self.name_or_path, dtype=torch_dtype(self.dtype), **kw)
        self.model.to(self.device)
        self.model.eval()
        self._config_snapshot = copy.deepcopy(self.model.config.to_dict())
        num_labels = int(getattr(self.model.config, "num_labels", 1))
        if not 0 <= label_index < num_labels:
            raise RewardModelError(
                f"label_index={label_index} but the model has {num_labels} output(s); a reward "
                "model has one (num_labels=1) or pass the index of the reward logit")
        self._local_dir = self._resolve_local_dir()
        head_note = "whole model in float32"
        if self.dtype in ("bfloat16", "float16"):
            head_note = upcast_head(self.model, self._local_dir)
        cfg_pad = getattr(self.model.config, "pad_token_id", None)
        self._pad_id = cfg_pad if cfg_pad is not None else (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        self._one_at_a_time = False  # set when the model cannot read padded batches

        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if template == "chat" and not has_template:
            raise RewardModelError(
                f"{self.name}: template='chat' but the tokenizer has no chat template; use "
                "template='pair' (prompt and response as a text pair) or set one")
        self.template = ("chat" if (template == "chat" or (template == "auto" and has_template))
                         else "pair")
        self._add_specials = True
        bos = self.tokenizer.bos_token
        if self.template == "chat":
            probe = self._render(["p"], ["r"])[0]
            self._add_specials = not (bos is not None and probe.startswith(bos))
        self.max_length = self._resolve_max_length(max_length)
        self.info: dict[str, object] = {
            "device": self.device, "dtype": self.dtype, "head": head_note,
            "attn_implementation": getattr(self.model.config, "_attn_implementation", None),
            "template": self.template, "add_special_tokens": self._add_specials,
            "max_length": self.max_length, "truncation": self.truncation,
            "batch_tokens": self.batch_tokens, "batching": self.batching,
            "torch": torch.__version__,
        }
        self._fingerprint: str | None = None
        self._last_run: ScoreRun | None = None
        self.total_truncated = 0

    # -- identity ----------------------------------------------------------------------------
    def _resolve_local_dir(self) -> str | None:
        p = Path(self.name_or_path)
        if p.is_dir():
            return str(p)
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(self.name_or_path, "config.json", revision=self.revision)
        except Exception:  # noqa: BLE001 - cache lookup is best effort; identity falls back below
            return None
        return str(Path(hit).parent) if isinstance(hit, str) else None

    def _resolve_max_length(self, max_length: int | None) -> int:
        if max_length is not None:
            if not isinstance(max_length, int) or max_length < 8:
                raise RewardModelError(f"max_length must be an int >= 8, got {max_length!r}")
            return max_length
        limits = []
        tml = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tml, int) and 0 < tml < 10**7:  # HF uses ~1e30 for "no limit"
            limits.append(tml)
        mpe = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(mpe, int) and mpe > 0:
            limits.append(mpe)
        if not limits:
            raise RewardModelError(
                f"{self.name}: neither the tokenizer nor the config states a maximum length; "
                "pass max_length=")
        return min(limits)

    @property
    def fingerprint(self) -> str:
        """``rm:`` id of weights + tokenizer + template (file digests of a local directory, the
        commit of a hub snapshot) and of the scoring protocol (template mode, max length,
        truncation, dtype, device type, assay's protocol version)."""
        if self._fingerprint is None:
            if Path(self.name_or_path).is_dir():
                weights: dict[str, object] = {"files": dir_digest(self.name_or_path)}
            else:
                commit = Path(self._local_dir).name if self._local_dir else None
                weights = {"hub": self.name_or_path, "revision": self.revision, "commit": commit}
            protocol = {
                "template": self.template,
                "chat_template": getattr(self.tokenizer, "chat_template", None),
                "add_special_tokens": self._add_specials, "max_length": self.max_length,
                "truncation": self.truncation, "dtype": self.dtype,
                "device": self.device.split(":")[0], "label_index": self.label_index,
                "protocol": PROTOCOL_VERSION, "batching": self.batching,
                "scoring": SCORING_VERSION,
                # the reduction order of a CPU pass follows its thread count
                "cpu_threads": cpu_threads() if self.device == "cpu" else None,
            }
            self._fingerprint = combine("rm", "hf-sequence-classification", weights, protocol)
        return self._fingerprint

    @property
    def last_run(self) -> ScoreRun | None:
        return self._last_run

    def config_unchanged(self) -> bool:
        """True when the model config equals its state right after loading."""
        return self.model.config.to_dict() == self._config_snapshot

    def __repr__(self) -> str:
        return (f"HFRewardModel({self.name_or_path!r}, device={self.device!r}, "
                f"dtype={self.dtype!r}, template={self.template!r})")

    # -- encoding ----------------------------------------------------------------------------
    def _render(self, prompts: Sequence[Prompt], responses: Sequence[str]) -> list[str]:
        # a prompt is a user turn (str) or a whole conversation (a sequence of (role, content))
        return [  # str: tokenize=False renders the text
            cast(str, self.tokenizer.apply_chat_template(
                ([{"role": "user", "content": p}] if isinstance(p, str) else
                 [{"role": role, "content": c} for role, c in p])
                + [{"role": "assistant", "content": r}],
                tokenize=False))
            for p, r in zip(prompts, responses)
        ]

    def _tokenize(self, prompts: Sequence[Prompt], responses: Sequence[str]
                  ) -> tuple[list[list[int]], list[list[int]] | None]:
        if self.template == "chat":
            enc = self.tokenizer(self._render(prompts, responses),
                                 add_special_tokens=self._add_specials)
        else:
            enc = self.tokenizer(list(prompts), list(responses))
        ids = [list(x) for x in enc["input_ids"]]
        tts = enc.get("token_type_ids")
        return ids, ([list(x) for x in tts] if tts is not None else None)

    def encode(self, prompts: Sequence[Prompt], responses: Sequence[str]
               ) -> tuple[list[list[int]], list[list[int]] | None, list[int]]:
        """Token ids (and token type ids, for pair-encoding models) per item after the
        truncation policy, plus the indices of the items that were truncated."""
        ids, tts = self._tokenize(prompts, responses)
        bos = self.tokenizer.bos_token_id
        truncated: list[int] = []
        for i, seq in enumerate(ids):
            if (bos is not None and self.template == "chat" and len(seq) > 1
                    and seq[0] == bos == seq[1]):
                raise RewardModelError(
                    f"{self.name}: item {i} starts with two BOS tokens after rendering the chat "
                    "template; the template and the tokenizer both add one. Report this with the "
                    "model's template.")
            if len(seq) <= self.max_length:
                continue
            if self.truncation == "error":
                raise DataError(
                    f"item {i} is {len(seq)} tokens, over max_length={self.max_length} "
                    f"({self.name}); shorten it, raise max_length, or choose "
                    "truncation='left-prompt'")
            truncated.append(i)
            if self.truncation == "right":
                ids[i] = seq[: self.max_length]
                if tts is not None:
                    tts[i] = tts[i][: self.max_length]
            elif not isinstance(p := prompts[i], str):
                ids[i] = self._fit_conversation(i, p, responses[i])
            else:
                new_ids, new_tt = self._fit_left_prompt(i, p, responses[i], len(seq))
                ids[i] = new_ids
                if tts is not None and new_tt is not None:
                    tts[i] = new_tt
        return ids, tts, truncated

    def _fit_left_prompt(self, i: int, prompt: str, response: str, n_tokens: int
                         ) -> tuple[list[int], list[int] | None]:
        # Cut whole prompt tokens from the left at their character offsets, re-render, re-check:
        # merges at the new boundary can change the count by a token, so loop until it fits.
        tok = self.tokenizer
        if tok.is_fast:
            offsets = [o[0] for o in tok(prompt, add_special_tokens=False,
                                         return_offsets_mapping=True)["offset_mapping"]]
        else:  # slow tokenizers have no offsets: cut by decoded prefix lengths
            p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            offsets = [len(tok.decode(p_ids[:k])) for k in range(len(p_ids))]
        drop = n_tokens - self.max_length
        for _ in range(16):
            if drop >= len(offsets):
                raise DataError(
                    f"item {i}: the response alone does not fit max_length={self.max_length} "
                    f"even with the whole prompt removed ({self.name}); raise max_length or use "
                    "truncation='right' (cuts the response's end)")
            ids, tts = self._tokenize([prompt[offsets[drop]:]], [response])
            if len(ids[0]) <= self.max_length:
                return ids[0], (tts[0] if tts is not None else None)
            drop += len(ids[0]) - self.max_length
        raise DataError(f"item {i}: could not fit max_length={self.max_length} "
                        "by cutting the prompt")

    def _fit_conversation(self, i: int, conv: Sequence[tuple[str, str]],
                          response: str) -> list[int]:
        # Drop the oldest turns (a leading system message stays) until the rest fits; down to the
        # last turn alone, that turn is cut from its start like a single prompt.
        conv = list(conv)
        head = conv[:1] if conv[0][0] == "system" and len(conv) > 1 else []
        body = conv[len(head):]
        while len(body) > 1:
            body = body[1:]
            ids, _ = self._tokenize([tuple(head + body)], [response])
            if len(ids[0]) <= self.max_length:
                return ids[0]
        ids, _ = self._tokenize([body[0][1]], [response])
        return self._fit_left_prompt(i, body[0][1], response, len(ids[0]))[0]

    # -- forward -----------------------------------------------------------------------------
    def _forward(self, ids: list[list[int]], tts: list[list[int]] | None, idx: np.ndarray,
                 extra_padding: int = 0) -> np.ndarray:
        import torch

        if self._one_at_a_time:
            extra_padding = 0  # without a pad id the model reads the last position: no padding
        if self._one_at_a_time and len(idx) > 1:
            return np.concatenate([self._forward(ids, tts, idx[k:k + 1], extra_padding)
                                   for k in range(len(idx))])
        width = max(len(ids[i]) for i in idx) + extra_padding
        input_ids = torch.full((len(idx), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        types = torch.zeros((len(idx), width), dtype=torch.long) if tts is not None else None
        for row, i in enumerate(idx):
            n = len(ids[i])
            input_ids[row, :n] = torch.tensor(ids[i], dtype=torch.long)
            mask[row, :n] = 1
            if types is not None and tts is not None:  # types is set only when tts is
                types[row, :n] = torch.tensor(tts[i], dtype=torch.long)
        inputs = {"input_ids": input_ids.to(self.device), "attention_mask": mask.to(self.device)}
        if types is not None:
            inputs["token_type_ids"] = types.to(self.device)
        try:
            with fixed_threads(self.device.split(":")[0]), torch.inference_mode():
                logits = self.model(**inputs).logits
        except ValueError as exc:
            if len(idx) > 1 and "padding token" in str(exc):
                self._one_at_a_time = True
                return self._forward(ids, tts, idx, extra_padding)
            raise
        return logits[:, self.label_index].float().cpu().numpy().astype(np.float64)

    def _run(self, ids: list[list[int]], tts: list[list[int]] | None, *, max_batch: int,
             extra_padding: int = 0, padded: bool | None = None) -> tuple[np.ndarray, PlanRun]:
        # ``padded`` overrides ``self.batching`` (check_invariance probes padded batches)
        if not (self.batching == "padded" if padded is None else padded):
            max_batch = 1
        def empty_cache() -> None:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()

        lengths = np.array([len(s) + extra_padding for s in ids], dtype=np.int64)
        return run_plan(lengths, self.batch_tokens,
                        lambda idx: self._forward(ids, tts, idx, extra_padding),
                        max_batch=max_batch, on_oom=empty_cache)

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        """Reward per (prompt, response), float64; duplicate pairs are computed once.

        Example:
            >>> rm.score(["Q"], ["A"]).shape                      # doctest: +SKIP
            (1,)
        """
        prompts, responses = check_texts(prompts, responses)
        return self._score(prompts, responses)

    def score_conversations(self, conversations: Sequence[Sequence[Mapping[str, str]]],
                            responses: Sequence[str]) -> np.ndarray:
        """Reward per (conversation, response): every turn of the conversation, then the
        response as the assistant's turn, rendered by the chat template once (a multi-turn or
        system-prompted chat is scored as the model was trained to read it). Over-long inputs
        under ``truncation="left-prompt"`` lose their oldest turns first (a leading system
        message stays). Needs a chat template.

        Example:
            >>> rm.score_conversations(  # doctest: +SKIP
            ...     [[{"role": "system", "content": "Be brief."},
            ...       {"role": "user", "content": "2+2?"}]], ["4"])
            array([0.93...])
        """
        if self.template != "chat":
            raise RewardModelError(
                f"{self.name}: scores text pairs (no chat template), so it cannot read a "
                "multi-turn conversation; give it a chat template or score single turns")
        if isinstance(conversations, (str, bytes)) or len(conversations) != len(responses):
            raise DataError(f"score_conversations(): got {len(conversations)} conversations for "
                            f"{len(responses)} responses; pass one conversation per response")
        convs = []
        for i, conv in enumerate(conversations):
            if isinstance(conv, (str, bytes)) or not conv:
                raise DataError(f"score_conversations(): conversations[{i}] must be a non-empty "
                                "list of {'role', 'content'} messages")
            turns = []
            for j, m in enumerate(conv):
                if (not isinstance(m, Mapping) or not isinstance(m.get("role"), str)
                        or not isinstance(m.get("content"), str)):
                    raise DataError(f"score_conversations(): conversations[{i}][{j}] must be a "
                                    f"dict with string 'role' and 'content', got {m!r:.80}")
                turns.append((m["role"], m["content"]))
            convs.append(tuple(turns))
        _, responses = check_texts(["-"] * len(responses), responses)
        return self._score(convs, responses)

    def _score(self, prompts: Sequence[Prompt], responses: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        keys, inv = unique_index(list(zip(prompts, responses)))
        up = [k[0] for k in keys]
        ur = [k[1] for k in keys]
        ids, tts, trunc = self.encode(up, ur)
        out, plan = self._run(ids, tts, max_batch=self.max_batch) if keys else (np.zeros(0), None)
        scores = check_scores(out[inv] if len(keys) else out, len(prompts), self.name)
        trunc_set = set(trunc)
        truncated_items = tuple(i for i in range(len(prompts)) if int(inv[i]) in trunc_set)
        notes = []
        if self._one_at_a_time:
            notes.append("config has no pad_token_id: scored one item at a time")
        if trunc:
            notes.append(f"{len(trunc)} distinct inputs truncated ({self.truncation})")
        self._last_run = ScoreRun(
            n_items=len(prompts), n_scored=len(keys), n_tokens=int(sum(map(len, ids))),
            n_padded_tokens=plan.n_padded_tokens if plan else 0,
            n_batches=plan.n_batches if plan else 0, truncated=len(truncated_items),
            truncated_items=truncated_items, oom_backoffs=plan.oom_backoffs if plan else 0,
            seconds=time.perf_counter() - t0, device=self.device, dtype=self.dtype,
            notes=tuple(notes))
        self.total_truncated += len(truncated_items)
        return scores

    def check_invariance(self, prompts: Sequence[str] | None = None,
                         responses: Sequence[str] | None = None, *, atol: float | None = None,
                         extra_padding: int = 8) -> Invariance:
        """Score the same items alone (batch size 1), in the usual token-budget batches, and with
        ``extra_padding`` more pad tokens per batch; report the largest score changes.

        ``atol`` defaults to 1e-4 x (1 + largest |score|) in fp32 and 5e-2 x (1 + largest
        |score|) in bf16/fp16, where rounding alone moves scores by about that much.

        Example:
            >>> rm.check_invariance().passed                     # doctest: +SKIP
            True
        """
        if prompts is None or responses is None:
            prompts, responses = list(PROBE_PROMPTS), list(PROBE_RESPONSES)
        prompts, responses = check_texts(prompts, responses)
        ids, tts, _ = self.encode(prompts, responses)
        # padded batches whatever ``batching`` says: this probes the model's own padding handling
        batched, plan = self._run(ids, tts, max_batch=self.max_batch, padded=True)
        single, _ = self._run(ids, tts, max_batch=1)
        padded, _ = self._run(ids, tts, max_batch=self.max_batch, extra_padding=extra_padding,
                              padded=True)
        largest = 1 if self._one_at_a_time else plan.largest_batch
        scale = 1.0 + float(np.max(np.abs(batched))) if len(batched) else 1.0
        if atol is None:
            atol = (1e-4 if self.dtype == "float32" else 5e-2) * scale
        d_single = float(np.max(np.abs(single - batched))) if len(ids) else 0.0
        d_pad = float(np.max(np.abs(padded - batched))) if len(ids) else 0.0
        note = ""
        if largest < 2:
            note = "batches hold one item here: raise batch_tokens to test mixed batches"
        if self._one_at_a_time:
            note = "model cannot read padded batches (no pad_token_id): scored one at a time"
        return Invariance(len(ids), d_single, d_pad, float(atol), extra_padding, largest,
                                d_single <= atol and d_pad <= atol, note)
