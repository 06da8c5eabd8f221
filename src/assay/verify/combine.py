"""Combinators: All, Any and Weighted over verifiers or plain judge callables.

Each child judges the row on its own; a child that cannot judge makes the result unjudged
unless the others already decide it (one 0 decides All, one 1 decides Any).
"""

from __future__ import annotations

import math
import numbers
import typing
from collections.abc import Mapping, Sequence

from assay.errors import VerifierError
from assay.judging import Judge, Verdict, Verifier, as_judge


def _fmt(name: str, v: Verdict) -> str:
    score = "None" if v.reward is None else f"{v.reward:g}"
    return (f"{name}={score}" + (f" ({v.reason})" if v.reason else "")
            + ("" if v.status == "ok" else f" [{v.status}]"))


class _Combinator(Verifier):
    """Shared machinery: children as judges, batch grading through :func:`assay.grade`'s path."""

    def __init__(self, children: Sequence[object], name: str) -> None:
        if isinstance(children, (str, bytes)) or not isinstance(children, Sequence) or not children:
            raise VerifierError(f"{name}: give a non-empty list of verifiers or judge callables")
        self.judges: list[Judge] = [as_judge(c, argument=f"{name}[{i}]")
                                    for i, c in enumerate(children)]
        self.name = name
        self.needs_reference = False  # each child checks its own need for a reference
        self.parallel = any(j.parallel for j in self.judges)
        self.hard_timeout = sum(float(getattr(j.source, "hard_timeout", 60.0) or 60.0)
                                for j in self.judges)

    def __repr__(self) -> str:
        return f"{type(self).__name__}([{', '.join(j.name for j in self.judges)}])"

    def combine(self, verdicts: Sequence[Verdict]) -> Verdict:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, candidate: str, reference: object,
              row: Mapping[str, object]) -> Verdict:
        return self.combine([j.judge(row) for j in self.judges])

    def grade_batch(self, rows: Sequence[Mapping[str, object]],
                    workers: int | None = None) -> list[Verdict]:
        """Each child grades all rows its own best way (CodeExec in sandboxes, MathEqual in
        worker processes), then verdicts combine row by row."""
        from assay.grading import judge_records

        per_child = [judge_records(j, list(rows), workers=workers) for j in self.judges]
        return [self.combine(vs) for vs in zip(*per_child)]

    def _undecided(self, verdicts: Sequence[Verdict]) -> Verdict | None:
        bad = [(j, v) for j, v in zip(self.judges, verdicts) if v.reward is None]
        if not bad:
            return None
        j, v = bad[0]
        return Verdict(None, v.status, f"{self.name}: {j.name} could not judge: {v.reason}",
                       {"children": [_fmt(k.name, x) for k, x in zip(self.judges, verdicts)]})

    def _reason(self, verdicts: Sequence[Verdict]) -> str:
        return "; ".join(_fmt(j.name, v) for j, v in zip(self.judges, verdicts))

    @staticmethod
    def _markers(verdicts: Sequence[Verdict]) -> dict[str, float]:
        out: dict[str, float] = {}
        for v in verdicts:
            out.update(v.markers)
        return out


class All(_Combinator):
    """Passes only if every child passes: the minimum score. A child scoring 0 gives 0;
    otherwise a child that cannot judge leaves the row unjudged.

    Example:
        >>> from assay.verify import Numeric, ExactMatch
        >>> row = {"final_text": "42", "privileged": {"reference": "42"}}
        >>> All([Numeric(), ExactMatch()]).check("42", "42", row).reward
        1.0
    """

    def __init__(self, verifiers: Sequence[object], *, name: str = "All") -> None:
        super().__init__(verifiers, name)

    def combine(self, verdicts: Sequence[Verdict]) -> Verdict:
        scores = [v.reward for v in verdicts if v.reward is not None]
        if scores and min(scores) == 0.0:
            return Verdict(0.0, "ok", self._reason(verdicts), None, self._markers(verdicts))
        return self._undecided(verdicts) or Verdict(min(scores), "ok", self._reason(verdicts), None,
                                                    self._markers(verdicts))


class Any(_Combinator):
    """Passes if some child passes: the maximum score. A child scoring 1 gives 1; otherwise a
    child that cannot judge leaves the row unjudged.

    Example:
        >>> from assay.verify import Numeric, ExactMatch
        >>> row = {"final_text": "forty-two", "privileged": {"reference": "42"}}
        >>> Any([Numeric(), ExactMatch()]).check("forty-two", "42", row).reward
        0.0
    """

    def __init__(self, verifiers: Sequence[object], *, name: str = "Any") -> None:
        super().__init__(verifiers, name)

    def combine(self, verdicts: Sequence[Verdict]) -> Verdict:
        scores = [v.reward for v in verdicts if v.reward is not None]
        if scores and max(scores) == 1.0:
            return Verdict(1.0, "ok", self._reason(verdicts), None, self._markers(verdicts))
        return self._undecided(verdicts) or Verdict(max(scores), "ok", self._reason(verdicts), None,
                                                    self._markers(verdicts))


class Weighted(_Combinator):
    """The weighted mean of the children's scores, ``sum(w * s) / sum(w)``; weights are finite
    and positive. Unjudged if any child cannot judge (a mean over fewer parts would be a
    different score).

    Example:
        >>> from assay.verify import Numeric, ExactMatch
        >>> row = {"final_text": "42.0", "privileged": {"reference": "42"}}
        >>> Weighted([(Numeric(), 3), (ExactMatch(), 1)]).check("42.0", "42", row).reward
        0.75
    """

    def __init__(self, pairs: Sequence[tuple[object, float]], *,
                 name: str = "Weighted") -> None:
        if isinstance(pairs, Mapping) or not isinstance(pairs, Sequence) or not pairs:
            raise VerifierError(f"{name}: give a non-empty list of (verifier, weight) pairs")
        weights: list[float] = []
        for i, p in enumerate(pairs):
            if not isinstance(p, tuple) or len(p) != 2:
                raise VerifierError(f"{name}[{i}]: expected a (verifier, weight) pair, "
                                    f"got {p!r:.60}")
            w = p[1]
            if (isinstance(w, bool) or not isinstance(w, numbers.Real)
                    or not (math.isfinite(w) and w > 0)):
                raise VerifierError(f"{name}[{i}]: weight {w!r} must be a finite number > 0")
            weights.append(float(w))
        super().__init__([p[0] for p in pairs], name)
        self.weights = weights

    def combine(self, verdicts: Sequence[Verdict]) -> Verdict:
        undecided = self._undecided(verdicts)
        if undecided is not None:
            return undecided
        # every reward is set here (_undecided found none missing)
        total = sum(w * typing.cast(float, v.reward)
                    for w, v in zip(self.weights, verdicts)) / sum(self.weights)
        return Verdict(min(1.0, max(0.0, total)), "ok", self._reason(verdicts), None,
                       self._markers(verdicts))
