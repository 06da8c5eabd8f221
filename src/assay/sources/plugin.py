"""A source kind named ``module:callable`` in a spec: the callable returns the source's rows.

It is called with ``params`` as keyword arguments and returns ``assay.Rows``, dict rows or records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from assay.paths import Paths
from assay.sources.base import SourceSpec
from assay.specbase import version_field

if TYPE_CHECKING:
    from assay.rows import Rows


class PluginSource(SourceSpec):
    """A source built by your own function: ``kind: mypkg.sources:load`` with ``params``."""

    kind: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
                      description="'package.module:callable' returning rows")
    params: dict[str, object] = Field(default_factory=dict)
    version: str | None = version_field("the built rows")

    @field_validator("generate")
    @classmethod
    def _no_generate(cls, v: object) -> object:
        if v is not None:
            raise ValueError("a plugin source returns its rows with their completions; to have a "
                             "model generate them, use a file or hf_dataset source of prompts")
        return v

    def _callable(self, paths: Paths) -> Any:
        from assay.registry import load_callable

        return load_callable(self.kind, what=f"source {self.name!r} kind",
                             base_dir=paths.base_dir)

    def build_rows(self, paths: Paths) -> Rows:
        from assay.errors import SpecError
        from assay.rows import Rows, as_table

        out = self._callable(paths)(**self.params)
        try:
            return out if isinstance(out, Rows) else Rows(as_table(out))
        except Exception as e:
            raise SpecError(
                f"source {self.name!r}: {self.kind} returned something that is not "
                f"rows ({type(e).__name__}: {e}); return assay.rows(...) or dict rows"
            ) from None

    def identity(self, paths: Paths) -> dict[str, object]:
        from assay.hashing import code_identity

        fn = None if self.version is not None else self._callable(paths)
        return {**super().identity(paths),
                "code": code_identity(fn, version=self.version, what=f"source {self.name!r}",
                                      base_dir=paths.base_dir)}
