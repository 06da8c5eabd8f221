"""``choices:`` of a file or hf_dataset source: multiple choice scored by log-likelihood.

Each record becomes one prompt row whose context is the rendered question (with few-shot examples).

The record names its choices (a list field, or one template per choice) and its gold answer (an
index, the gold choice's text, one of ``labels``, or a letter A, B, ...). The context is the
question as ``fields.prompt`` or ``prompt_template`` renders it, after ``description`` and
``fewshot.k`` solved examples (each its context, ``target_delimiter`` and its gold choice, joined
by ``fewshot.delimiter``, as lm-eval builds them). Examples come from another split (hf_dataset)
or file; with neither, from the evaluated records, never the question itself.

``fewshot.sampler`` picks them (:class:`ExamplePicker`): ``seeded`` (the default) draws each
question's examples from a generator seeded with ``(fewshot.seed, task id)``, so a question's
context does not depend on which other questions are in the run; ``first_n`` takes the first k
in file order for every question (lm-eval's MMLU); ``lm_eval`` draws as lm-eval's default sampler
does, from one generator seeded with ``fewshot.seed`` (lm-eval's ``fewshot_random_seed``) and
advanced question by question in file order, so its shots change when the question set does.
``description`` is a template too, rendered per record (``about {{ subject }}``).

The score-choices stage (:mod:`assay.stages.score_choices`) then scores ``target_delimiter +
choice`` after each context with ``model``.

Example:
    >>> c = ChoicesSpec.model_validate({"model": {"kind": "hf", "path": "m"}, "answer": "label"})
    >>> c.field, c.target_delimiter, gold_index({"label": "B"}, c, ["x", "y"], "demo")
    ('choices', ' ', 1)
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol

from pydantic import Field, field_validator, model_validator

from assay.errors import SpecError
from assay.models.specs import _BackendEntry, backend_spec
from assay.paths import Paths
from assay.specbase import QuietSpecModel

if TYPE_CHECKING:
    from assay.rows import Rows
    from assay.sources.fieldmap import FieldMap
    from assay.sources.templates import PromptTemplate


class RecordSourceSpec(Protocol):
    """What the choices helpers read of a record source (:class:`assay.sources.records.
    RecordSourceSpec`, which imports this module)."""

    @property
    def name(self) -> str: ...
    @property
    def choices(self) -> ChoicesSpec | None: ...
    @property
    def fields(self) -> FieldMap: ...
    def template(self) -> PromptTemplate | None: ...


class FewShotSpec(QuietSpecModel):
    """Solved examples put before each question."""

    QUIET: ClassVar[dict[str, object]] = {"sampler": "seeded", "exclude_question": None}

    k: int = Field(0, ge=0, description="examples per question")
    split: str | None = Field(None, description="hf_dataset: the split examples come from "
                              "(MMLU: dev; ARC: train)")
    path: str | None = Field(None, description="file: a JSONL/Parquet file of example records")
    seed: int = Field(1234, description="seeded: examples are drawn per question from (seed, task "
                      "id); lm_eval: the seed of lm-eval's sampler (its fewshot_random_seed)")
    sampler: Literal["seeded", "first_n", "lm_eval"] = Field(
        "seeded", description="seeded: a draw per question from (seed, task id), independent of "
        "the other questions; first_n: the first k examples in file order for every question "
        "(lm-eval's first_n, MMLU); lm_eval: lm-eval's default sampler, one generator seeded "
        "with seed, advanced question by question (its contexts, string for string)")
    exclude_question: bool | None = Field(
        None, description="drop examples equal to the question (default: when the examples are "
        "the evaluated records). lm-eval does so whenever fewshot_split equals test_split, "
        "both unset included (HellaSwag: test_split null): then set true, as lm_eval draws a "
        "spare example for it")
    delimiter: str = Field("\n\n", description="between examples, and before the question")


class ChoicesSpec(QuietSpecModel):
    """Multiple choice by log-likelihood: which choice does ``model`` find most likely after
    the context?"""

    QUIET: ClassVar[dict[str, object]] = {"choice_template": None}

    model: Annotated[Any, _BackendEntry()]
    field: str | None = Field("choices", description="the record field holding the list of choice "
                              "texts (a dotted path: choices.text for ARC); unused with templates")
    templates: list[str] | None = Field(None, description="one template per choice, rendered from "
                                        "the record (HellaSwag-style fields), instead of field")
    choice_template: str | None = Field(
        None, description="each listed choice rendered by this Jinja2 template before it is "
        "scored, the choice as {{ choice }} beside the record's fields (HellaSwag's "
        "preprocessing: {{ choice | trim | regex_replace(...) }}); with field only")
    answer: str = Field("answer", description="the record field of the gold answer: its index, "
                        "its text, one of labels, or a letter A, B, ...")
    labels: str | None = Field(None, description="the record field listing each choice's label "
                               "(ARC: choices.label), read when the answer is a label")
    target_delimiter: str = Field(" ", description="between the context and each choice")
    description: str = Field("", description="text before the examples and the question; a "
                             "template rendered per record when it has {{ }} or {% %} "
                             "(lm-eval's description: 'about {{ subject }}')")
    fewshot: FewShotSpec = Field(default_factory=FewShotSpec)

    @field_validator("model", mode="before")
    @classmethod
    def _backend(cls, v: object) -> object:
        return backend_spec(v)

    @model_validator(mode="after")
    def _one_way(self) -> ChoicesSpec:
        if self.templates is not None:
            if len(self.templates) < 2:
                raise ValueError("templates: give one template per choice (at least 2)")
            if self.choice_template is not None:
                raise ValueError("choice_template renders the choices field lists; with "
                                 "templates, put the rendering in each template")
        elif self.field is None:
            raise ValueError("name the choices: field (a list field) or templates (one per choice)")
        if self.fewshot.split is not None and self.fewshot.path is not None:
            raise ValueError("fewshot: split (hf_dataset) and path (a file) both name the "
                             "examples; keep one")
        from assay.sources.templates import PromptTemplate, guess_format

        checks = {"description": self.description if guess_format(self.description) == "jinja2"
                  else None, "choice_template": self.choice_template}
        for key, text in checks.items():
            if text is not None:
                try:
                    PromptTemplate(text, "jinja2", f"choices.{key}").check()
                except SpecError as e:
                    raise ValueError(str(e)) from None
        return self


class ExamplePicker:
    """Which pool examples go before each question, question by question in file order.

    ``own``: the pool is the evaluated records. The question is dropped from its examples when
    ``fewshot.exclude_question`` says so, by default when ``own`` (``seeded``: the record itself;
    ``first_n`` and ``lm_eval``: every copy of it, by content, as lm-eval drops its eval doc).

    Example:
        >>> pool = [{"q": i} for i in range(6)]
        >>> p = ExamplePicker(FewShotSpec(k=2, sampler="first_n"), pool, own=True)
        >>> p.pick(0, pool[0], "t0"), p.pick(3, pool[3], "t3")
        ([1, 2], [0, 1])
        >>> lm = ExamplePicker(FewShotSpec(k=2, sampler="lm_eval"), pool, own=False)
        >>> lm.pick(0, None, "t0") != lm.pick(1, None, "t1")  # one generator, advanced
        True
    """

    def __init__(self, spec: FewShotSpec, pool: Sequence[Mapping[str, object]], own: bool) -> None:
        self.spec, self.pool, self.own = spec, pool, own
        self.exclude = own if spec.exclude_question is None else spec.exclude_question
        # lm-eval's default sampler: one generator for the whole task, seeded once
        self._rnd = random.Random(spec.seed)

    def pick(self, i: int, rec: Mapping[str, object] | None, task_id: str) -> list[int]:
        """Pool indices of question ``i``'s examples, in context order (call in file order)."""
        k, n = self.spec.k, len(self.pool)
        if self.spec.sampler == "seeded":
            cand = [j for j in range(n) if not self.exclude or
                    (j != i if self.own else self.pool[j] != rec)]
            if len(cand) < k:
                return cand  # too few: the caller says so, naming the record
            return random.Random(example_seed(self.spec.seed, task_id)).sample(cand, k)
        if self.spec.sampler == "first_n":
            return [j for j in range(n) if not (self.exclude and self.pool[j] == rec)][:k]
        if not self.exclude:
            return self._rnd.sample(range(n), k)
        # one spare draw, then the question's copies (equal by content) dropped; if copies of
        # the question took more than the spare, a fresh draw from the pool without them
        if n < k + 1:
            raise SpecError(f"fewshot: the lm_eval sampler draws k + 1 = {k + 1} examples to "
                            f"drop the question from, as lm-eval does, but there are {n}; "
                            "lower k or give more examples")
        got = [j for j in self._rnd.sample(range(n), k + 1) if self.pool[j] != rec][:k]
        if len(got) < k:
            rest = [j for j in range(n) if self.pool[j] != rec]
            got = self._rnd.sample(rest, k) if len(rest) >= k else rest
        return got


