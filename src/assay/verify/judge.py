"""The ``judge`` verifier: a model grades each answer with a rubric, through the same client.

Temperature 0 and a fixed seed, a strict parser, judge calls cached like generations.

The reply is read strictly: the *last* ``GRADE: C`` / ``GRADE: I`` line (1 / 0), or failing
that the last JSON object with a numeric ``"score"`` in [0, 1]. Anything else leaves the row
unjudged (``no_verdict``, reward None) with the judge's text as the reason: an unparseable reply
is never a fail or a pass. A judge request that fails after its retries is an ``error`` verdict,
and is asked again on the next run (the judge's calls live in the same journal as generations,
keyed by judge model, rendered prompt (so the template) and parameters).

Liveness: the judge's calls go through :func:`assay.models.generate`, so they end as a
generation does (see :mod:`assay.models.openai`), with the judge server's own connection budget
and circuit breaker; they advance the progress unit ``track("judge", "judge:<model>")``.

Example:
    >>> parse_grade("The answer matches. GRADE: I ... on reflection GRADE: C")
    (1.0, 'GRADE: C')
    >>> parse_grade('{"score": 0.25, "why": "partly"}')
    (0.25, 'score 0.25')
    >>> parse_grade("Looks fine to me.")
    (None, 'no GRADE: C|I line and no JSON score')
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from assay.errors import VerifierError
from assay.judging import Verdict, Verifier
from assay.verify.registry import VERIFIERS

if TYPE_CHECKING:
    from assay.binding import Binding
    from assay.models.base import Backend
    from assay.verify.spec import VerifierSpec

#: The built-in correct/incorrect rubric (in the manner of model_graded_qa): task, submission,
#: criterion (the reference answer), and a request for a final ``GRADE: C`` or ``GRADE: I``.
CORRECT_INCORRECT = """You are grading a submitted answer to a task against a criterion.

[BEGIN DATA]
[Task]: {question}
[Submission]: {answer}
[Criterion]: {reference}
[END DATA]

Does the submission meet the criterion? Ignore differences of style, wording or formatting;
judge only whether the submission's final answer agrees with the criterion.

Reason step by step in a few sentences, then end with exactly one line of the form
"GRADE: C" if the submission is correct or "GRADE: I" if it is incorrect."""

TEMPLATES = {"correct_incorrect": CORRECT_INCORRECT}
_FIELDS = {"question", "answer", "reference"}
_BUILDER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_GRADE = re.compile(r"GRADE\s*:\s*\**\s*([CI])\b")


def parse_grade(text: str) -> tuple[float | None, str]:
    """(score, what was read) from a judge's reply; (None, why) when nothing parses."""
    hits = _GRADE.findall(text)
    if hits:
        return (1.0 if hits[-1] == "C" else 0.0), f"GRADE: {hits[-1]}"
    dec = json.JSONDecoder()
    found = None
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and "score" in obj:
            found = obj["score"]
    if found is not None:
        if isinstance(found, bool) or not isinstance(found, (int, float)) or not 0 <= found <= 1:
            return None, f"JSON score {found!r} is not a number in [0, 1]"
        return float(found), f"score {found:g}"
    return None, "no GRADE: C|I line and no JSON score"


