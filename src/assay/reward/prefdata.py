"""The preference data a reward model is audited on: the built-in diagnostic set, or your own pairs
from a JSONL/Parquet file or a ``datasets`` dataset, as validated ``Pair`` views per axis.

Each record becomes a :class:`~assay.data.Pair` with lineage; a bad record is an error naming the
file, the record index and the field, raised before anything is audited.

Example:
    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> recs = [{"prompt": f"Q{i}", "chosen": "good", "rejected": "bad", "subset": "chat"}
    ...         for i in range(3)]
    >>> _ = (d / "prefs.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in recs))
    >>> spec = FilePreferences(kind="file", path=str(d / "prefs.jsonl"), fields={"axis": "subset"})
    >>> got = spec.load(None)
    >>> {k: len(v) for k, v in got.views.items()}, got.seed_fallback
    ({'chat': 3}, 3)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, field_validator

from assay.data.items import Pair
from assay.errors import DataError, SpecError
from assay.hashing import content_hash, dir_digest, file_checksum
from assay.paths import Paths
from assay.reward.registry import PREFERENCE_DATA
from assay.specbase import SpecModel
from assay.steps import VIEW_OPS, check_steps

if TYPE_CHECKING:
    from assay.data import DataView

#: Axis of every pair when the field map names no axis field.
DEFAULT_AXIS = "all"


def _steps(v: list[dict[str, object]]) -> list[dict[str, object]]:
    return check_steps(v, VIEW_OPS)


class PreferenceFields(SpecModel):
    """Which record fields hold the prompt, the two responses, the axis and the seed id."""

    prompt: str = "prompt"
    chosen: str = "chosen"
    rejected: str = "rejected"
    axis: str | None = Field(
        None, description="field naming the pair's axis (default: one axis, 'all')"
    )
    seed_id: str | None = Field(
        None, description="field holding the seed id (the unit of independence); missing ids "
        "fall back to the prompt, so the effective n is the number of distinct prompts")


@dataclass(frozen=True)
class PreferenceViews:
    """What was loaded: one DataView per axis, plus the facts the report states about it."""

    views: dict[str, DataView]
    n_records: int
    seed_fallback: int
    where: str  # the data's name in the report: a file name or hub id, never a machine's path
    stated: bool = True  # the report says where the pairs came from (not for the built-in set)

    def notes(self) -> list[str]:
        """Report notes: where the pairs came from and, if ids fell back, what n means."""
        if not self.stated:
            return []
        out = [f"preference data: {self.n_records} pairs from {self.where}, "
               f"{len(self.views)} axes"]
        if self.seed_fallback:
            prompts = sum(len({it.prompt_text for it in v}) for v in self.views.values())
            out.append(
                f"{self.seed_fallback} of {self.n_records} records have no seed id: their "
                "seed falls back to the prompt, so the effective n is the number of distinct "
                f"prompts ({prompts} over all axes), not the number of pairs"
            )
        return out


class PreferenceData(SpecModel):
    steps: list[dict[str, object]] = Field(
        default_factory=list, description="DataView derivation steps (where/slice/sample/"
        "collapse_duplicates), applied to the whole set before it is split by axis")
    dimensions: list[str] | None = Field(None, description="audit only these axes (default: all)")

    @field_validator("steps")
    @classmethod
    def _valid_steps(cls, v: list[dict[str, object]]) -> list[dict[str, object]]:
        return _steps(v)

    def load(self, paths: Paths | None) -> PreferenceViews:  # pragma: no cover - abstract
        raise NotImplementedError

    def identity(self, paths: Paths) -> dict[str, object]:
        """What replaces fields of the entry in the spec's checksum: file contents in place of
        paths (``{}``: the entry as written says it all)."""
        return {}

    def files(self, paths: Paths) -> list[Path]:
        """Data files the entry reads (``assay validate`` reports a missing one)."""
        return []

    def _pick(self, views: dict[str, DataView], what: str) -> dict[str, DataView]:
        dims = self.dimensions or list(views)
        unknown = [x for x in dims if x not in views]
        if unknown:
            raise SpecError(f"reward.data.dimensions: unknown {unknown}; {what} has {list(views)}")
        return {k: views[k] for k in dims}


@PREFERENCE_DATA.register("builtin")
class BuiltinPreferences(PreferenceData):
    """The built-in diagnostic set (14 dimensions); ``steps`` apply to every dimension."""

    kind: Literal["builtin"] = "builtin"
    dataset: Literal["diagnostic_v3"] = "diagnostic_v3"

    def load(self, paths: Paths | None) -> PreferenceViews:
        from assay.data import apply_derivation, load_diagnostic_v3

        views = self._pick(load_diagnostic_v3(), "the set")
        views = {k: apply_derivation(v, self.steps) if self.steps else v for k, v in views.items()}
        return PreferenceViews(views, sum(len(v) for v in views.values()), 0, self.dataset,
                               stated=False)


class _RecordPreferences(PreferenceData):
    fields: PreferenceFields = Field(default_factory=PreferenceFields)

    def records(self, paths: Paths | None) -> tuple[list[dict[str, object]], str, str]:
        raise NotImplementedError  # pragma: no cover - each kind reads its own

    def load(self, paths: Paths | None) -> PreferenceViews:
        from assay.data import DataView, apply_derivation

        records, where, builder = self.records(paths)
        pairs, fallback = pairs_from_records(records, self.fields, where=where, builder_id=builder)
        view = DataView(pairs, name=builder)
        if self.steps:
            view = apply_derivation(view, self.steps)
        by_axis = {it.axis for it in view if isinstance(it, Pair)}  # records make only pairs
        views = {a: view.where("axis", "==", a) if len(by_axis) > 1 else view
                 for a in sorted(by_axis)}
        views = self._pick(views, where)
        if not views:
            raise SpecError(f"reward.data: no pairs left from {where} after steps {self.steps}")
        # the report names the file, not its path: equal data give equal reports anywhere
        return PreferenceViews(views, len(pairs), fallback, builder)


@PREFERENCE_DATA.register("file")
class FilePreferences(_RecordPreferences):
    """Your own pairs in a JSONL or Parquet file (relative to the spec), with a field map."""

    kind: Literal["file"]
    path: str = Field(description="JSONL or Parquet file of preference records")
    format: Literal["jsonl", "parquet"] | None = Field(None, description="default: from the suffix")

    def file(self, paths: Paths | None) -> Path:
        return paths.resolve(self.path) if paths is not None else Path(self.path)

    def identity(self, paths: Paths) -> dict[str, object]:
        f = self.file(paths)
        return {"path": file_checksum(f)} if f.is_file() else {}

    def files(self, paths: Paths) -> list[Path]:
        return [self.file(paths)]

    def records(self, paths: Paths | None) -> tuple[list[dict[str, object]], str, str]:
        from assay.sources.records import read_records

        path = self.file(paths)
        fmt = self.format or path.suffix.lower().lstrip(".")
        if fmt not in ("jsonl", "parquet"):
            raise SpecError(f"reward.data.path {str(path)!r}: cannot tell the format from the "
                            "suffix; set format: jsonl or format: parquet")
        if not path.is_file():
            raise SpecError(f"reward.data.path: file not found: {path}")
        return read_records(path, fmt), str(path), f"file:{path.name}"


@PREFERENCE_DATA.register("hf_dataset")
class HubPreferences(_RecordPreferences):
    """A ``datasets`` dataset: a ``save_to_disk`` folder, a data folder or a hub id (pin
    ``revision``; served from the local cache unless ``allow_download``)."""

    #: imported before the study's nodes run side by side (assay.libguard)
    WARM_IMPORTS: ClassVar[tuple[str, ...]] = ("datasets",)

    kind: Literal["hf_dataset"]
    path: str = Field(description="hub id, save_to_disk folder, or folder of data files")
    name: str | None = Field(None, description="dataset configuration name")
    split: str | None = Field(None, description="the split to read; required when the data has "
                              "more than one, refused when the data does not have it")
    revision: str | None = Field(None, description="pin a commit hash for a reproducible key")
    allow_download: bool = False

    def identity(self, paths: Paths) -> dict[str, object]:
        local = paths.resolve(self.path)  # a local dataset: its files, not its path
        if not local.exists():
            return {}
        return {"path": dir_digest(local) if local.is_dir() else file_checksum(local)}

    def records(self, paths: Paths | None) -> tuple[list[dict[str, object]], str, str]:
        from assay.sources.hub import is_local, load_dataset_records

        local = paths.resolve(self.path) if paths is not None else Path(self.path)
        target = str(local) if is_local(local) else self.path
        where = f"reward.data ({self.path}" + (f", split {self.split})" if self.split else ")")
        got = load_dataset_records(target, name=self.name, split=self.split,
                                   revision=self.revision, allow_download=self.allow_download,
                                   where=where)
        return got.records, where, f"hf:{self.path}"


def pairs_from_records(records: Sequence[Mapping[str, object]], fields: PreferenceFields, *,
                       where: str, builder_id: str) -> tuple[list[Pair], int]:
    """Validated Pairs from preference records, and how many fell back to the prompt as seed.

    Every record is checked before any pair is returned; a bad one is a SpecError naming
    ``where`` (the file), the record index and the field.

    Example:
        >>> ps, fb = pairs_from_records([{"q": "Q", "c": "yes", "r": "no", "id": 7}],
        ...     PreferenceFields(prompt="q", chosen="c", rejected="r", seed_id="id"),
        ...     where="demo", builder_id="demo")
        >>> ps[0].seed_id, ps[0].axis, fb
        ('7', 'all', 0)
    """
    from assay.data import make_pair

    pairs = []
    fallback = 0
    for i, rec in enumerate(records):
        def text(role: str, name: str, rec: Mapping[str, object] = rec, i: int = i) -> str:
            if name not in rec or rec[name] is None:
                raise SpecError(f"{where} record {i + 1}: field {name!r} (fields.{role}) is "
                                "missing; "
                                f"the record has {sorted(rec)}")
            v = rec[name]
            if not isinstance(v, str) or not v.strip():
                raise SpecError(f"{where} record {i + 1}: field {name!r} (fields.{role}) must be "
                                f"non-empty text, got {type(v).__name__} {v!r:.60}")
            return v

        prompt = text("prompt", fields.prompt)
        chosen = text("chosen", fields.chosen)
        rejected = text("rejected", fields.rejected)
        axis = text("axis", fields.axis) if fields.axis is not None else DEFAULT_AXIS
        sid = rec.get(fields.seed_id) if fields.seed_id is not None else None
        if isinstance(sid, bool) or (sid is not None and not isinstance(sid, (str, int))):
            raise SpecError(f"{where} record {i + 1}: field {fields.seed_id!r} "
                            "(fields.seed_id) must "
                            f"be a string or an integer id, got {type(sid).__name__}")
        if sid is None or (isinstance(sid, str) and not sid.strip()):
            sid = content_hash(prompt, "prompt")
            fallback += 1
        try:
            pairs.append(make_pair(prompt, chosen, rejected, axis, seed_id=str(sid),
                                   builder_id=builder_id))
        except DataError as e:
            field = fields.rejected if "same text" in str(e) else fields.prompt
            raise SpecError(f"{where} record {i + 1}: field {field!r}: {e}") from None
    if not pairs:
        raise SpecError(f"{where}: no records")
    return pairs, fallback

