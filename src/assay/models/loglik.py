"""Log-likelihoods of continuations given contexts, and of whole documents, from any backend
that can score text; each answer cached in the store's journal like a completion.

A scorer (registered per backend kind in :data:`SCORERS`) answers ``score(pairs)`` with one
:class:`Loglik` per ``(context, continuation)`` and ``score_rolling(texts)`` with one per
document. :func:`loglikelihoods` and :func:`rolling_loglikelihoods` put a journal in front: the
key of one answer is ``(scorer identity, context, continuation)`` (the identity holds the model
files' checksum, so a new checkpoint under the same path recomputes), and every answer is
committed as its batch finishes, so a killed run's rerun scores only what is missing.

Example:
    >>> class Uniform:  # a toy scorer: every character costs log(1/2)
    ...     def identity(self): return {"scorer": "uniform"}
    ...     def score(self, pairs):
    ...         return [Loglik(-0.6931 * len(c), True, len(c)) for _, c in pairs]
    >>> [round(x.logprob, 2) for x in loglikelihoods([("Q:", " yes"), ("Q:", " no")], Uniform())]
    [-2.77, -2.08]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from assay.hashing import content_hash
from assay.models.scorers import SCORERS, Loglik, RollingScorer, Scorer, no_rolling  # noqa: F401

if TYPE_CHECKING:
    from assay.store import Store

T = TypeVar("T")

_SHARED: dict[bytes, Scorer] = {}


def rolling_problem(kind: str) -> str | None:
    """Why a backend ``kind`` cannot score documents for ``perplexity:``, or None when it can.

    Example:
        >>> rolling_problem("hf") is None, rolling_problem("openai").startswith("a document's")
        (True, True)
        >>> rolling_problem("function")
        "kind 'function' has no log-likelihood scorer (scorers: ['hf', 'openai'])"
    """
    from assay.models import hf_loglik as _hf  # noqa: F401  (registers "hf")
    from assay.models import openai_loglik as _oa  # noqa: F401  (registers "openai")

    if kind not in SCORERS:
        return f"kind {kind!r} has no log-likelihood scorer (scorers: {SCORERS.names()})"
    return no_rolling(kind)


def shared_scorer(model: object) -> Scorer:
    """The scorer of a ``model:`` spec entry (dict or spec model), built once per process; an
    object that already has ``score`` and ``identity`` is returned as it is."""
    if hasattr(model, "score") and hasattr(model, "identity"):
        return cast(Scorer, model)  # a scorer already (the check above)
    from assay.errors import SpecError
    from assay.hashing import canonical_json
    from assay.models import hf_loglik as _hf  # noqa: F401  (registers "hf")
    from assay.models import openai_loglik as _oa  # noqa: F401  (registers "openai")
    from assay.models.specs import backend_spec

    spec: Any = backend_spec(model)
    if spec.kind not in SCORERS:
        raise SpecError(f"model.kind {spec.kind!r} cannot score log-likelihoods; use one of "
                        f"{SCORERS.names()}")
    key = canonical_json(spec.model_dump(mode="json"))
    if key not in _SHARED:
        _SHARED[key] = SCORERS.get(spec.kind).obj(spec)
    return _SHARED[key]


def _cached(items: Sequence[T], keyed: Callable[[T], object],
            run: Callable[[list[T]], Iterable[tuple[list[int], list[Loglik]]]],
            scorer: Scorer, store: Store | None, kind: str, on_done: Callable[[int], None] | None
            ) -> list[Loglik]:
    """Answers for ``items``: from the journal where committed, else from ``run`` (which
    yields ``(index list, answers)`` per batch), committed as each batch finishes."""
    ident = scorer.identity()
    keys = [content_hash({"scorer": ident, "kind": kind, "item": keyed(x)}, "ll") for x in items]
    out: list[Loglik | None] = [None] * len(items)
    journal = None
    if store is not None:
        from assay.models.journal import Journal

        journal = Journal(store, content_hash({"scorer": ident, "kind": kind}, "llshard"))
        done = journal.load()
        for i, k in enumerate(keys):
            rec = done.get(k)
            if rec is not None:
                out[i] = Loglik(rec["logprob"], rec["is_greedy"], rec["tokens"])
    # one request per distinct item: repeated (context, continuation) pairs are scored once
    todo: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        if out[i] is None:
            todo.setdefault(k, []).append(i)
    if on_done is not None and len(items) - sum(map(len, todo.values())):
        on_done(len(items) - sum(map(len, todo.values())))
    firsts = [v[0] for v in todo.values()]
    try:
        for idx, answers in run([items[i] for i in firsts]):
            for j, a in zip(idx, answers):
                k = keys[firsts[j]]
                for i in todo[k]:
                    out[i] = a
                if journal is not None:
                    journal.append({"key": k, **a.to_dict()})
            if on_done is not None:
                on_done(sum(len(todo[keys[firsts[j]]]) for j in idx))
    finally:
        if journal is not None:
            journal.close()
    answered = [o for o in out if o is not None]
    assert len(answered) == len(out)  # every pair was answered (from the journal or just now)
    return answered


def loglikelihoods(pairs: Sequence[tuple[str, str]], model: object, *, store: Store | None = None,
                   on_done: Callable[[int], None] | None = None) -> list[Loglik]:
    """``log P(continuation | context)`` per pair, in order (see the module docstring).

    ``model``: a ``model:`` spec entry or a scorer; ``store``: where answers are journalled
    (None: not cached); ``on_done(n)``: told as answers arrive (progress)."""
    scorer = shared_scorer(model)
    if hasattr(scorer, "score_batches"):
        run = scorer.score_batches
    else:
        def run(xs: list[tuple[str, str]]) -> Iterator[tuple[list[int], list[Loglik]]]:
            yield list(range(len(xs))), scorer.score(xs)
    return _cached(list(pairs), lambda p: [p[0], p[1]], run, scorer, store, "pair", on_done)


def rolling_loglikelihoods(texts: Sequence[str], model: object, *, store: Store | None = None,
                           on_done: Callable[[int], None] | None = None) -> list[Loglik]:
    """The log-probability of each whole document, scored in disjoint windows of the model's
    context that each keep as much preceding text as fits (lm-eval's ``loglikelihood_rolling``)."""
    scorer = shared_scorer(model)
    if not hasattr(scorer, "score_rolling_batches"):
        from assay.errors import GenerationError

        kind = getattr(getattr(scorer, "spec", None), "kind", type(scorer).__name__)
        raise GenerationError(f"perplexity: model {kind!r} cannot score whole documents: "
                              f"{rolling_problem(kind) or 'its scorer has no rolling windows'}")

    rolling = cast(RollingScorer, scorer)  # it has score_rolling_batches (the check above)

    def run(xs: list[str]) -> Iterator[tuple[list[int], list[Loglik]]]:
        yield from rolling.score_rolling_batches(xs)
    return _cached(list(texts), lambda t: t, run, scorer, store, "rolling", on_done)


def normalized(logprob: float, text: str, by: str) -> float:
    """A log-likelihood divided by the continuation's length in characters or UTF-8 bytes
    (lm-eval's ``acc_norm`` and ``acc_bytes`` divide by the choice text without the delimiter).

    Example:
        >>> normalized(-6.0, "été", "chars"), normalized(-6.0, "été", "bytes")
        (-2.0, -1.2)
    """
    n = len(text) if by == "chars" else len(text.encode("utf-8"))
    return logprob / n if n else -math.inf if logprob < 0 else 0.0
