"""An lm-eval ``loglikelihood`` task (lambada_openai) as prompt rows for the score-choices stage:
one row per document, lm-eval's context and its one continuation as the row's only "choice".

Why score-choices: a loglikelihood request is a multiple-choice request with one choice; the
stage already scores ``(context, continuation)`` pairs bit-exactly, journalled and resumable.
What differs is the verdict: lm-eval's ``acc`` is whether the continuation is the greedy one
(``is_greedy``), and ``perplexity`` is ``exp(-mean log-likelihood)`` over the documents; the
rows say so in ``privileged.loglikelihood`` (the metrics the task reports, in its order), so the
stage grades by ``is_greedy`` and the measure stage aggregates as lm-eval does
(:mod:`assay.measure.lm_eval_loglik`). Each document's ``process_results`` (lm-eval's own, or the
task's) is run on probe values first and must give lm-eval's ``{perplexity: ll, acc: greedy}``.

Example:
    >>> loglik_results({"perplexity": -1.5, "acc": 1}, {"perplexity": -2.5, "acc": 0})
    ['perplexity', 'acc']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from assay.errors import SpecError

if TYPE_CHECKING:
    from lm_eval.api.task import Task  # no type information of its own (no py.typed)

    from assay.rows import Rows
    from assay.sources.lm_eval_index import Docs

#: the probes ``process_results`` is run on: (log-likelihood, is_greedy) twice, both differing
PROBES = ((-1.5, True), (-2.5, False))


def loglik_results(first: Mapping[str, object], second: Mapping[str, object]) -> list[str] | str:
    """The metrics a loglikelihood task's ``process_results`` reports (its order) when its
    results on :data:`PROBES` are lm-eval's (``perplexity`` the log-likelihood, ``acc`` the
    greedy flag as 0/1); else why not (then its numbers are not what assay computes).

    Example:
        >>> loglik_results({"ppl": 1.0}, {"ppl": 2.0})
        "its process_results returns 'ppl', which assay does not compute (perplexity, acc)"
    """
    if set(first) != set(second):
        return "its process_results returns different metrics for different results"
    if not first:
        return "its process_results returns no metric"
    for name in first:
        if name not in ("perplexity", "acc"):
            return (f"its process_results returns {name!r}, which assay does not compute "
                    "(perplexity, acc)")
        for (ll, greedy), got in zip(PROBES, (first, second)):
            want = ll if name == "perplexity" else int(greedy)
            v = got[name]
            if isinstance(v, bool) or not isinstance(v, int | float) or v != want:
                return (f"its process_results returns {name!r} as {v!r:.40} for "
                        f"(log-likelihood {ll}, greedy {greedy}), not lm-eval's {want!r}")
    return list(first)


def prompt_rows(prompts: list[str], privileged: Sequence[Mapping[str, object]], tids: list[str],
                metas: Sequence[object], where: str) -> Rows:
    """Prompt rows whose ``privileged`` column is exactly ``privileged`` (JSON per row)."""
    import pyarrow as pa

    from assay.builder import rows
    from assay.rows import Rows, to_json

    built = rows(prompts, [""] * len(prompts), None,
                 references=[p["reference"] for p in privileged], task_ids=tids, meta=metas,
                 record_names=lambda i: f"document {tids[i]}")
    t = built.to_arrow()
    col = pa.array([to_json(p, f"{where} document {tids[i]}") for i, p in enumerate(privileged)],
                   pa.string())
    return Rows(t.set_column(t.schema.get_field_index("privileged"), "privileged", col))


def loglik_rows_of(task: Task, docs: Docs, where: str) -> Rows:
    """One prompt row per document: lm-eval's context, its continuation as the one choice
    (delimiter empty: lm-eval's continuation is scored as it is), and the metrics its
    ``process_results`` reports (``privileged.loglikelihood``)."""
    from assay.sources.lm_eval_index import doc_meta, task_code

    prompts, privileged, tids, metas = [], [], [], []
    for doc_id, doc, insts in docs:
        at = f"{where} document {doc_id}"
        if len(insts) != 1:
            raise SpecError(f"{at}: lm-eval made {len(insts)} requests for it; a loglikelihood "
                            "task has one")
        args = insts[0].arguments
        if len(args) != 2 or not all(isinstance(a, str) for a in args) or not args[1]:
            raise SpecError(f"{at}: lm-eval's request is {args!r:.60}, not a (context, "
                            "non-empty continuation) pair of texts")
        with task_code(at, "run the task's process_results"):
            probed = [task.process_results(doc, [p]) for p in PROBES]
        metrics = loglik_results(*probed)
        if isinstance(metrics, str):
            raise SpecError(f"{at}: {metrics}; refused")
        ctx, cont = args
        prompts.append(ctx)
        privileged.append({"reference": cont, "choices": [cont], "gold": 0, "delimiter": "",
                           "loglikelihood": metrics})
        tids.append(str(doc_id))
        metas.append(doc_meta(doc))
    return prompt_rows(prompts, privileged, tids, metas, where)
