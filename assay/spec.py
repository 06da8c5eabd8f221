"""The study spec: a pydantic model of one study, loaded from YAML, with a results checksum.

``load_spec`` reports every problem with its YAML path and line; ``StudySpec.checksum()`` hashes
what changes results (sources, file contents, verifiers, rules, models, measurements) and
nothing that does not (name, description, output directory, execution settings, log level).

Example:
    >>> spec = parse_spec('''
    ... name: tiny
    ... sources:
    ...   - name: base
    ...     kind: humaneval
    ...     policy: {k: 2, seed: 1, skill: 0.6}
    ...     steps: [{op: slice, start: 0, stop: 5}]
    ... measure:
    ...   pass_at: {k: 1}
    ... ''')
    >>> spec.sources[0].verifier.kind, spec.execution.runner
    ('code_exec', 'local')
    >>> spec.checksum()[:5]
    'spec:'
    >>> spec.checksum() == spec.model_copy(update={"output": "elsewhere"}).checksum()
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from assay.errors import SpecError
from assay.hashing import content_hash
from assay.nightly.spec import NightlySpec

SPEC_VERSION = 1

#: Ops a row or view derivation step may use (the data plane's vocabulary).
STEP_OPS = ("where", "slice", "sample", "collapse_duplicates")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------- verifiers

VerifierKind = Literal["math_equal", "numeric", "exact_match", "multiple_choice", "code_exec"]
#: spec kind -> class name in ``assay.verify``.
VERIFIER_CLASSES: dict[str, str] = {
    "math_equal": "MathEqual",
    "numeric": "Numeric",
    "exact_match": "ExactMatch",
    "multiple_choice": "MultipleChoice",
    "code_exec": "CodeExec",
}


class VerifierSpec(_Model):
    """Which verifier grades a source, with its keyword arguments (``assay.verify.<Class>``)."""

    kind: VerifierKind
    params: dict[str, Any] = Field(default_factory=dict)


# ------------------------------------------------------------------------------- sources


def _check_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validate derivation steps with the data plane's rules (pure Python, no I/O)."""
    try:
        from assay.data.view import validate_steps
    except ImportError:  # data plane not installed: keep a structural check
        for i, s in enumerate(steps):
            if not isinstance(s, Mapping) or s.get("op") not in STEP_OPS:
                raise ValueError(f"steps[{i}].op must be one of {list(STEP_OPS)}") from None
        return steps
    from assay.errors import DataError

    try:
        return validate_steps(steps)
    except DataError as e:
        # The message starts with "steps[i].field"; pydantic prefixes the YAML path.
        raise ValueError(str(e)) from None


class PolicySpec(_Model):
    """The seeded offline code policy (``assay.benchmarks.seeded_code_policy``)."""

    k: int = Field(4, ge=1, le=1000, description="completions per problem")
    seed: int = Field(0, ge=0)
    skill: float = Field(0.5, ge=0.0, le=1.0, description="probability mass on correct code")


class _SourceBase(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="arm name used by measure/report")
    steps: list[dict[str, Any]] = Field(
        default_factory=list,
        description="row filters/slices as data: {op: slice|where|sample, ...}; slice and sample "
        "act on tasks (all completions of a task stay together), where on row fields",
    )

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _check_steps(v)


class HumanEvalSource(_SourceBase):
    """The built-in HumanEval problems answered by the seeded offline policy."""

    kind: Literal["humaneval"]
    policy: PolicySpec = Field(default_factory=PolicySpec)
    verifier: VerifierSpec = Field(default_factory=lambda: VerifierSpec(kind="code_exec"))


class FieldMap(_Model):
    """Which record fields hold the prompt, the completion, and the optional extras."""

    prompt: str = "prompt"
    completion: str = "completion"
    reference: str | None = None
    task_id: str | None = None
    reward: str | None = None


class FileSource(_SourceBase):
    """Prompts and completions you already have, as JSONL or Parquet."""

    kind: Literal["file"]
    path: str = Field(description="JSONL or Parquet file; relative paths resolve from the spec file")
    format: Literal["jsonl", "parquet"] | None = Field(None, description="default: from the suffix")
    fields: FieldMap = Field(default_factory=FieldMap)
    verifier: VerifierSpec | None = Field(
        None, description="grade with this verifier; omit when fields.reward holds the scores"
    )

    @model_validator(mode="after")
    def _needs_scores(self) -> FileSource:
        if self.verifier is None and self.fields.reward is None:
            raise ValueError(
                "give a verifier to grade the completions, or fields.reward naming the field "
                "that already holds each completion's score"
            )
        suffix = Path(self.path).suffix.lower()
        if self.format is None and suffix not in (".jsonl", ".parquet"):
            raise ValueError(f"path {self.path!r}: cannot tell the format from the suffix; "
                             "set format: jsonl or format: parquet")
        return self