def choice_texts(rec: Mapping[str, object], spec: ChoicesSpec, where: str) -> list[str]:
    """The record's choices as texts, in order."""
    from assay.sources.fieldpath import _MISSING, get_field
    from assay.sources.templates import PromptTemplate

    if spec.templates is not None:
        return [PromptTemplate(t).render(rec, where=f"{where} choices.templates[{i}]")
                for i, t in enumerate(spec.templates)]
    assert spec.field is not None
    v = get_field(rec, spec.field)
    if v is _MISSING or not isinstance(v, (list, tuple)) or len(v) < 2:
        raise SpecError(f"{where}: field {spec.field!r} (choices.field) must be a list of at "
                        f"least 2 choice texts, got {v if v is not _MISSING else 'nothing'!r:.80}")
    bad = [i for i, c in enumerate(v) if not isinstance(c, str)]
    if bad:
        raise SpecError(f"{where}: choice {bad[0]} of field {spec.field!r} is "
                        f"{type(v[bad[0]]).__name__} {v[bad[0]]!r:.40}, not text")
    if spec.choice_template is not None:
        each = PromptTemplate(spec.choice_template, "jinja2", "choices.choice_template")
        return [each.render({**rec, "choice": c}, where=f"{where} choice {i}")
                for i, c in enumerate(v)]
    return list(v)


