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

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from assay import registry
from assay.errors import SpecError
from assay.hashing import content_hash, file_checksum
from assay.jsontypes import JSONObject
from assay.nightly.spec import NightlySpec
from assay.paths import SpecPaths
from assay.reward.prefdata import BuiltinPreferences
from assay.reward.registry import PREFERENCE_DATA, REWARD_MODELS
from assay.sources import SOURCES, SourceSpec
from assay.sources.plugin import PluginSource
from assay.specbase import SpecModel, kind_union

SPEC_VERSION: Literal[1] = 1

__all__ = ["StudySpec", "check_data", "check_files", "json_schema", "load_spec", "parse_spec"]

if TYPE_CHECKING:  # to a type checker, each entry is the base class of its kinds
    from assay.reward.kinds import RewardModelEntry
    from assay.reward.prefdata import PreferenceData

    Source = SourceSpec
    RewardModelSpec = RewardModelEntry
    RewardDataSpec = PreferenceData
else:
    #: A ``sources:`` entry: any registered source kind, or ``module:callable`` (a plugin).
    Source = kind_union(SOURCES, PluginSource)
    #: A ``reward.models`` entry: any registered reward-model kind.
    RewardModelSpec = kind_union(REWARD_MODELS)
    #: ``reward.data``: the built-in diagnostic set (an entry without ``kind``), a file, a hub
    #: dataset, or any kind registered in ``PREFERENCE_DATA``.
    RewardDataSpec = kind_union(PREFERENCE_DATA, default="builtin")


# ------------------------------------------------------------------------------- decontamination


class DecontamSpec(SpecModel):
    """Eval-side contamination of the sources' prompts against a corpus."""

    corpus: list[str] = Field(min_length=1, description="JSONL/Parquet corpus files")
    text_field: str = "text"
    id_field: str | None = "id"
    sources: list[str] | None = Field(None, description="which sources to check (default: all)")
    n: int = Field(13, ge=1, description="n-gram length")
    params: dict[str, Any] = Field(
        default_factory=dict, description="further keyword arguments of assay.contamination"
    )

    def warm_imports(self) -> tuple[str, ...]:
        """The bundled MiniLM's libraries when ``semantic`` is on (assay.libguard)."""
        return ("torch", "tokenizers") if self.params.get("semantic") else ()


# ------------------------------------------------------------------------------- reward models




class RewardScoreSpec(SpecModel):
    """Score every completion of these sources with the reward models (marker ``rm:<model>``)."""

    sources: list[str] = Field(min_length=1, description="sources whose completions are scored")
    models: list[str] | None = Field(None, description="which reward models (default: all)")


class RewardSpec(SpecModel):
    models: list[RewardModelSpec] = Field(min_length=1)
    data: RewardDataSpec | None = Field(
        default_factory=BuiltinPreferences,
        description="the preference data each model is audited on (default: the built-in "
        "diagnostic set); null: no audit")
    score: RewardScoreSpec | None = None

    def scoring_models(self) -> list[RewardModelEntry]:
        """The model entries that score rows (``score.models``, default all)."""
        if self.score is None:
            return []
        names = self.score.models
        return [m for m in self.models if names is None or m.name in names]


# ------------------------------------------------------------------------------- measurements


class PassAtSpec(SpecModel):
    k: int | None = Field(None, ge=1,
                          description="k for pass@k, pass^k (pass@1 is always reported)")
    sources: list[str] | None = None
    by: str | None = Field(None, description="also per category of this row field: a record field "
                           "kept in meta (subject, meta.level), a marker, or a row column; with a "
                           "macro average over categories")


class ChoiceAccuracySpec(SpecModel):
    sources: list[str] | None = Field(None, description="default: every choices: source")
    by: str | None = Field(None, description="also per category of this row field (subject), "
                           "with the macro average over categories")


class PerplexityMeasureSpec(SpecModel):
    sources: list[str] | None = Field(None, description="default: every perplexity: source")


