"""The judging contract: what a verifier is, and how any verdict becomes (reward, status, reason).

Shared by ``assay.rows(reward=...)`` and ``assay.grade``; nothing here runs in parallel.

A *verifier* is any object with ``check(candidate, reference, row)``; assay's own verifiers all
return a :class:`Verdict` ``(reward, reason, meta)``. A user's verifier or judge may also return a
score in [0, 1], a ``(score, reason)`` tuple, ``None`` (cannot judge) or a dict
``{"reward", "reason", "markers", "meta"}``; a judge may also be a plain callable, called by
its parameter names (``prompt``, ``completion``, ``reference``, ``row``, ``meta``, any order,
:mod:`assay.binding`) or, when none of its parameters has one of those names, positionally as
``(prompt, completion)``, ``(prompt, completion, reference)``, or ``(row)``. A callable
gets the reference whenever it can take it (a third positional parameter, with or without a
default; a ``reference`` keyword; ``**kwargs``); rows with references and a callable that cannot
take them are refused (:func:`check_references_used`).

Whatever the judge returns is normalized by :func:`normalize_verdict`. NaN, a number outside
[0, 1], a string, or an exception never pass: the reward stays ``None`` and ``judge_status``
says why (``invalid_result``, ``error``), with the text in ``reason``.

Example:
    >>> j = as_judge(lambda prompt, completion, reference: completion == reference)
    >>> j.judge({"prompt": "2+3?", "final_text": "5", "privileged": {"reference": "5"}}).reward
    1.0
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, ClassVar

from assay.errors import RowsTypeError

if TYPE_CHECKING:
    from assay.binding import Binding


#: Every value ``judge_status`` can take, with its meaning.
JUDGE_STATUSES: dict[str, str] = {
    "ok": "the judge returned a valid score",
    "given": "the score was supplied as a number, not computed",
    "unjudged": "no judge ran on this row (reward is None)",
    "no_verdict": "the judge returned None: it cannot judge this row",
    "no_reference": "the judge needs a reference and the row has none",
    "invalid_result": "the judge returned something that is not a score in [0, 1]",
    "error": "the judge raised; reason holds the exception",
    "timeout": "the judge ran past its time limit",
    "gen_error": "the model under test gave no completion (the request failed; reason says why); "
                 "never graded, and a rerun asks again",
}


class Verifier:
    """Base class for verifiers. Subclasses implement :meth:`check`.

    Attributes:
        name: recorded as each graded row's ``judge_name``.
        needs_reference: rows without ``privileged.reference`` get status ``no_reference``.
        parallel: hint for :func:`assay.grade`: worth running in worker processes (CPU-bound or
            needs a working timeout).

    What a kind says about its spec entry (read by :class:`assay.verify.spec.VerifierSpec`, so
    the spec asks the kind instead of testing its name):
        takes_function: the entry names the user's grading code in ``function:`` (and may set
            ``version:``); other kinds refuse both fields.
        open_markers: which markers its rows carry is known only when it runs (user code), so
            a nightly gate naming an unseen marker is not judged a typo.
        model_param: the ``params`` key holding the model that grades (a judge), if any.
        under_test_params: ``params`` keys that say which model grades rather than what the
            study is: outside the study definition's checksum, inside the results'.
        label_for(vspec): classmethod, how the report names a verifier of this kind (default:
            the kind).

    Optional hooks :func:`assay.grade` uses when present:
        hard_timeout: seconds one row may take in a worker process before the worker is killed
            and the row gets ``timeout`` (default 60).
        grade_batch(rows, workers=None): verdicts for many dict rows at once, each in any form
            ``check`` may return; for verifiers that manage their own parallelism (CodeExec's
            sandbox pool, combinators).
    """

    name: str = "verifier"
    needs_reference: bool = True
    parallel: bool = False
    takes_function: ClassVar[bool] = False
    open_markers: ClassVar[bool] = False
    model_param: ClassVar[str | None] = None
    under_test_params: ClassVar[tuple[str, ...]] = ()

    def check(self, candidate: str, reference: object, row: Mapping[str, object]) -> object:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True)
class Verdict:
    """One judgement of one row: what every verifier's ``check()`` returns and what grading stores.

    Attributes:
        reward: the score in [0, 1], or None when the row could not be judged.
        status: one of :data:`JUDGE_STATUSES`; left out, it is ``"ok"`` for a score and
            ``"no_verdict"`` for None.
        reason: one line saying why (stored in the row's ``reason``).
        meta: JSON-able details (stored in ``judge_meta``), e.g. a sandbox's exit code.
        markers: ``{name: number}`` measurements merged into the row's ``markers``.

    Construction checks the contract, so no verdict can carry NaN, a score outside [0, 1], or a
    score with a failure status.

    Example:
        >>> Verdict(1.0, reason="exact match")
        Verdict(reward=1.0, status='ok', reason='exact match', meta=None, markers={})
        >>> Verdict(None, reason="reference has no number").status
        'no_verdict'
        >>> Verdict(1.5)
        Traceback (most recent call last):
        ...
        ValueError: Verdict: reward 1.5 is outside [0, 1]
    """

    reward: float | None
    status: str = None  # type: ignore[assignment]  # derived from reward when left out
    reason: str | None = None
    meta: dict[str, object] | None = None
    markers: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        reward = self.reward
        if reward is not None:
            if not isinstance(reward, numbers.Real):
                raise TypeError(f"Verdict: reward must be a number in [0, 1] or None, got "
                                f"{type(reward).__name__} {reward!r:.60}")
            reward = float(reward)
            if math.isnan(reward) or not 0.0 <= reward <= 1.0:
                raise ValueError(f"Verdict: reward {reward!r} is outside [0, 1]")
            object.__setattr__(self, "reward", reward)  # bools and numpy scalars become float
        status = self.status
        if status is None:
            status = "ok" if reward is not None else "no_verdict"
            object.__setattr__(self, "status", status)
        if status not in JUDGE_STATUSES:
            raise ValueError(f"Verdict: status {status!r} is not one of {sorted(JUDGE_STATUSES)}")
        if (reward is not None) != (status in ("ok", "given")):
            raise ValueError(f"Verdict: status {status!r} with reward {reward!r}: a score goes "
                             "with 'ok' or 'given', None with any other status")
        if self.reason is not None and not isinstance(self.reason, str):
            raise TypeError("Verdict: reason must be a string or None, got "
                            f"{type(self.reason).__name__}")


def _score(value: object) -> tuple[float | None, str | None]:
    """(score, None) for a valid score, else (None, why)."""
    if isinstance(value, bool):
        return float(value), None
    if isinstance(value, numbers.Real):  # numpy scalars register as Real too
        x = float(value)
        if math.isnan(x):
            return None, "judge returned NaN"
        if not 0.0 <= x <= 1.0:
            return None, f"judge returned {x!r}, outside [0, 1]"
        return x, None
    return None, f"judge returned {type(value).__name__} {value!r:.80}, not a number in [0, 1]"


def normalize_verdict(raw: object) -> Verdict:
    """Turn whatever a judge returned into a :class:`Verdict` (never raises).

    Example:
        >>> normalize_verdict((1, "matched")).reward, normalize_verdict(float("nan")).status
        (1.0, 'invalid_result')
    """
    if isinstance(raw, Verdict):
        return raw
    if raw is None:
        return Verdict(None, "no_verdict", "judge returned None (cannot judge)")
    reason = None
    markers: dict[str, float] = {}
    meta = None
    value = raw
    if isinstance(raw, tuple) and len(raw) == 2 and (raw[1] is None or isinstance(raw[1], str)):
        value, reason = raw
        if value is None:
            return Verdict(None, "no_verdict", reason or "judge returned None (cannot judge)")
    elif isinstance(raw, Mapping):
        if "reward" not in raw:
            return Verdict(None, "invalid_result",
                           f"judge returned a dict without 'reward': {sorted(raw)}")
        value = raw["reward"]
        reason = raw.get("reason")
        meta = raw.get("meta")
        if reason is not None and not isinstance(reason, str):
            return Verdict(None, "invalid_result",
                           f"judge returned a 'reason' of type {type(reason).__name__}, "
                           "not a string")
        mk = raw.get("markers") or {}
        if not isinstance(mk, Mapping):
            return Verdict(None, "invalid_result", "judge returned 'markers' that is not a dict")
        for k, v in mk.items():
            s = v if isinstance(v, numbers.Real) else None
            if not isinstance(k, str) or s is None or (isinstance(s, float) and math.isnan(s)):
                return Verdict(None, "invalid_result", f"judge returned marker {k!r}={v!r}: "
                                                       "markers are str -> finite number")
            markers[k] = float(s)
        if value is None:
            return Verdict(None, "no_verdict", reason or "judge returned reward None", meta,
                           markers)
    score, why = _score(value)
    if score is None:
        return Verdict(None, "invalid_result", why if reason is None else f"{why} ({reason})", meta,
                       markers)
    return Verdict(score, "ok", reason, meta, markers)


@dataclass(frozen=True)
class Judge:
    """A uniform wrapper: ``judge(row) -> Verdict`` whatever the underlying judge is."""

    name: str
    fn: Callable[[Mapping[str, object]], object]
    needs_reference: bool = False
    parallel: bool = False
    #: what the judge wraps (a verifier, a function), read for its optional hooks
    source: object = None
    #: False for a ``(prompt, completion)`` callable: rows with references are refused.
    takes_reference: bool = True

    def judge(self, row: Mapping[str, object]) -> Verdict:
        if self.needs_reference and _reference(row) is None:
            return Verdict(None, "no_reference",
                           f"{self.name} needs privileged.reference; pass references=")
        try:
            raw = self.fn(row)
        except TimeoutError as e:
            return Verdict(None, "timeout", f"{type(e).__name__}: {e}")
        except Exception as e:  # a judge that raises never passes the row
            return Verdict(None, "error", f"{type(e).__name__}: {e}")
        return normalize_verdict(raw)


def _reference(row: Mapping[str, object]) -> object:
    priv = row.get("privileged") or {}
    return priv.get("reference") if isinstance(priv, Mapping) else None


def _call_shape(fn: Callable[..., object]) -> tuple[int, bool, bool] | None:
    """(required positional parameters, can take a third positional, can take ``reference=``)
    of a callable, or None when its signature cannot be read."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    required = positional = 0
    var_positional = by_keyword = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            var_positional = True
        elif p.kind is p.VAR_KEYWORD:
            by_keyword = True
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
            required += p.default is p.empty
            by_keyword |= p.name == "reference" and p.kind is p.POSITIONAL_OR_KEYWORD
        elif p.kind is p.KEYWORD_ONLY:
            if p.name == "reference":
                by_keyword = True
            elif p.default is p.empty:
                return None  # a required keyword-only parameter: no judge form fills it
    return required, var_positional or positional >= 3, by_keyword


def _with_optional_reference(fn: Callable[..., object], positional: bool,
                             row: Mapping[str, object]) -> object:
    ref = _reference(row)
    if ref is None:
        return fn(row["prompt"], row["final_text"])
    if positional:
        return fn(row["prompt"], row["final_text"], ref)
    return fn(row["prompt"], row["final_text"], reference=ref)


def judge_name_of(obj: object) -> str:
    """The name recorded in ``judge_name`` for a verifier or callable."""
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(obj, "__name__", None) or type(obj).__name__


def as_judge(reward: object, *, argument: str = "reward") -> Judge:
    """Wrap a verifier or callable as a :class:`Judge`; TypeError names what is wrong.

    Example:
        >>> as_judge(lambda row: 1).name
        '<lambda>'
    """
    if isinstance(reward, Judge):
        return reward
    name = judge_name_of(reward)
    check = getattr(reward, "check", None)
    if callable(check) and not isinstance(reward, type):
        def via_check(row: Mapping[str, object], _c: Callable[..., object] = check) -> object:
            return _c(row["final_text"], _reference(row), row)
        return Judge(name, via_check, bool(getattr(reward, "needs_reference", True)),
                     bool(getattr(reward, "parallel", False)), reward)
    if isinstance(reward, type):
        raise RowsTypeError(f"{argument}: got the class {reward.__name__}; pass an instance, e.g. "
                            f"{reward.__name__}()")
    if not callable(reward):
        raise RowsTypeError(f"{argument}: expected a verifier, a callable, or numbers; got "
                            f"{type(reward).__name__}")
    named = _by_name(reward, name, argument)
    if named is not None:
        return named
    shape = _call_shape(reward)
    required = None if shape is None else shape[0]
    if required == 1 or (required == 0 and shape is not None and not shape[1] and not shape[2]):
        return Judge(name, reward, False, False, reward)
    if shape is not None and (required in (2, 3) or (required == 0 and shape[1])):
        _, third, keyword = shape
        if required == 3:
            def with_reference(row: Mapping[str, object],
                               _f: Callable[..., object] = reward) -> object:
                return _f(row["prompt"], row["final_text"], _reference(row))
            return Judge(name, with_reference, False, False, reward)
        if third or keyword:
            # an optional reference parameter gets the reference whenever the row has one (left
            # at its default it would score every row against the default, silently)
            return Judge(name, partial(_with_optional_reference, reward, third), False, False,
                         reward)
        def without_reference(row: Mapping[str, object],
                              _f: Callable[..., object] = reward) -> object:
            return _f(row["prompt"], row["final_text"])
        return Judge(name, without_reference, False, False, reward, takes_reference=False)
    raise RowsTypeError(
        f"{argument}: callable {name} takes "
        f"{required if required is not None else 'an unreadable set of'} required positional "
        "arguments; a judge takes (row), (prompt, completion) or (prompt, completion, reference) "
        "(the reference may also be a keyword or **kwargs)"
    )


#: What a judge callable may take by name (see :mod:`assay.binding`).
JUDGE_NAMES = ("prompt", "completion", "reference", "row", "meta")


def _judge_values(row: Mapping[str, object]) -> dict[str, object]:
    meta = row.get("meta")
    return {"prompt": row.get("prompt"), "completion": row.get("final_text"),
            "reference": _reference(row), "row": row, "meta": meta if meta is not None else {}}


def _by_name(fn: Callable[..., object], name: str, argument: str) -> Judge | None:
    """A Judge calling ``fn`` by parameter name, when any of its parameters carries one of
    :data:`JUDGE_NAMES` (else None: the positional forms apply)."""
    from assay.binding import Binding
    from assay.errors import SpecError

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if not any(n in JUDGE_NAMES for n in params):
        return None
    try:
        b = Binding(fn, JUDGE_NAMES, what=f"callable {name}")
    except SpecError as e:
        raise RowsTypeError(f"{argument}: {e}") from None
    return Judge(name, partial(_call_bound, b), False, False, fn,
                 takes_reference=bool({"reference", "row"} & b.takes))


def _call_bound(b: Binding, row: Mapping[str, object]) -> object:
    return b.call(_judge_values(row))


def check_references_used(judge: Judge, records: Iterable[Mapping[str, object]],
                          argument: str = "reward") -> None:
    """Raise when rows carry references but the judge is a ``(prompt, completion)`` callable that
    cannot take one: it would grade without the gold answer, silently. (A combinator's child may
    ignore the reference: its siblings use it; only the top-level judge is checked.)

    Example:
        >>> check_references_used(as_judge(lambda p, c: 1), [{"privileged": {"reference": "5"}}])
        Traceback (most recent call last):
        ...
        assay.errors.RowsTypeError: reward: callable <lambda> takes (prompt, completion) but ...
    """
    if judge.takes_reference:
        return
    for r in records:
        if _reference(r) is not None:
            raise RowsTypeError(
                f"{argument}: callable {judge.name} takes (prompt, completion) but the rows have "
                f"references; add a reference parameter, e.g. def {judge.name}(prompt, completion, "
                "reference=None), or drop references="
            )
