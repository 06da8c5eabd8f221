"""A record source's field map: which record fields hold the prompt, the completion, the
reference and the extras (``fields:`` of a file, hf_dataset or choices source).

Example:
    >>> FieldMap(prompt="q", markers=["len"]).roles()
    {'fields.prompt': 'q', 'fields.completion': 'completion', 'fields.markers.len': 'len'}
"""

from __future__ import annotations

from pydantic import Field, field_validator

from assay.specbase import SpecModel


class FieldMap(SpecModel):
    """Which record fields hold the prompt, the completion, and the optional extras. Every name
    may be a dotted path into nested records."""

    prompt: str = "prompt"
    completion: str = "completion"
    reference: str | None = None
    task_id: str | None = None
    reward: str | None = None
    markers: list[str] | dict[str, str] = Field(
        default_factory=list,
        description="numeric record fields that become markers: a list of fields (the marker is "
        "named like the field) or {marker name: field}")
    meta: list[str] | None = Field(
        None, description="record fields kept in the row's meta column (default: every field "
        "the map does not name)")

    @field_validator("markers")
    @classmethod
    def _markers(cls, v: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        names = list(v) if isinstance(v, dict) else v
        if len(set(names)) != len(names):
            raise ValueError(f"marker names repeat: {names}")
        return v

    def marker_fields(self) -> dict[str, str]:
        """``{marker name: record field}``."""
        return (dict(self.markers) if isinstance(self.markers, dict)
                else {m: m for m in self.markers})

    def roles(self) -> dict[str, str]:
        """``{"fields.<role>": path}`` for every role the map names (markers included)."""
        out = {f"fields.{r}": getattr(self, r)
               for r in ("prompt", "completion", "reference", "task_id", "reward")
               if getattr(self, r) is not None}
        for name, path in self.marker_fields().items():
            out[f"fields.markers.{name}"] = path
        return out
