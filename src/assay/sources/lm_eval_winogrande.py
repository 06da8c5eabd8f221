"""A multiple-input lm-eval task (winogrande: each choice fills the blank in its own context, the
rest of the sentence is the shared continuation) as prompt rows for the score-choices stage.

Each row keeps lm-eval's contexts, one per choice (``privileged.contexts``), and the shared
continuation with its delimiter (``privileged.continuation``); the stage scores
``(context_i, continuation)``. ``choices`` are the task's ``doc_to_choice`` texts, as lm-eval
normalizes by them (acc_norm by their length), and the gold index is ``doc_to_text``'s, as in
lm-eval's ``process_results`` for multiple inputs. The row's ``prompt`` is what the contexts
share (the few-shot examples and the sentence up to the choice), cut at a whitespace.

Example:
    >>> shared_prefix(["A: x\\nThe cat sat", "A: x\\nThe dog sat"])
    'A: x\\nThe '
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from assay.errors import SpecError

if TYPE_CHECKING:
    from lm_eval.api.task import Task  # no type information of its own (no py.typed)

    from assay.rows import Rows
    from assay.sources.lm_eval_index import Docs


def shared_prefix(contexts: list[str]) -> str:
    """The text every context starts with, up to and including its last whitespace (so a
    choice's first letters shared by another, "Sarah"/"Sam", are not shown as the prompt's)."""
    p = os.path.commonprefix(contexts)
    if all(len(c) == len(p) for c in contexts):
        return p
    cut = max(p.rfind(ch) for ch in (" ", "\n", "\t"))
    return p[:cut + 1]


def multi_input_rows_of(task: Task, docs: Docs, where: str) -> Rows:
    """One prompt row per document of a multiple-input ``multiple_choice`` task (module
    docstring); requests that are not one context per choice with one shared continuation
    (``acc_mutual_info``'s extra requests) are refused naming the document."""
    from assay.sources.lm_eval_index import doc_meta, task_code
    from assay.sources.lm_eval_loglik import prompt_rows

    delim = task.config.target_delimiter
    prompts, privileged, tids, metas = [], [], [], []
    for doc_id, doc, insts in docs:
        at = f"{where} document {doc_id}"
        args = [i.arguments for i in insts]
        with task_code(at, "read the document's choices, continuation and answer"):
            choices = [str(c) for c in task.doc_to_choice(doc)]
            cont = task.doc_to_target(doc)
            gold = task.doc_to_text(doc)  # lm-eval's gold index for multiple inputs
        if len(args) != len(choices) or {a[1] for a in args} != {f"{delim}{cont}"}:
            raise SpecError(f"{at}: the requests are not one context per choice with the "
                            "shared continuation (acc_mutual_info adds unconditional requests); "
                            "not supported")
        if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
            raise SpecError(f"{at}: the gold answer {gold!r:.60} is not one index of the "
                            f"{len(choices)} choices")
        contexts = [a[0] for a in args]
        prompts.append(shared_prefix(contexts))
        privileged.append({"reference": choices[gold], "choices": choices, "gold": gold,
                           "delimiter": "", "contexts": contexts, "continuation": args[0][1]})
        tids.append(str(doc_id))
        metas.append(doc_meta(doc))
    return prompt_rows(prompts, privileged, tids, metas, where)