def gold_index(rec: Mapping[str, object], spec: ChoicesSpec, choices: Sequence[str],
               where: str) -> int:
    """The index of the gold choice (see :class:`ChoicesSpec` ``answer``)."""
    from assay.sources.fieldpath import _MISSING, get_field

    a = get_field(rec, spec.answer)
    at = f"{where}: field {spec.answer!r} (choices.answer)"
    if a is _MISSING or a is None:
        raise SpecError(f"{at} is missing; the record has {sorted(rec)}")
    if isinstance(a, bool):
        raise SpecError(f"{at} is a boolean {a!r}; give the gold choice's index, text or label")
    if isinstance(a, int):
        if not 0 <= a < len(choices):
            raise SpecError(f"{at} is {a}, not an index of the {len(choices)} choices")
        return a
    if isinstance(a, str):
        if spec.labels is not None:
            labels = get_field(rec, spec.labels)
            if isinstance(labels, list) and a in labels:
                return labels.index(a)
            raise SpecError(f"{at} {a!r} is not one of the labels {labels!r:.80} "
                            f"(choices.labels {spec.labels!r})")
        if a in choices:
            return list(choices).index(a)
        if len(a) == 1 and "A" <= a <= "Z" and ord(a) - 65 < len(choices):
            return ord(a) - 65
        if a.strip().isdigit() and int(a) < len(choices):
            return int(a)
    raise SpecError(f"{at} is {a!r:.60}: neither an index of the {len(choices)} choices, nor one "
                    "of their texts, nor a letter A.. naming one; fix the record or choices.answer")


def example_seed(seed: int, task_id: str) -> int:
    """The seed of one question's few-shot draw.

    Example:
        >>> example_seed(1234, "q1") == example_seed(1234, "q1") != example_seed(1234, "q2")
        True
    """
    from assay.hashing import content_hash

    return int(content_hash([seed, task_id], "fewshot").split(":", 1)[1][:12], 16)


def _choices_of(source: RecordSourceSpec) -> ChoicesSpec:
    if source.choices is None:  # the callers read choices-mode sources only
        raise SpecError(f"source {source.name!r} has no choices: entry")
    return source.choices


def fewshot_records(source: RecordSourceSpec, paths: Paths) -> list[dict[str, object]] | None:
    """The records examples are drawn from (None: the evaluated records themselves)."""
    fs = _choices_of(source).fewshot
    if fs.path is not None:
        from assay.sources.fieldpath import read_records

        p = paths.resolve(fs.path)
        return read_records(p, "parquet" if p.suffix.lower() == ".parquet" else "jsonl")
    if fs.split is not None:
        split_records = getattr(source, "split_records", None)  # a kind reading named splits
        if split_records is None:
            raise SpecError(f"source {source.name!r}: choices.fewshot.split needs an hf_dataset "
                            "source; for a file source give fewshot.path")
        return list(split_records(paths, fs.split))
    return None


