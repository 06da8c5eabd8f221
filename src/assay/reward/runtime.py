"""Device and precision choices for the torch adapters: CUDA when present, bf16 there, fp32 on CPU.

torch is imported inside each function, so importing this module stays torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from assay.reward.base import RewardModelError

if TYPE_CHECKING:
    import torch

DTYPES = ("auto", "float32", "bfloat16", "float16")
# Names of the reward head on common sequence-classification models (LLaMA/Mistral/Qwen/Gemma:
# "score"; BERT/DeBERTa/RoBERTa: "classifier"; TRL value heads: "v_head").
HEAD_NAMES = ("score", "classifier", "v_head", "reward_head", "head")


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` when torch sees a GPU, else ``"cpu"``; other values pass through
    after a check that they exist.

    Example:
        >>> resolve_device("cpu")
        'cpu'
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str) or not device:
        raise RewardModelError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RewardModelError(
            f"device={device!r} but torch sees no CUDA device; use device='auto' or 'cpu'"
        )
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """The dtype name to load weights in: ``"auto"`` is bf16 on a CUDA device that supports it
    (fp32 otherwise, since fp16 overflows in many reward models) and fp32 on CPU.

    Example:
        >>> resolve_dtype("auto", "cpu")
        'float32'
    """
    if dtype not in DTYPES:
        raise RewardModelError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "float32"


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def find_head(model: object) -> tuple[str, torch.nn.Module] | None:
    """``(name, module)`` of the model's reward head, or None when no known name matches."""
    for name in HEAD_NAMES:
        mod = getattr(model, name, None)
        if mod is not None and hasattr(mod, "parameters"):
            return name, mod
    return None


def upcast_head(model: object, checkpoint_dir: str | None) -> str:
    """Put the reward head in fp32 with the checkpoint's own fp32 values when available.

    Loading a model in bf16 rounds every weight; the head is tiny and its rounding moves every
    score, so its weights are re-read from the safetensors checkpoint at full precision (when
    the checkpoint stores them in fp32) and a forward pre-hook casts the head's input to fp32.
    Returns a note saying which of these happened.
    """
    import torch

    found = find_head(model)
    if found is None:
        return (
            "no known reward head (tried "
            + ", ".join(HEAD_NAMES)
            + "): whole model in low precision"
        )
    name, head = found
    head.to(torch.float32)

    def _to_fp32(_module: torch.nn.Module, args: tuple[object, ...]) -> tuple[object, ...]:
        return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)

    head.register_forward_pre_hook(_to_fp32)
    source = "upcast from the low-precision load"
    if checkpoint_dir is not None:
        restored = _reload_head_params(head, name, Path(checkpoint_dir))
        if restored:
            source = f"re-read from the checkpoint ({restored} tensors)"
    return f"head {name!r} in float32, {source}"


def _reload_head_params(head: torch.nn.Module, prefix: str, ckpt: Path) -> int:
    import torch

    try:
        from safetensors import safe_open
    except ImportError:  # pragma: no cover - safetensors ships with transformers
        return 0
    files = sorted(ckpt.glob("*.safetensors"))
    wanted = {f"{prefix}.{k}": p for k, p in head.named_parameters()}
    restored = 0
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            keys = set(st.keys())
            for key, param in wanted.items():
                if key in keys:
                    t = st.get_tensor(key)
                    if t.dtype == torch.float32 and t.shape == param.shape:
                        with torch.no_grad():
                            param.copy_(t.to(param.device))
                        restored += 1
    return restored


def quiet_loading() -> None:
    """Turn off transformers' per-load progress bars ("Loading weights ..."): a study run
    prints its own progress lines, and a bar per model load is noise in logs and reports."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
