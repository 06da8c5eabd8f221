"""A ``generate_until`` lm-eval task as prompt rows for assay's generate stage: lm-eval's
contexts, and its ``generation_kwargs`` as the sampling parameters the source must declare.

Why declared and checked rather than filled in: the generate stage keys each completion on the
spec's ``generate.params``, which exist before any task loads; the task's kwargs (read through
lm-eval's own ``normalize_gen_kwargs``) must equal them, else the source is refused with the
exact ``params:`` to write, so no completion is ever cached under settings it was not made with.

Example:
    >>> sampling_of({"until": ["Question:"], "do_sample": False, "temperature": 0.0}, "t")
    {'temperature': 0.0, 'top_p': 1.0, 'max_tokens': 256, 'stop': ['Question:']}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from assay.errors import SpecError

if TYPE_CHECKING:
    from lm_eval.api.task import Task  # no type information of its own (no py.typed)

    from assay.models.specs import GenerateSpec
    from assay.rows import Rows
    from assay.sources.lm_eval_index import Docs

#: HFLM's default ``max_gen_toks`` (lm-eval 0.4), used when a task sets none
DEFAULT_MAX_GEN_TOKS = 256


def sampling_of(gen_kwargs: object, where: str) -> dict[str, object]:
    """The ``generate.params`` that give lm-eval's decoding for a task's ``generation_kwargs``:
    ``until`` -> ``stop``, ``max_gen_toks`` (or its aliases) -> ``max_tokens``, greedy
    (``do_sample: false`` or temperature 0) -> ``temperature: 0``; a kwarg assay's backends
    do not take (``top_k``, ``num_beams``...) is a :class:`SpecError`."""
    from lm_eval.models.utils import normalize_gen_kwargs

    if gen_kwargs is None:
        gen_kwargs = {}
    if not isinstance(gen_kwargs, dict):
        raise SpecError(f"{where}: its generation_kwargs are {gen_kwargs!r:.60}, not a mapping")
    try:
        kw = dict(normalize_gen_kwargs(dict(gen_kwargs), DEFAULT_MAX_GEN_TOKS))
    except Exception as e:  # noqa: BLE001 (lm-eval's own validation of the task's kwargs)
        raise SpecError(f"{where}: lm-eval refuses its generation_kwargs: {e}") from None
    until = kw.pop("until", [])
    until = [until] if isinstance(until, str) else list(until or [])
    # HFLM stops at the tokenizer's eos as well; assay's backends always do
    stop = [u for u in until if u]
    do_sample = bool(kw.pop("do_sample", False))
    temperature = float(kw.pop("temperature", 0.0) or 0.0)
    top_p = float(kw.pop("top_p", 1.0) if do_sample else 1.0)
    max_tokens = int(kw.pop("max_gen_toks"))
    left = sorted(k for k in kw if k != "top_p")
    if left:
        raise SpecError(f"{where}: its generation_kwargs set {left}, which assay's generate "
                        "stage does not pass (it samples with temperature, top_p, max_tokens "
                        "and stop); refused")
    return {"temperature": temperature if do_sample else 0.0, "top_p": top_p,
            "max_tokens": max_tokens, "stop": stop}


def check_declared(gspec: GenerateSpec, want: Mapping[str, object], where: str, *,
                   chat: bool = False) -> None:
    """Refuse a ``generate:`` entry whose API or params are not the task's (``want``, from
    :func:`sampling_of`): lm-eval sends the context as one text (``api: completions``), or
    under ``chat`` (apply_chat_template) to a chat server as messages (``api: chat``; kind: hf
    renders its template into the text), decoded as the task says; ``system:`` is never set
    (the context, system instruction included, is lm-eval's)."""
    from assay.models.specs import renders_chat_template

    api = "chat" if chat and not renders_chat_template(gspec.model) else "completions"
    got = gspec.params.model_dump(mode="json")
    diff = {k: got[k] for k in want if got[k] != want[k]}
    extra = {k: got[k] for k in ("presence_penalty", "frequency_penalty", "extra")
             if got[k] not in (0.0, {})}
    if gspec.system is not None:
        extra["system"] = gspec.system
    if gspec.api != api or diff or extra or gspec.k != 1:
        import json

        raise SpecError(
            f"{where}: generate: must decode as the task's generation_kwargs do; write "
            f"generate: {{api: {api}, k: 1, params: {json.dumps(want)}}} (got api "
            f"{gspec.api!r}, k {gspec.k}"
            + (f", {json.dumps(diff)}" if diff else "")
            + (f", {json.dumps(extra)}" if extra else "")
            + "); change the task's decoding with gen_kwargs:, its system prompt with "
            "system_instruction:")


def sampled_warnings(gspec: GenerateSpec) -> list[str]:
    """``assay validate``'s warning for a task that samples (``do_sample: true``): the
    completions are draws of assay's, not HFLM's, so its per-document results never match
    ``simple_evaluate``'s (docs/lm-eval.md, generative tasks, says why). Greedy: none.

    Why a warning and not parity: HFLM draws from torch's one global stream (seeded once by
    simple_evaluate) in the order and batches of its Collator, through ``model.generate``'s
    sampler, so a document's draw depends on every request before it; assay's hf backend draws
    each completion from its own seeded generator so that a completion is cached and resumed
    by itself. The two cannot give the same tokens without giving that up.

    Example:
        >>> from types import SimpleNamespace as N
        >>> sampled_warnings(N(params=N(temperature=0.0)))
        []
    """
    t = gspec.params.temperature
    if not t:
        return []
    return [f"generate.params.temperature: {t}: the task samples (do_sample); assay draws each "
            "completion from its own seeded generator over the temperature / top_p "
            "distribution, HFLM from torch's one global stream in its own order and batches "
            "through transformers' generate (which also cuts to the top 50 tokens and applies "
            "the model's generation_config, unless that config says otherwise), so "
            "per-document results differ from lm-eval's and the means agree at best as samples "
            "do (docs/lm-eval.md, generative tasks)"]


def generate_rows_of(task: Task, docs: Docs, where: str, *,
                     chat: bool = False) -> Rows:
    """One prompt row per document: lm-eval's context (few-shot examples as its sampler drew
    them; under ``chat`` a message list is the row's messages), its target as the reference,
    and the document id the lm_eval verifier grades by."""
    from assay.builder import rows
    from assay.sources.lm_eval_chat import is_messages
    from assay.sources.lm_eval_index import doc_meta, task_code

    prompts, refs, tids, metas = [], [], [], []
    for doc_id, doc, insts in docs:
        at = f"{where} document {doc_id}"
        if len(insts) != 1:
            raise SpecError(f"{at}: lm-eval made {len(insts)} requests for it (repeats); "
                            "assay grades one completion per document")
        context = insts[0].arguments[0]
        # a chat server's context is lm-eval's message list (assay.sources.lm_eval_chat)
        if not isinstance(context, str) and not (chat and is_messages(context)):
            raise SpecError(f"{at}: lm-eval's context is {type(context).__name__} (a chat "
                            "or multimodal request); not supported")
        with task_code(at, "read the document's target"):
            target = task.doc_to_target(doc)
        prompts.append(context)
        refs.append(target if isinstance(target, str) else str(target))
        tids.append(str(doc_id))
        metas.append(doc_meta(doc))
    return rows(prompts, [""] * len(prompts), None, references=refs, task_ids=tids, meta=metas,
                record_names=lambda i: f"document {tids[i]}")