class CompareSpec(SpecModel):
    before: str
    after: str
    alpha: float = Field(0.05, gt=0, lt=1)
    proxy: str | None = None
    metrics: list[str] | None = None
    by: str | None = Field(None, description="also compare per category of this row field (Holm "
                           "across categories)")


class VarianceSpec(SpecModel):
    sources: list[str] | None = None


class HoldoutSpec(SpecModel):
    effect: float = Field(gt=0, le=1)
    before: str | None = None
    after: str | None = None
    power: float = Field(0.8, gt=0, lt=1)
    alpha: float = Field(0.05, gt=0, lt=1)


class SelectSpec(SpecModel):
    source: str
    band: tuple[float, float] = (0.2, 0.8)

    @field_validator("band")
    @classmethod
    def _band(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= v[0] <= v[1] <= 1:
            raise ValueError(f"band must satisfy 0 <= low <= high <= 1, got {list(v)}")
        return v


class MeasureSpec(SpecModel):
    pass_at: PassAtSpec | None = None
    choice_accuracy: ChoiceAccuracySpec | None = Field(
        None, description="acc, acc_norm, acc_bytes of sources graded by log-likelihood")
    perplexity: PerplexityMeasureSpec | None = Field(
        None, description="word/byte perplexity and bits per byte of perplexity: sources")
    compare: list[CompareSpec] = Field(default_factory=list)
    eval_variance: VarianceSpec | None = None
    holdout_size: HoldoutSpec | None = None
    select: SelectSpec | None = None


# ------------------------------------------------------------------------------- execution


class ExecutionSpec(SpecModel):
    """How to run; none of it changes results, so none of it is in the checksum."""

    runner: Literal["local", "dask", "ray"] = "local"
    address: str | None = Field(None,
                                description="dask: scheduler address (default: a LocalCluster)")
    workers: int | None = Field(None, ge=1, description="grading worker processes (default: cores)")
    shard_rows: int = Field(256, ge=1, description="rows per grading shard (the resume unit)")
    max_parallel: int | None = Field(None, ge=1, description="stage nodes in flight at once "
                                     "(default 8; `assay run --max-parallel` overrides)")
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    view: bool = Field(True, description="write OUTPUT/view/index.html, the page of the run's "
                       "samples (`assay view OUTPUT` writes it later too)")
    deadline: str | None = Field(
        None, description="stop the run after this long, e.g. 6h, 90m, 1h30m (exit 5; the "
        "rerun resumes from what was committed)")
    stall_after: str | None = Field(
        None, description="stop the run when no sample is answered, no row graded and no batch "
        "scored for this long, e.g. 15m (exit 5); runner local only")

    @field_validator("deadline", "stall_after", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> object:
        from assay.watchdog import parse_duration

        if v is None:
            return v
        parse_duration(v)  # ValueError: pydantic names the field
        return str(v)

    @model_validator(mode="after")
    def _stall_runner(self) -> ExecutionSpec:
        if self.stall_after is not None and self.runner != "local":
            raise ValueError(f"stall_after needs runner: local (the progress of {self.runner} "
                             "workers is not seen by the flow's process); use deadline instead")
        return self


# ------------------------------------------------------------------------------- the spec


#: Top-level fields that never change results (excluded from the checksum).
NON_RESULT_FIELDS = frozenset({"name", "description", "output", "execution", "nightly"})
#: ``generate:`` fields that say which model is under test and how it is sampled: outside the
#: study definition (:meth:`StudySpec.definition_checksum`), inside the results checksum.
MODEL_UNDER_TEST_FIELDS = ("model", "params", "max_connections", "reuse")


class StudySpec(SpecModel):
    """One study: sources -> grade -> decontaminate -> reward-model audit -> measure -> report."""

    version: Literal[1] = SPEC_VERSION
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    plugins: list[str] = Field(
        default_factory=list,
        description="modules imported before the spec is validated, whose registry decorators "
        "add kinds ('package.module', or 'package.module:callable' called once); a module next to "
        "the spec file imports without PYTHONPATH")
    sources: list[Source] = Field(default_factory=list)
    decontaminate: DecontamSpec | None = None
    reward: RewardSpec | None = None
    measure: MeasureSpec = Field(default_factory=MeasureSpec)
    output: str | None = Field(None, description="run directory (default runs/<name>)")
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec)
    nightly: NightlySpec | None = None
    _base_dir: str | None = PrivateAttr(None)
    _night: str | None = PrivateAttr(None)
    #: the lm_eval sources that named a group or tag, as expanded (assay.sources.lm_eval_group)
    _lm_eval_groups: list[dict[str, Any]] = PrivateAttr(default_factory=list)

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
                           ("measure.eval_variance.sources",
                            m.eval_variance and m.eval_variance.sources),
                           ("decontaminate.sources",
                            self.decontaminate and self.decontaminate.sources),
                           ("measure.choice_accuracy.sources",
                            m.choice_accuracy and m.choice_accuracy.sources),
                           ("measure.perplexity.sources", m.perplexity and m.perplexity.sources)):
            for n in lst or ():
                known(n, where)
        if m.holdout_size is not None:
            for f in ("before", "after"):
                if getattr(m.holdout_size, f):
                    known(getattr(m.holdout_size, f), f"measure.holdout_size.{f}")
        if m.select is not None:
            known(m.select.source, "measure.select.source")
        if m.pass_at is not None and m.pass_at.k is not None:
            for i, src in enumerate(self.sources):
                gen = getattr(src, "generate", None)
                measured = m.pass_at.sources is None or src.name in m.pass_at.sources
                if gen is not None and measured and m.pass_at.k > gen.k:
                    raise ValueError(
                        f"measure.pass_at.k: {m.pass_at.k} is above sources[{i}].generate.k "
                        f"{gen.k} ({src.name!r}): pass@{m.pass_at.k} needs {m.pass_at.k} samples "
                        "per task; raise generate.k or lower pass_at.k")
        if self.reward is not None:
            rn = [r.name for r in self.reward.models]
            if len(set(rn)) != len(rn):
                raise ValueError("reward.models: names must be unique")
            sc = self.reward.score
            for i, n in enumerate(sc.sources if sc else ()):
                known(n, f"reward.score.sources[{i}]")
            for i, n in enumerate((sc.models or ()) if sc else ()):
                if n not in rn:
                    raise ValueError(f"reward.score.models[{i}]: unknown reward model {n!r}; "
                                     f"reward.models are {rn}")
        # scoring_models() is empty unless reward.score is set
        score = self.reward.score if self.reward else None
        scored: dict[str, set[str]] = {}
        if self.reward is not None and score is not None:
            scored = {f"rm:{e.name}": set(score.sources) for e in self.reward.scoring_models()}
        for i, c in enumerate(m.compare):
            if c.proxy is not None and c.proxy.removeprefix("marker:").startswith("rm:"):
                marker = c.proxy.removeprefix("marker:")
                if marker not in scored:
                    raise ValueError(
                        f"measure.compare[{i}].proxy: {c.proxy!r} names no scoring reward model; "
                        f"add it to reward.models and reward.score (scored: {sorted(scored)})")
                missing = [x for x in (c.before, c.after) if x not in scored[marker]]
                if missing:
                    raise ValueError(f"measure.compare[{i}].proxy: {marker} is not scored on "
                                     f"{missing}; add them to reward.score.sources")
        return self

    @property
    def lm_eval_groups(self) -> list[dict[str, Any]]:
        """Each ``lm_eval`` source whose task was an lm-eval group or tag, expanded into its
        member sources when the spec was parsed
        (:func:`assay.sources.lm_eval_group.expand_groups`)."""
        return self._lm_eval_groups

    def source(self, name: str) -> SourceSpec:
        """The source called ``name``, or a SpecError listing the sources."""
        for s in self.sources:
            if s.name == name:
                return s
        raise SpecError(f"no source named {name!r}; sources are {[s.name for s in self.sources]}")

    # -- paths ------------------------------------------------------------------------------
    @property
    def base_dir(self) -> str | None:
        """The spec file's folder (None: paths resolve from the working directory)."""
        return self._base_dir

    @property
    def paths(self) -> SpecPaths:
        """What a kind may know of the study: its folder and how its paths resolve."""
        return SpecPaths(self._base_dir)

    def resolve(self, path: str) -> Path:
        """A spec-relative path made absolute (relative to the spec file's directory)."""
        return self.paths.resolve(path)

    def output_dir(self, override: str | os.PathLike[str] | None = None) -> Path:
        """Where the run writes: ``override``, else ``output``, else ``runs/<name>``."""
        if override is not None:
            return Path(override)
        return Path(self.output) if self.output else Path("runs") / self.name

    @property
    def night(self) -> str | None:
        """The nightly night this spec runs as (:meth:`for_night`), else None."""
        return self._night

    def for_night(self, night: str | None) -> StudySpec:
        """A copy that runs as nightly ``night``: completions of a model whose identity is not
        proven are keyed to the night (:mod:`assay.models.freshness`), never served from an
        earlier night's cache."""
        out = self.model_copy()
        out._night = night
        return out

    # -- checksum ---------------------------------------------------------------------------
    def results_content(self) -> JSONObject:
        """The part of the spec that changes results, with file paths replaced by the files'
        content hashes (moving a file changes nothing; editing it changes the checksum)."""
        doc = self.model_dump(mode="json", exclude=set(NON_RESULT_FIELDS))
        for src, s in zip(doc["sources"], self.sources):
            src.update(s.identity(self.paths))  # file contents in place of paths, code checksums
        if self.decontaminate is not None:
            doc["decontaminate"]["corpus"] = [file_checksum(self.resolve(p))
                                              for p in self.decontaminate.corpus]
        data = self.reward.data if self.reward is not None else None
        if data is not None:
            doc["reward"]["data"].update(data.identity(self.paths))
        return doc

    def checksum(self) -> str:
        """``spec:<hex>`` over :meth:`results_content` (reads the files it names)."""
        return content_hash(self.results_content(), "spec")

    def definition_checksum(self) -> str:
        """``specdef:<hex>``: what the study *is* (prompts, filters, verifiers, measures), with
        the files' paths instead of their contents and without the model under test
        (:meth:`model_under_test`), so a nightly history, its gate and its baseline follow the
        study across checkpoints while any change to how answers are graded or measured breaks it.

        Example:
            >>> text = '''
            ... name: n
            ... sources:
            ...   - name: m
            ...     kind: file
            ...     path: p.jsonl
            ...     generate: {model: {kind: openai, base_url: "http://h/v1", model: ckpt-1}}
            ...     verifier: {kind: numeric}
            ... '''
            >>> s = parse_spec(text)
            >>> t = parse_spec(text, overrides=["generate.model.model=ckpt-2"])
            >>> t.definition_checksum() == s.definition_checksum()
            True
            >>> t.model_under_test()["m"]["model"]["model"]
            'ckpt-2'
        """
        return content_hash(self.definition_content(), "specdef")

    def definition_content(self) -> JSONObject:
        """The spec's study definition: the results fields less the model under test."""
        doc = self.model_dump(mode="json", exclude=set(NON_RESULT_FIELDS))
        for s, src in zip(self.sources, doc["sources"], strict=True):
            gen = src.get("generate")
            if isinstance(gen, dict):
                for f in MODEL_UNDER_TEST_FIELDS:
                    gen.pop(f, None)
            ver = src.get("verifier")
            if s.verifier is not None and isinstance(ver, dict):
                for f in s.verifier.under_test_params:  # the verifier kind says which
                    ver.get("params", {}).pop(f, None)
        return doc

    def model_under_test(self) -> dict[str, JSONObject]:
        """Per source, what is under test rather than what the study is: the ``generate.model``
        entry, the sampling parameters, the reuse rule, and a judge verifier's model. A source
        without a model (scored completions from a file) has none. Keys are source names.

        Example:
            >>> parse_spec("name: x\\nsources: [{name: a, kind: humaneval}]").model_under_test()
            {}
        """
        out: dict[str, JSONObject] = {}
        for s in self.sources:
            entry: JSONObject = {}
            gen = getattr(s, "generate", None)
            if gen is not None:
                g = gen.model_dump(mode="json")
                entry.update({f: g[f] for f in MODEL_UNDER_TEST_FIELDS if f in g})
                entry["k"] = g.get("k")
            judge = s.verifier.grading_model() if s.verifier is not None else None
            if judge is not None:
                entry["judge"] = dict(judge)
            if entry:
                out[s.name] = entry
        return out

    def to_yaml(self) -> str:
        """The spec as YAML (defaults included), loadable by :func:`parse_spec`."""
        doc = self.model_dump(mode="json")
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


