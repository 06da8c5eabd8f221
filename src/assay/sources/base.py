"""What every source kind has (a name, row steps, a verifier) and must do (build rows, say
what determines them), so the build-rows stage needs no ``if kind ==`` dispatch.

Example:
    >>> from assay.sources.registry import SOURCES
    >>> "humaneval" in SOURCES and "file" in SOURCES
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import Field, field_validator

from assay.models.specs import GenerateSpec
from assay.paths import Paths
from assay.specbase import SpecModel
from assay.steps import ROW_OPS, check_steps
from assay.verify.spec import VerifierSpec

if TYPE_CHECKING:
    from assay.rows import ParquetRows, Rows


#: How a source's rows get their verdicts, said once (lm-eval's ``output_type``):
#: ``scores`` given with the completions; ``verify`` given completions graded by a verifier;
#: ``generate`` completions asked of the model under test, then graded; ``choices`` and
#: ``perplexity`` scored by a model's log-likelihoods (no completions, no verifier).
Mode = Literal["scores", "verify", "generate", "choices", "perplexity"]


class LoglikScoring(Protocol):
    """A log-likelihood mode's scoring entry (``choices:`` / ``perplexity:`` of any source kind
    in that mode): the model that scores, and the text between a context and each choice."""

    @property
    def model(self) -> object: ...

    @property
    def target_delimiter(self) -> str: ...


class ChoicesSource(Protocol):
    """A source in ``choices`` mode, as the score-choices stage reads it."""

    @property
    def choices(self) -> LoglikScoring | None: ...


class PerplexitySource(Protocol):
    """A source in ``perplexity`` mode, as the score-documents stage reads it."""

    @property
    def perplexity(self) -> Any: ...


class SourceSpec(SpecModel):
    """Base of a source entry. Subclasses add ``kind: Literal[...]`` and their own fields."""

    #: The kind is an lm-eval task: its rows carry lm-eval's own per-document items, so the
    #: measure stage reports every metric the task lists (whatever ``measure:`` asks) and its
    #: choice items are keyed on the task's files. Declared by the kind, not found from its name.
    lm_eval_task: ClassVar[bool] = False

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="arm name used by measure/report")
    steps: list[dict[str, object]] = Field(
        default_factory=list,
        description="row filters/slices as data: {op: slice|where|sample, ...}; slice and sample "
        "act on tasks (all completions of a task stay together), where on row fields "
        "(cmp defaults to ==)",
    )
    verifier: VerifierSpec | None = None
    generate: GenerateSpec | None = Field(
        None, description="ask a model for the completions (the generate stage); the source "
        "gives the prompts")

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[dict[str, object]]) -> list[dict[str, object]]:
        return check_steps(v, ROW_OPS, used_by="a source's rows")

    @property
    def mode(self) -> Mode:
        """How this source's rows get their verdicts (:data:`Mode`); the stages, the planner
        and the report read it here instead of probing optional fields."""
        if self.generate is not None:
            return "generate"
        return "verify" if self.verifier is not None else "scores"

    @property
    def scoring_model(self) -> Any:
        """The model that scores a ``choices`` or ``perplexity`` source's records, else None."""
        return None

    def build_rows(self, paths: Paths) -> Rows:
        """The source's ungraded (or given-score) rows."""
        raise NotImplementedError

    def build(self, paths: Paths) -> tuple[Rows, dict[str, object]]:
        """The rows and what was read to make them (shown in the report's sources table:
        a dataset's revision and the content checksum of its records); ``{}`` when nothing
        beyond the spec needs saying."""
        return self.build_rows(paths), {}

    def build_stored(self, paths: Paths) -> tuple[Rows | ParquetRows, dict[str, object]]:
        """:meth:`build`, for the build-rows stage, which stores the rows: a source that can
        write them as it builds returns them encoded (:class:`~assay.rows.ParquetRows`), so
        no process holds every row."""
        return self.build(paths)

    def check(self, paths: Paths) -> tuple[list[str], list[str]]:
        """``(problems, warnings)`` found by reading the source's data, each as
        ``yaml.path: message`` relative to the source entry (``assay validate`` prefixes
        ``sources[i].``); missing :meth:`files` are reported before this runs."""
        return [], []

    def row_fields(self, paths: Paths) -> set[str] | None:
        """Field names the source's rows will have (columns, ``meta.<f>`` and ``<f>``,
        ``markers.<m>`` and ``<m>``), for checking ``by:`` before a run; None when only
        building the rows would tell."""
        return None

    def identity(self, paths: Paths) -> dict[str, object]:
        """What determines the rows (the build-rows cache key): the definition without name,
        steps, verifier and generate (the generate stage keys on its own), with file contents
        hashed in place of paths."""
        ident = self.model_dump(mode="json", exclude={"name", "steps", "verifier", "generate"})
        if self.generate is not None:  # prompt rows, not completions
            ident["prompts_only"] = True
        return ident

    def files(self, paths: Paths) -> list[Path]:
        """Data files the source reads (checked by ``assay validate``, hashed by the checksum)."""
        return []
