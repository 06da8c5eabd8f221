"""The ``humaneval`` source kind: the built-in HumanEval problems answered by the seeded offline
policy (``assay.offline``) or, with ``generate:``, by a model; graded by sandboxed execution
unless told otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from assay.models.specs import GenerateSpec
from assay.paths import Paths
from assay.sources.base import SourceSpec
from assay.sources.registry import SOURCES
from assay.specbase import SpecModel
from assay.verify.spec import VerifierSpec

if TYPE_CHECKING:
    from assay.rows import Rows

#: Modules whose code decides the rows: their source is part of the build-rows key.
_CODE = ("assay.offline.problems", "assay.offline.policy")


class PolicySpec(SpecModel):
    """The seeded offline code policy (``assay.offline.seeded_code_policy``)."""

    k: int = Field(4, ge=1, le=1000, description="completions per problem")
    seed: int = Field(0, ge=0)
    skill: float = Field(0.5, ge=0.0, le=1.0, description="probability mass on correct code")


@SOURCES.register("humaneval")
class HumanEvalSource(SourceSpec):
    """The built-in HumanEval problems answered by the seeded offline policy."""

    kind: Literal["humaneval"]
    policy: PolicySpec = Field(default_factory=PolicySpec)
    verifier: VerifierSpec | None = Field(default_factory=lambda: VerifierSpec(kind="code_exec"))
    generate: GenerateSpec | None = Field(
        None, description="sample completions from a model instead of the seeded policy "
        "(the prompt is the problem text)")

    def build_rows(self, paths: Paths) -> Rows:
        from assay import offline
        from assay.builder import rows

        problems = offline.humaneval()
        if self.generate is not None:  # prompt rows: the generate stage fills in completions
            return rows(completions=[""] * len(problems), **problems.inputs())
        p = self.policy
        completions = offline.seeded_code_policy(problems, k=p.k, seed=p.seed, skill=p.skill)
        return rows(completions=completions, **problems.inputs())

    def identity(self, paths: Paths) -> dict[str, object]:
        from assay.hashing import code_checksum

        return {**super().identity(paths), "code": [code_checksum(m) for m in _CODE]}