# ------------------------------------------------------------------------------- YAML I/O


def _yaml_path(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _node_line(root: yaml.Node | None, loc: Sequence[str | int]) -> int | None:
    """1-based line of the YAML node at ``loc`` (the deepest one that exists)."""
    node, line = root, None
    if node is not None:
        line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif (isinstance(node, yaml.SequenceNode) and isinstance(part, int)
              and part < len(node.value)):
            nxt = node.value[part]
        else:
            nxt = None
        if nxt is None:
            break
        node, line = nxt, nxt.start_mark.line + 1
    return line


def _clean_loc(loc: Sequence[str | int]) -> list[str | int]:
    """Drop pydantic's union-tag parts (a kind name after a list index, ``function-after[...]``)
    from a loc, so it reads as the YAML path."""
    tags = {":plugin", *SOURCES.names(), *REWARD_MODELS.names(), *PREFERENCE_DATA.names()}
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and (
                (out and (isinstance(out[-1], int) or out[-1] == "data") and part in tags)
                or "[" in part
                or ("-" in part and part.startswith(("function", "tagged")))):
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
        if e["type"] == "unknown_kind":
            kind = e["input"].get("kind") if isinstance(e["input"], dict) else None
            msg = f"kind {kind!r}: {msg}" if kind is not None else f"kind is missing; {msg}"
        elif e["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see configs/schema.json)"
        elif e["type"] == "union_tag_invalid":
            msg = f"{msg}"
        elif e["type"] == "string_type" and not isinstance(e["input"], (str, list, dict)):
            import datetime as dt

            if isinstance(e["input"], (dt.date, dt.datetime, bool, int, float)):
                # YAML reads 2026-11-02, yes, 1.10 unquoted as a date, a bool, a number
                msg = (f"{msg}; YAML read {e['input']!s} as a {type(e['input']).__name__}: "
                       f"write it in quotes ('{e['input']!s}')")
        where = f"{source}:{_node_line(root, loc)}" if root is not None else source
        lines.append(f"{where}: {_yaml_path(loc)}: {msg}")
    return lines


_BUILT_AT = [registry.generation()]


def refresh_models() -> None:
    """Rebuild the spec models whose kind choices come from registries, if a registry gained a
    kind since they were built (a plugin module was imported)."""
    if _BUILT_AT[0] == registry.generation():
        return
    for model in (RewardSpec, StudySpec):
        model.model_rebuild(force=True)
    _BUILT_AT[0] = registry.generation()


def _import_plugins(doc: Mapping[str, object], root: yaml.Node | None, source: str,
                    base_dir: str | None) -> None:
    plugins = doc.get("plugins") or []
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        return  # validation reports the shape
    try:
        registry.import_plugins(plugins, base_dir=base_dir)
    except SpecError as e:
        where = f"{source}:{_node_line(root, ['plugins'])}" if root is not None else source
        raise SpecError(f"{source} has 1 problem:\n  {where}: plugins: {e}") from None
    refresh_models()


def parse_spec(text: str, *, source: str = "spec", base_dir: str | None = None,
               overrides: Sequence[str] = ()) -> StudySpec:
    """Parse and validate spec YAML text; SpecError lists every problem with its YAML path.
    ``overrides``: ``PATH=VALUE`` items applied before validation (:mod:`assay.overrides`).

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
    _import_plugins(doc, root, source, base_dir)
    if overrides:
        from assay.overrides import apply_overrides

        doc = apply_overrides(doc, overrides)
    # an lm-eval group becomes its member tasks' sources, from the index, before any data loads
    from assay.sources.lm_eval_group import expand_groups

    try:
        doc, groups = expand_groups(doc, base_dir)
    except SpecError as e:
        problems = [locate(p, root, source) for p in str(e).splitlines()]
        raise SpecError(f"{source} has {len(problems)} problem{'s' * (len(problems) != 1)}:\n  "
                        + "\n  ".join(problems)) from None
    try:
        spec = StudySpec.model_validate(doc)
    except ValidationError as e:
        problems = spec_errors(e, root, source)
        # a problem may come from an override rather than from a line of the file
        note = f"\n  (the spec as overridden by {list(overrides)})" if overrides else ""
        raise SpecError(f"{source} has {len(problems)} problem{'s' * (len(problems) != 1)}:\n  "
                        + "\n  ".join(problems) + note) from None
    spec._base_dir = base_dir
    spec._lm_eval_groups = groups
    spec.bind_spec_dir(base_dir)  # a model's `path: ./lm` resolves from the spec's folder too
    return spec


def load_spec(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> StudySpec:
    """Load a spec file; relative paths inside it resolve from its directory. ``overrides``:
    ``PATH=VALUE`` items applied before validation (``--set``, ``--model``, ``--revision``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {p}") from None
    return parse_spec(text, source=str(p), base_dir=str(p.resolve().parent), overrides=overrides)


def check_files(spec: StudySpec) -> list[str]:
    """Problems beyond the spec's shape, as ``yaml.path: message``: missing files, and
    verifier params the verifier does not accept (checked against its signature, without
    building it)."""
    problems = []
    for i, s in enumerate(spec.sources):
        if s.verifier is not None:
            problems += [f"sources[{i}].verifier.{p}" for p in s.verifier.check(spec.base_dir)]
    problems += _check_user_functions(spec)
    for i, s in enumerate(spec.sources):
        comp = getattr(s, "completions", None)
        for f in s.files(spec.paths):
            if not f.is_file():
                key = ("completions.path" if comp is not None and f == spec.resolve(comp.path)
                       else "path" if hasattr(s, "path") else "")
                problems.append(f"sources[{i}]{'.' + key if key else ''}: file not found: {f}")
    data = spec.reward.data if spec.reward is not None else None
    for f in data.files(spec.paths) if data is not None else []:
        if not f.is_file():
            problems.append(f"reward.data.path: file not found: {f}")
    if spec.decontaminate is not None:
        for i, c in enumerate(spec.decontaminate.corpus):
            if not spec.resolve(c).is_file():
                problems.append(f"decontaminate.corpus[{i}]: file not found: {spec.resolve(c)}")
    return problems


def _check_user_functions(spec: StudySpec) -> list[str]:
    """The parameters of each model and reward function the spec names fit what assay passes
    (:mod:`assay.binding`); the verifier functions are checked with the verifiers."""
    from assay.models.registry import BACKENDS
    from assay.reward.base import RewardModelError

    problems = []
    for i, s in enumerate(spec.sources):
        gen = getattr(s, "generate", None)
        if gen is None:
            continue
        # a backend kind naming user code says in which field; building it checks that code
        backend = BACKENDS.get(gen.model.kind).obj
        field = getattr(backend, "user_code_field", None)
        if field is not None:
            try:
                backend(gen.model)
            except SpecError as e:
                problems.append(f"sources[{i}].generate.model.{field}: {e}")
    for i, m in enumerate(spec.reward.models if spec.reward is not None else ()):
        field = getattr(m, "user_code_field", None)
        if field is not None:
            try:
                m.build(spec.paths)
            except (SpecError, RewardModelError) as e:
                problems.append(f"reward.models[{i}].{field}: {e}")
    return problems


def check_data(spec: StudySpec) -> tuple[list[str], list[str]]:
    """``(problems, warnings)`` found by reading each source's data (what ``assay validate``
    adds to :func:`check_files`), as ``yaml.path: message (fix)``: a ``fields`` path the
    records lack, an unknown split, a template or regex that fails on the records, a hub id
    without a pinned revision (a warning), a ``by:`` field the rows will not have."""
    problems: list[str] = []
    warnings: list[str] = []
    fields_of: dict[str, set[str] | None] = {}
    for i, s in enumerate(spec.sources):
        p, w = s.check(spec.paths)
        problems += [f"sources[{i}].{x}" for x in p]
        warnings += [f"sources[{i}].{x}" for x in w]
        if not p:
            try:
                fields_of[s.name] = s.row_fields(spec.paths)
            except SpecError as e:
                problems.append(f"sources[{i}]: {e}")
        problems += steps_before_grading(s, i)
    names = [s.name for s in spec.sources]

    def check_by(by: str, source: str, where: str) -> None:
        have = fields_of.get(source)
        if have is None or by in have:
            return  # unknown until the rows are built (a plugin source), or present
        meta = sorted(f for f in have if f.startswith("meta."))
        marks = sorted(f for f in have if f.startswith("markers."))
        problems.append(f"{where}: {by!r} is not a field of source {source!r}'s rows; they have "
                        f"meta fields {meta} and markers {marks} besides the row columns; fix: "
                        "name one of them (keep the record field in the rows with fields.meta, or "
                        "make it a marker with fields.markers)")

    problems += _check_gate_metrics(spec, fields_of)
    m = spec.measure
    if m.pass_at is not None and m.pass_at.by is not None:
        for n in m.pass_at.sources or names:
            check_by(m.pass_at.by, n, "measure.pass_at.by")
    if m.choice_accuracy is not None and m.choice_accuracy.by is not None:
        from assay.modes import default_sources

        for n in m.choice_accuracy.sources or default_sources(spec, "choice_accuracy"):
            check_by(m.choice_accuracy.by, n, "measure.choice_accuracy.by")
    for j, c in enumerate(m.compare):
        if c.by is not None:
            for n in (c.before, c.after):
                check_by(c.by, n, f"measure.compare[{j}].by")
    return problems, warnings


#: Markers the generate stage puts on each generated row.
GENERATION_MARKERS = ("prompt_tokens", "completion_tokens", "truncated")


def _check_gate_metrics(spec: StudySpec, fields_of: dict[str, set[str] | None]) -> list[str]:
    """A nightly gate naming a marker no source's rows will carry (a typo) is found before the
    night runs. Sources whose rows' markers only the run can tell (a plugin source, a user's
    verifier that may return markers) are not judged."""
    import difflib

    from assay.modes import needs_model

    if spec.nightly is None:
        return []
    scored = set()
    if spec.reward is not None and spec.reward.score is not None:
        scored = {f"rm:{e.name}" for e in spec.reward.scoring_models()}
    out = []
    for where, names in (("nightly.must_not_regress", spec.nightly.must_not_regress),
                         ("nightly.lower_is_better", spec.nightly.lower_is_better),
                         ("nightly.higher_is_better", spec.nightly.higher_is_better)):
        for i, name in enumerate(names):
            if name == "pass@1":
                continue
            marker = name.removeprefix("marker:")
            have: set[str] = set(scored)
            open_ended = False
            for s in spec.sources:
                fields = fields_of.get(s.name)
                if fields is None or (s.verifier is not None and s.verifier.open_markers):
                    open_ended = True
                    break
                have |= {f.removeprefix("markers.") for f in fields if f.startswith("markers.")}
                if needs_model(s, "generate"):
                    have |= set(GENERATION_MARKERS)
            if open_ended or marker in have:
                continue
            close = difflib.get_close_matches(marker, sorted(have | {"pass@1"}), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(f"{where}[{i}]: {name!r} is neither pass@1 nor a marker of the sources' "
                       f"rows{hint}; they carry markers {sorted(have)}")
    return out


#: Row fields a verifier writes: a step cannot read them, since steps choose the rows to grade.
GRADED_FIELDS = ("reward", "judge_status", "judge_name", "reason", "judge_meta")


def steps_before_grading(source: SourceSpec, i: int) -> list[str]:
    """A ``where`` step on a field that exists only after grading (or generation) would see
    every row unjudged: say so before the run, with the fix."""
    out = []
    generated = source.generate is not None
    for j, step in enumerate(source.steps):
        field = str(step.get("field", "")) if step.get("op") == "where" else ""
        head = field.partition(".")[0]
        if source.verifier is not None and head in GRADED_FIELDS:
            out.append(f"sources[{i}].steps[{j}].field: {field!r} exists only after grading, and "
                       "steps run before grading (they choose which rows are graded); fix: drop "
                       "the step, or filter the graded rows afterwards (rows/<source>.parquet, or "
                       "measure.select for RL data)")
        elif generated and head in ("final_text", "rollout_index"):
            out.append(f"sources[{i}].steps[{j}].field: {field!r} exists only after generation, "
                       "and steps choose the prompts to generate for; fix: filter on a record "
                       "field")
    return out


def json_schema(plugins: Sequence[str] = ()) -> JSONObject:
    """The JSON Schema of a spec file (what ``configs/schema.json`` holds), derived from the
    kind registries; ``plugins`` are imported first so their kinds appear too."""
    from assay.verify.registry import VERIFIERS

    if plugins:
        registry.import_plugins(list(plugins), base_dir=os.getcwd())
    refresh_models()
    schema = StudySpec.model_json_schema(mode="validation")
    kind = schema["$defs"]["VerifierSpec"]["properties"]["kind"]
    kind.pop("type", None)
    kind["anyOf"] = [{"enum": VERIFIERS.names()},
                     {"type": "string", "pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"}]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "assay study spec"
    return schema


def json_schema_text(plugins: Sequence[str] = ()) -> str:
    return json.dumps(json_schema(plugins), indent=2, sort_keys=True) + "\n"


def locate(problem: str, root: yaml.Node | None, source: str) -> str:
    """``source:line: problem`` for a ``yaml.path: message`` problem (the line of the deepest
    node on the path that exists); a problem that already starts with ``source`` is kept.

    Example:
        >>> root = yaml.compose("name: x\\nsources:\\n  - name: a\\n    steps: [{op: where}]\\n")
        >>> locate("sources[0].steps[0].field: no such field", root, "s.yaml")
        's.yaml:4: sources[0].steps[0].field: no such field'
    """
    if problem.startswith(source):
        return problem
    m = re.match(r"([A-Za-z_]\w*(?:\[\d+\]|\.[A-Za-z_]\w*)*): ", problem)
    if root is None or m is None:
        return f"{source}: {problem}"
    loc: list[str | int] = [int(p[1:-1])
 if p.startswith("[") else p
                      for p in re.findall(r"\[\d+\]|[A-Za-z_]\w*", m.group(1))]
    return f"{source}:{_node_line(root, loc)}: {problem}"