class JudgeSpec(BaseModel):
    """The ``verifier: {kind: judge, params: {...}}`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: dict[str, object] = Field(description="the judge model: any model backend entry "
                                  "(kind: openai | hf | ...)")
    template: str = Field("correct_incorrect", description="a built-in rubric name, a template "
                          "with {question}, {answer} and optionally {reference}, or a prompt "
                          "builder 'module:callable' called by parameter name (prompt, "
                          "completion, reference, row, meta) returning the judge's prompt text")
    api: str = Field("chat", pattern="^(chat|completions)$")
    system: str | None = None
    max_tokens: int = Field(512, ge=1)
    seed: int = 0
    max_connections: int = Field(16, ge=1)
    store: str | None = Field(None, description="store root for the judge's cache; "
                              "default $ASSAY_STORE or ./.assay")

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        if _BUILDER.match(v):
            return v  # a prompt builder: its parameters are checked when it is loaded
        text = TEMPLATES.get(v, v)
        names = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
        if v not in TEMPLATES and not names:
            raise ValueError(f"template {v[:40]!r} is neither a built-in rubric "
                             f"({sorted(TEMPLATES)}) "
                             "nor a template with {question} and {answer} fields")
        bad = names - _FIELDS
        if bad or not {"question", "answer"} <= names:
            raise ValueError(f"template fields {sorted(names)}: use {{question}}, {{answer}} and "
                             f"optionally {{reference}} (unknown: {sorted(bad)}); "
                             "double a literal brace")
        return v


@VERIFIERS.register("judge", spec=JudgeSpec, help="a model grades each answer with a rubric")
class JudgeVerifier(Verifier):
    """Grades with a model (see module docstring). Keyword arguments are :class:`JudgeSpec`'s.

    Example:
        >>> j = JudgeVerifier(model={"kind": "function", "callable": "assay.models.function:echo"},
        ...                   template="Q: {question} A: {answer} GRADE: C",
        ...                   store=__import__("tempfile").mkdtemp())
        >>> j.check("5", None, {"prompt": "2+3?"})[0]
        1.0
    """

    parallel = False
    model_param = "model"
    #: the judge's model and how it is reached say which model grades, not what the study is
    #: (the rubric and its parameters stay in the study's definition)
    under_test_params = ("model", "max_connections", "store")

    def __init__(self, base_dir: str | None = None, **params: object) -> None:
        self.spec = JudgeSpec.model_validate(params)
        self.base_dir = base_dir
        self.text = TEMPLATES.get(self.spec.template, self.spec.template)
        self.template_sha256 = hashlib.sha256(self.text.encode()).hexdigest()
        self.needs_reference = "{reference}" in self.text
        self._builder: Binding | None = None
        if _BUILDER.match(self.spec.template):  # loaded when first used (or by from_spec)
            self.needs_reference = False
        m = self.spec.model
        self.name = f"judge:{m.get('model') or m.get('path') or m.get('callable') or m.get('kind')}"
        self._backend: Backend | None = None

    def __repr__(self) -> str:
        return f"JudgeVerifier(model={self.spec.model!r}, template={self.spec.template[:30]!r})"

    @classmethod
    def label_for(cls, vspec: VerifierSpec) -> str:
        """The report names the judge model, when the entry gives one, next to the kind."""
        from assay.nightly.under_test import judge_label

        model = vspec.params.get(cls.model_param)
        return f"judge {judge_label(model)}" if isinstance(model, dict) else "judge"

    @classmethod
    def from_spec(cls, vspec: VerifierSpec, base_dir: str | None = None) -> JudgeVerifier:
        """Built from a spec entry: a prompt builder next to the spec imports, and its
        parameters are checked now (``assay validate``)."""
        v = cls(base_dir=base_dir, **vspec.params)
        v.builder()
        return v

    @classmethod
    def spec_fingerprint(cls, vspec: VerifierSpec, base_dir: str | None = None
                         ) -> dict[str, object]:
        """A prompt builder's module source keys the grades (editing it re-grades)."""
        ref = vspec.params.get("template", "")
        if not (isinstance(ref, str) and _BUILDER.match(ref)):
            return {}
        from assay.hashing import file_checksum

        built = cls(base_dir=base_dir, **vspec.params).builder()
        fn = built.fn if built is not None else None  # a builder: the template matched above
        path = getattr(sys.modules.get(getattr(fn, "__module__", "")), "__file__", None)
        return {"builder": ref, "code": file_checksum(path) if path else None}

    def builder(self) -> Binding | None:
        """The prompt builder's :class:`assay.binding.Binding` (None for a text template)."""
        if self._builder is None and _BUILDER.match(self.spec.template):
            from assay.binding import Binding
            from assay.judging import JUDGE_NAMES
            from assay.registry import load_callable

            fn = load_callable(self.spec.template, what="judge template", base_dir=self.base_dir)
            self._builder = Binding(fn, JUDGE_NAMES, what=f"judge template {self.spec.template!r}")
        return self._builder

    def __getstate__(self) -> dict[str, object]:
        # a loaded model is not sent to workers; the builder is imported again by reference
        return {**self.__dict__, "_backend": None, "_builder": None}

    @classmethod
    def cache_identity(cls, **params: Any) -> dict[str, object]:
        """The judge model's identity (``/v1/models``' answer, the weights' checksum), for the
        grade stage's key: the same judge name on a new checkpoint re-grades."""
        return cls(**params).backend().identity()

    def backend(self) -> Backend:
        if self._backend is None:
            from assay.models.generation import shared_backend

            self._backend = shared_backend(self.spec.model)
        return self._backend

    def prompt(self, row: Mapping[str, object]) -> str:
        b = self.builder()
        if b is not None:
            from assay.judging import _judge_values

            try:
                out = b.call(_judge_values(row))
            except Exception as e:  # the user's code: say whose, and on what
                raise VerifierError(f"judge template {self.spec.template!r} raised on the row of "
                                    f"task {row.get('task_id')!r}: {type(e).__name__}: "
                                    f"{e}") from None
            if not isinstance(out, str) or not out:
                raise VerifierError(f"judge template {self.spec.template!r} returned "
                                    f"{type(out).__name__} {out!r:.60}; a prompt builder returns "
                                    "the judge's prompt as a non-empty string")
            return out
        priv = row.get("privileged")
        ref = priv.get("reference") if isinstance(priv, Mapping) else None
        if isinstance(ref, (list, tuple)):
            ref = " or ".join(map(str, ref))
        return self.text.format(question=row.get("prompt", ""), answer=row.get("final_text", ""),
                                reference="" if ref is None else ref)

    def check(self, candidate: str, reference: object, row: Mapping[str, Any]
              ) -> Verdict | tuple[float, str | None]:
        row = {**row, "final_text": candidate,
               "privileged": {**(row.get("privileged") or {}), "reference": reference}}
        v = self.grade_batch([row])[0]
        return v if v.reward is None else (v.reward, v.reason)

    def grade_batch(self, rows: Sequence[Mapping[str, object]],
                    workers: int | None = None) -> list[Verdict]:
        """One judge call per row, all at once through the backend (cached, resumable)."""
        from assay.models import generate
        from assay.store import Store

        if not rows:
            return []
        try:
            prompts = [self.prompt(r) for r in rows]
        except VerifierError:
            raise
        except (KeyError, IndexError, ValueError) as e:
            raise VerifierError(f"judge template: {e}; fields are {{question}}, {{answer}}, "
                                "{reference}") from None
        g = generate(prompts, self.backend(), k=1, seed=self.spec.seed, api=self.spec.api,
                     system=self.spec.system, max_connections=self.spec.max_connections,
                     params={"temperature": 0.0, "top_p": 1.0, "max_tokens": self.spec.max_tokens},
                     store=Store(self.spec.store) if self.spec.store else None,
                     stage="judge", label=self.name)
        out = []
        for rec in g.records:
            meta = {"judge_text": rec["completion"], "judge_key": rec["key"],
                    "template_sha256": self.template_sha256, "judge_model": rec["served_model"]}
            if rec["status"] != "ok":
                out.append(Verdict(None, "error", f"judge call failed: {rec['reason']}", meta))
                continue
            score, what = parse_grade(rec["completion"])
            if score is None:
                out.append(Verdict(None, "no_verdict", f"unparseable judge reply ({what}): "
                                   f"{rec['completion'][:500]}", meta))
            else:
                out.append(Verdict(score, "ok", what, meta))
        return out

