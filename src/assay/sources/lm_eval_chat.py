"""lm-eval's chat options for ``kind: lm_eval`` (apply_chat_template, system_instruction,
fewshot_as_multiturn): the ``chat_template`` callable lm-eval's own request builder renders with.

lm-eval builds every chat context itself (``Task.fewshot_context``); what the model decides is
only the callable that turns its message list into the request: for ``kind: hf`` the tokenizer's
template rendered exactly as lm-eval's ``HFLM.apply_chat_template`` does (the text is the prompt,
sent with ``api: completions``), for a chat server (``api: chat``) the message list itself, sent
as the request's messages, as lm-eval's chat-completions models send it.

Example:
    >>> render = messages_template()
    >>> render([{"role": "user", "content": "2+2?"}], add_generation_prompt=True)
    [{'role': 'user', 'content': '2+2?'}]
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from assay.errors import SpecError

if TYPE_CHECKING:
    from lm_eval.api.task import Task  # no type information of its own (no py.typed)

    from assay.models.specs import HFSpec

#: tokenizer files that decide a rendered chat template (its text and the special tokens in it)
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "added_tokens.json")


def messages_template() -> Callable[..., list[dict[str, str]]]:
    """For a chat API: the context stays lm-eval's message list (``role``/``content`` only), as
    lm-eval's chat-completions models send it (a trailing assistant turn, a task's
    ``gen_prefix``, goes as is)."""

    def render(chat_history: list[dict[str, str]], add_generation_prompt: bool = True
               ) -> list[dict[str, str]]:
        del add_generation_prompt  # the server applies its own template
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in chat_history]

    return render


def hf_tokenizer_dir(model: HFSpec) -> Path:
    """The local folder of a ``kind: hf`` model (resolved as the hf backend resolves it)."""
    from assay.models.hf import _resolve

    return _resolve(model)


def hf_template(model: HFSpec, where: str) -> Callable[..., str]:
    """For ``kind: hf``: the tokenizer's chat template rendered to text as lm-eval's
    ``HFLM.apply_chat_template`` renders it (``continue_final_message`` when a task's
    ``gen_prefix`` leaves the assistant turn open; a template that refuses the system role is
    tried again without it)."""
    import jinja2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_tokenizer_dir(model),
                                        trust_remote_code=model.trust_remote_code)
    if not getattr(tok, "chat_template", None):
        raise SpecError(f"{where}: apply_chat_template: the tokenizer of model.path "
                        f"{model.path!r} has no chat template; drop apply_chat_template")

    def text(history: list[dict[str, str]], gen: bool) -> str:
        return str(tok.apply_chat_template(history, tokenize=False, add_generation_prompt=gen,
                                           continue_final_message=not gen))

    def render(chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        try:
            return text(chat_history, add_generation_prompt)
        except jinja2.exceptions.TemplateError:
            # HFLM's own fallback: a template without a system role renders the rest
            rest = [m for m in chat_history if m["role"] != "system"]
            return text(rest, add_generation_prompt)

    return render


def chat_template_for(model: object, api: str | None, where: str) -> Callable[..., object]:
    """The callable for lm-eval's ``build_all_requests(chat_template=...)``: ``kind: hf`` with
    ``api: completions`` (or a scoring model: ``api`` None) renders with its tokenizer; any
    backend with ``api: chat`` gets the messages; anything else is a :class:`SpecError`."""
    from assay.models.specs import renders_chat_template

    local = renders_chat_template(model)
    kind = getattr(model, "kind", None)
    if api == "chat":
        if local:
            raise SpecError(f"{where}: apply_chat_template with kind: hf renders the tokenizer's "
                            "template as lm-eval's HFLM does; write generate: {api: "
                            "completions, ...}")
        return messages_template()
    if local:  # the only backend declaring it is hf's (backend_spec validated the entry)
        return hf_template(cast("HFSpec", model), where)
    raise SpecError(f"{where}: apply_chat_template needs a model whose chat template assay "
                    f"applies as lm-eval does: kind: hf (its tokenizer's template, api: "
                    f"completions) or a chat server with generate: {{api: chat}}; got kind "
                    f"{kind!r}" + (f" with api: {api}" if api else ""))


def template_identity(model: object, api: str | None) -> dict[str, str]:
    """What the rendered contexts depend on besides the task: the messages (``api: chat``) or
    the checksums of an hf model's tokenizer files (a new template re-renders the rows)."""
    from assay.models.specs import renders_chat_template

    if api == "chat" or not renders_chat_template(model):
        return {"render": "messages"}
    from assay.hashing import file_checksum

    folder = hf_tokenizer_dir(cast("HFSpec", model))  # kind hf: an HFSpec (backend_spec)
    sums = {n: file_checksum(folder / n) for n in TOKENIZER_FILES if (folder / n).is_file()}
    digest = hashlib.sha256(repr(sorted(sums.items())).encode()).hexdigest()
    return {"render": "tokenizer", "tokenizer_files": digest}


def is_messages(context: object) -> bool:
    """A chat context: a non-empty list of ``{role, content}`` string messages."""
    return (isinstance(context, list) and bool(context)
            and all(isinstance(m, dict) and set(m) == {"role", "content"}
                    and isinstance(m["role"], str) and isinstance(m["content"], str)
                    for m in context))


def request_delimiter(task: Task, chat: bool) -> str:
    """The delimiter lm-eval puts before each choice of a multiple_choice request: the task's
    ``target_delimiter``, but none under a chat template unless a ``gen_prefix`` not ending in
    whitespace precedes the answer (``ConfigurableTask.construct_requests``)."""
    from lm_eval.api.utils import ends_with_whitespace

    delim = str(task.config.target_delimiter)
    if not chat:
        return delim
    prefix = task.config.gen_prefix
    return delim if prefix and not ends_with_whitespace(prefix) else ""