def choice_rows(source: RecordSourceSpec, paths: Paths, records: Sequence[Mapping[str, object]],
                where: str, start: int = 0) -> Rows:
    """One prompt row per record: the context in ``prompt``, and ``privileged`` holding the
    choices, the gold index and the gold text (``reference``). Records are named from 1
    (``start`` records precede these)."""
    import pyarrow as pa

    from assay.builder import rows
    from assay.rows import Rows, to_json
    from assay.sources.fieldpath import _MISSING, get_field
    from assay.sources.templates import PromptTemplate, guess_format

    spec = _choices_of(source)
    fields = source.fields
    tmpl = source.template()
    if not records:
        raise SpecError(f"{where}: no records")

    def question(rec: Mapping[str, object], at: str) -> str:
        if tmpl is not None:
            return str(tmpl.render(rec, where=at))
        v = get_field(rec, fields.prompt)
        if v is _MISSING or not isinstance(v, str):
            raise SpecError(f"{at}: field {fields.prompt!r} (fields.prompt) must be text, got "
                            f"{'nothing' if v is _MISSING else type(v).__name__}; the record has "
                            f"{sorted(rec)}")
        return v

    def solved(rec: Mapping[str, object], at: str) -> str:
        cs = choice_texts(rec, spec, at)
        return question(rec, at) + spec.target_delimiter + cs[gold_index(rec, spec, cs, at)]

    tids: list[str] = []
    for i, rec in enumerate(records):
        if fields.task_id is None:
            tids.append(str(i))
            continue
        t = get_field(rec, fields.task_id)
        if t is _MISSING or t is None:
            raise SpecError(f"{where} record {start + i + 1}: task id field "
                            f"{fields.task_id!r} is missing")
        tids.append(str(t))
    pool = fewshot_records(source, paths)
    own_pool = pool is None
    pool_where = f"{where} (few-shot examples)"
    pool_list = list(records) if own_pool else list(pool or [])
    k = spec.fewshot.k
    picker = ExamplePicker(spec.fewshot, pool_list, own_pool)
    describe = (PromptTemplate(spec.description, "jinja2", "choices.description")
                if guess_format(spec.description) == "jinja2" else None)
    if k and len(pool_list) - own_pool < k:
        raise SpecError(f"{pool_where}: fewshot.k is {k} but only {len(pool_list) - own_pool} "
                        "examples are there; lower k or give more examples")
    shot_texts: dict[int, str] = {}
    used = {fields.prompt} if tmpl is None else set(tmpl.fields())
    listed = spec.field if spec.templates is None else None
    used |= {p for p in (listed, spec.answer, spec.labels, fields.task_id) if p is not None}
    prompts, privileged, metas = [], [], []
    for i, rec in enumerate(records):
        at = f"{where} record {start + i + 1}"
        cs = choice_texts(rec, spec, at)
        gold = gold_index(rec, spec, cs, at)
        shots = ""
        if k:
            try:
                pick = picker.pick(i, rec, tids[i])
            except SpecError as e:
                raise SpecError(f"{at}: {e}") from None
            if len(pick) < k:
                raise SpecError(f"{at}: fewshot.k is {k} but only {len(pick)} examples differ "
                                "from this question; lower k or give more examples")
            for j in pick:
                if j not in shot_texts:
                    shot_texts[j] = solved(pool_list[j], f"{pool_where} record {j + 1}")
            delim = spec.fewshot.delimiter
            shots = delim.join(shot_texts[j] for j in pick) + delim
        desc = (spec.description if describe is None else
                describe.render(rec, where=at))
        prompts.append(desc + shots + question(rec, at))
        privileged.append({"reference": cs[gold], "choices": cs, "gold": gold})
        if fields.meta is not None:
            meta = {p: get_field(rec, p) for p in fields.meta}
        else:
            meta = {key: v for key, v in rec.items() if key not in used}
        metas.append(meta or None)
    built = rows(prompts, [""] * len(prompts), None,
                 references=[p["reference"] for p in privileged],
                 task_ids=tids, meta=metas, record_names=lambda i: f"record {start + i + 1}")
    t = built.to_arrow()
    col = pa.array([to_json(p, f"{where} record {start + i + 1}")
                    for i, p in enumerate(privileged)],
                   pa.string())
    return Rows(t.set_column(t.schema.get_field_index("privileged"), "privileged", col))


def check_choice_records(source: RecordSourceSpec, paths: Paths, records: list[dict[str, object]],
                         where: str) -> list[str]:
    """Problems building the choice rows would hit, as ``yaml.path: message``."""
    try:
        choice_rows(source, paths, records[:50], where)
    except SpecError as e:
        msg = str(e)
        key = "choices" if "choices." in msg else (
            "prompt_template" if "prompt_template" in msg else "fields")
        return [f"{key}: {msg}"]
    return []