Source = Annotated[HumanEvalSource | FileSource, Field(discriminator="kind")]


# ------------------------------------------------------------------------------- decontamination


class DecontamSpec(_Model):
    """Eval-side contamination of the sources' prompts against a corpus."""

    corpus: list[str] = Field(min_length=1, description="JSONL/Parquet corpus files")
    text_field: str = "text"
    id_field: str | None = "id"
    sources: list[str] | None = Field(None, description="which sources to check (default: all)")
    n: int = Field(13, ge=1, description="n-gram length")
    params: dict[str, Any] = Field(
        default_factory=dict, description="further keyword arguments of assay.contamination"
    )


# ------------------------------------------------------------------------------- reward models


class RewardModelSpec(_Model):
    """A reward model to audit: the bundled embedder, a transformers model, or a function."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal["embedding", "hf", "function"]
    path: str | None = Field(None, description="hf: model id or local path")
    revision: str | None = None
    function: str | None = Field(None, description="function: 'module:callable' scoring "
                                 "(prompts, responses)")
    params: dict[str, Any] = Field(default_factory=dict, description="adapter keyword arguments")

    @model_validator(mode="after")
    def _kind_fields(self) -> RewardModelSpec:
        if self.kind == "hf" and not self.path:
            raise ValueError("kind 'hf' needs path (a hub id or a local directory)")
        if self.kind == "function" and (not self.function or ":" not in self.function):
            raise ValueError("kind 'function' needs function: 'package.module:callable'")
        if self.kind != "hf" and (self.path or self.revision):
            raise ValueError(f"path/revision only apply to kind 'hf', not {self.kind!r}")
        return self


class RewardDataSpec(_Model):
    """The preference data the reward models are audited on."""

    dataset: Literal["diagnostic_v3"] = "diagnostic_v3"
    dimensions: list[str] | None = Field(None, description="subset of dimensions (default: all)")
    steps: list[dict[str, Any]] = Field(default_factory=list,
                                        description="derivation steps applied to every dimension")

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _check_steps(v)


class RewardSpec(_Model):
    models: list[RewardModelSpec] = Field(min_length=1)
    data: RewardDataSpec = Field(default_factory=RewardDataSpec)


# ------------------------------------------------------------------------------- measurements


class PassAtSpec(_Model):
    k: int | None = Field(None, ge=1, description="k for pass@k, pass^k (pass@1 is always reported)")
    sources: list[str] | None = None


class CompareSpec(_Model):
    before: str
    after: str
    alpha: float = Field(0.05, gt=0, lt=1)
    proxy: str | None = None
    metrics: list[str] | None = None


class VarianceSpec(_Model):
    sources: list[str] | None = None


class HoldoutSpec(_Model):
    effect: float = Field(gt=0, le=1)
    before: str | None = None
    after: str | None = None
    power: float = Field(0.8, gt=0, lt=1)
    alpha: float = Field(0.05, gt=0, lt=1)


class SelectSpec(_Model):
    source: str
    band: tuple[float, float] = (0.2, 0.8)

    @field_validator("band")
    @classmethod
    def _band(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= v[0] <= v[1] <= 1:
            raise ValueError(f"band must satisfy 0 <= low <= high <= 1, got {list(v)}")
        return v


class MeasureSpec(_Model):
    pass_at: PassAtSpec | None = None
    compare: list[CompareSpec] = Field(default_factory=list)
    eval_variance: VarianceSpec | None = None
    holdout_size: HoldoutSpec | None = None
    select: SelectSpec | None = None


# ------------------------------------------------------------------------------- execution


class ExecutionSpec(_Model):
    """How to run; none of it changes results, so none of it is in the checksum."""

    runner: Literal["local", "dask", "ray"] = "local"
    address: str | None = Field(None, description="dask: scheduler address (default: a LocalCluster)")
    workers: int | None = Field(None, ge=1, description="grading worker processes (default: cores)")
    shard_rows: int = Field(256, ge=1, description="rows per grading shard (the resume unit)")
    log_level: Literal["debug", "info", "warning", "error"] = "warning"


# ------------------------------------------------------------------------------- the spec


#: Top-level fields that never change results (excluded from the checksum).
NON_RESULT_FIELDS = frozenset({"name", "description", "output", "execution", "nightly"})


class StudySpec(_Model):
    """One study: sources -> grade -> decontaminate -> reward-model audit -> measure -> report."""

    version: Literal[1] = SPEC_VERSION
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    sources: list[Source] = Field(default_factory=list)
    decontaminate: DecontamSpec | None = None
    reward: RewardSpec | None = None
    measure: MeasureSpec = Field(default_factory=MeasureSpec)
    output: str | None = Field(None, description="run directory (default runs/<name>)")
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec)
    nightly: NightlySpec | None = None
    _base_dir: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _references(self) -> StudySpec:
        names = [s.name for s in self.sources]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"sources: names must be unique, repeated: {dup}")
        if not self.sources and self.reward is None:
            raise ValueError("a study needs at least one source or a reward section")

        def known(name: str, where: str) -> None:
            if name not in names:
                raise ValueError(f"{where}: unknown source {name!r}; sources are {names}")

        m = self.measure
        for i, c in enumerate(m.compare):
            known(c.before, f"measure.compare[{i}].before")
            known(c.after, f"measure.compare[{i}].after")
        for where, lst in (("measure.pass_at.sources", m.pass_at and m.pass_at.sources),
                           ("measure.eval_variance.sources", m.eval_variance and m.eval_variance.sources),
                           ("decontaminate.sources", self.decontaminate and self.decontaminate.sources)):
            for n in lst or ():
                known(n, where)
        if m.holdout_size is not None:
            for f in ("before", "after"):
                if getattr(m.holdout_size, f):
                    known(getattr(m.holdout_size, f), f"measure.holdout_size.{f}")
        if m.select is not None:
            known(m.select.source, "measure.select.source")
        if self.reward is not None:
            rn = [r.name for r in self.reward.models]
            if len(set(rn)) != len(rn):
                raise ValueError("reward.models: names must be unique")
        return self

    # -- paths ------------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """A spec-relative path made absolute (relative to the spec file's directory)."""
        p = Path(os.path.expanduser(path))
        if not p.is_absolute() and self._base_dir:
            p = Path(self._base_dir) / p
        return p

    def output_dir(self, override: str | os.PathLike[str] | None = None) -> Path:
        """Where the run writes: ``override``, else ``output``, else ``runs/<name>``."""
        if override is not None:
            return Path(override)
        return Path(self.output) if self.output else Path("runs") / self.name

    # -- checksum ---------------------------------------------------------------------------
    def results_content(self) -> dict[str, Any]:
        """The part of the spec that changes results, with file paths replaced by the files'
        content hashes (moving a file changes nothing; editing it changes the checksum)."""
        doc = self.model_dump(mode="json", exclude=set(NON_RESULT_FIELDS))
        for src, s in zip(doc["sources"], self.sources):
            if isinstance(s, FileSource):
                src["path"] = file_checksum(self.resolve(s.path))
        if self.decontaminate is not None:
            doc["decontaminate"]["corpus"] = [file_checksum(self.resolve(p))
                                              for p in self.decontaminate.corpus]
        return doc

    def checksum(self) -> str:
        """``spec:<hex>`` over :meth:`results_content` (reads the files it names)."""
        return content_hash(self.results_content(), "spec")

    def definition_checksum(self) -> str:
        """``specdef:<hex>``: like :meth:`checksum` but with the files' paths instead of their
        contents, so a nightly spec whose model outputs change every night keeps its identity
        while any change to how they are graded or measured breaks it."""
        return content_hash(self.model_dump(mode="json", exclude=set(NON_RESULT_FIELDS)), "specdef")

    def to_yaml(self) -> str:
        """The spec as YAML (defaults included), loadable by :func:`parse_spec`."""
        doc = self.model_dump(mode="json")
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


_FILE_HASH_CACHE: dict[tuple[str, int, int], str] = {}


def file_checksum(path: str | os.PathLike[str]) -> str:
    """``file:<hex>`` of a file's bytes (memoized on path, size and mtime), or SpecError."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SpecError(f"file not found: {p} (relative paths resolve from the spec's directory)") from None
    memo = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if memo in _FILE_HASH_CACHE:
        return _FILE_HASH_CACHE[memo]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    out = f"file:{h.hexdigest()[:32]}"
    _FILE_HASH_CACHE[memo] = out
    return out


# ------------------------------------------------------------------------------- YAML I/O


def _yaml_path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _node_line(root: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """1-based line of the YAML node at ``loc`` (the deepest one that exists)."""
    node, line = root, None
    if node is not None:
        line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            nxt = node.value[part]
        else:
            nxt = None
        if nxt is None:
            break
        node, line = nxt, nxt.start_mark.line + 1
    return line


def _clean_loc(loc: Sequence[Any]) -> list[Any]:
    """Drop pydantic's union-tag parts (``humaneval``, ``function-after[...]``) from a loc."""
    out = []
    for part in loc:
        if isinstance(part, str) and (part in ("humaneval", "file") or "[" in part or "-" in part
                                      and part.startswith(("function", "tagged"))):
            continue
        out.append(part)
    return out


def spec_errors(error: ValidationError, root: yaml.Node | None = None,
                source: str = "spec") -> list[str]:
    """One ``source:line: yaml.path: message`` string per problem in a ValidationError."""
    lines = []
    for e in error.errors():
        loc = _clean_loc(e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        m = re.match(r"steps\[(\d+)\](?:\.(\w+))?\s*(.*)", msg, re.S)
        if m and loc and loc[-1] == "steps":  # the data plane names the step: extend the path
            loc = [*loc, int(m.group(1))] + ([m.group(2)] if m.group(2) else [])
            msg = m.group(3) or msg
        if e["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see configs/schema.json)"
        elif e["type"] == "union_tag_invalid":
            msg = f"{msg}"
        where = f"{source}:{_node_line(root, loc)}" if root is not None else source
        lines.append(f"{where}: {_yaml_path(loc)}: {msg}")
    return lines


def parse_spec(text: str, *, source: str = "spec", base_dir: str | None = None) -> StudySpec:
    """Parse and validate spec YAML text; SpecError lists every problem with its YAML path.

    Example:
        >>> parse_spec("name: x\\nsources: [{name: a, kind: humaneval, polcy: {}}]")
        Traceback (most recent call last):
        ...
        assay.errors.SpecError: spec has 1 problem:
          spec:2: sources[0].polcy: unknown field (check the spelling; see configs/schema.json)
    """
    try:
        root = yaml.compose(text)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{source}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{source}: a spec is a YAML mapping (name:, sources:, ...), "
                        f"got {type(doc).__name__}")
    try:
        spec = StudySpec.model_validate(doc)
    except ValidationError as e:
        problems = spec_errors(e, root, source)
        raise SpecError(f"{source} has {len(problems)} problem{'s' * (len(problems) != 1)}:\n  "
                        + "\n  ".join(problems)) from None
    spec._base_dir = base_dir
    return spec


def load_spec(path: str | os.PathLike[str]) -> StudySpec:
    """Load a spec file; relative paths inside it resolve from its directory."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {p}") from None
    return parse_spec(text, source=str(p), base_dir=str(p.resolve().parent))


def check_files(spec: StudySpec) -> list[str]:
    """Problems beyond the spec's shape, as ``yaml.path: message``: missing files, and
    verifier or reward-model params the class does not accept (checked against its signature,
    without building it)."""
    import inspect

    problems = []
    verifiers = [(f"sources[{i}].verifier.params", s.verifier) for i, s in enumerate(spec.sources)
                 if s.verifier is not None]
    if verifiers:
        import importlib

        verify = importlib.import_module("assay.verify")
        for where, v in verifiers:
            cls = getattr(verify, VERIFIER_CLASSES[v.kind])
            try:
                inspect.signature(cls).bind(**v.params)
            except TypeError as e:
                problems.append(f"{where}: {e} ({VERIFIER_CLASSES[v.kind]} takes "
                                f"{list(inspect.signature(cls).parameters)})")
    for i, s in enumerate(spec.sources):
        if isinstance(s, FileSource) and not spec.resolve(s.path).is_file():
            problems.append(f"sources[{i}].path: file not found: {spec.resolve(s.path)}")
    if spec.decontaminate is not None:
        for i, c in enumerate(spec.decontaminate.corpus):
            if not spec.resolve(c).is_file():
                problems.append(f"decontaminate.corpus[{i}]: file not found: {spec.resolve(c)}")
    return problems


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file (what ``configs/schema.json`` holds)."""
    schema = StudySpec.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "assay study spec"
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
