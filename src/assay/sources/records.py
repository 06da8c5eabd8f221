"""Records into rows: read JSONL/Parquet records and map their fields onto the rows contract.

One reader for every source kind that holds prompts and completions as records (file, hf_dataset).

A field map names where each role lives in a record; a name may be a dotted path into nested
records (``meta.subject`` reads ``record["meta"]["subject"]``; a key that itself contains a dot is
tried first). Numeric fields can become markers, and the record's other fields are kept in the
row's ``meta`` column (for steps and ``by:``) unless ``fields.meta`` lists which to keep.

Example:
    >>> r = rows_from_records([{"q": "2+2?", "a": "4", "s": 1, "info": {"level": 3}},
    ...                        {"q": "2+2?", "a": "5", "s": 0, "info": {"level": 3}}],
    ...                       FieldMap(prompt="q", completion="a", reward="s",
    ...                                markers=["info.level"]),
    ...                       where="demo")
    >>> len(r), r[1]["rollout_index"], r[1]["reward"], r[1]["markers"], r[1]["meta"]
    (2, 1, 0.0, {'info.level': 3.0}, {'info': {'level': 3}})
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import pyarrow as pa
from pydantic import Field, model_validator

from assay.errors import RowsError, RowsTypeError, SpecError
from assay.jsonl import iter_jsonl
from assay.models.specs import GenerateSpec, ModelEntry
from assay.paths import Paths
from assay.rows import ROW_GROUP_ROWS, ParquetRows, Rows
from assay.sources.base import Mode, SourceSpec
from assay.sources.choices import ChoicesSpec
from assay.sources.documents import PerplexitySpec
from assay.sources.fieldmap import FieldMap  # noqa: F401  (re-exported: its home was here)
from assay.sources.fieldpath import (  # noqa: F401  (re-exported: their home was here)
    _MISSING,
    field_problem,
    get_field,
    has_field,
    read_records,
)
from assay.specbase import SpecModel

if TYPE_CHECKING:
    from assay.builder import TaskBook
    from assay.sources.templates import PromptTemplate


def extract_reference(value: object, pattern: str, *, where: str) -> str:
    """Group 1 (else the whole match) of ``pattern`` searched in a reference text, stripped;
    ``^``/``$`` match at line ends. No match is an error, never an empty reference.

    Example:
        >>> extract_reference("3 + 4 = 7\\n#### 7", r"####\\s*(.+)$", where="demo")
        '7'
    """
    if not isinstance(value, str):
        raise SpecError(f"{where}: reference_regex needs text, the reference is "
                        f"{type(value).__name__} {value!r:.60}")
    m = re.search(pattern, value, re.MULTILINE)
    if m is None:
        raise SpecError(f"{where}: reference_regex {pattern!r} does not match the reference "
                        f"{value[-80:]!r}; fix the regex (group 1 is the answer) or the record")
    got = (m.group(1) if m.re.groups else m.group(0)).strip()
    if not got:
        raise SpecError(f"{where}: reference_regex {pattern!r} matched an empty answer in "
                        f"{value[-80:]!r}")
    return got


def join_completions(records: Sequence[Mapping[str, object]], task_ids: Sequence[str],
                     completions: Sequence[Mapping[str, object]], key: str, *, where: str,
                     where_completions: str, skip: frozenset[str] | set[str] = frozenset()
                     ) -> list[dict[str, object]]:
    """Each task's record merged with each of its completion records (matched on ``key``), in
    task order then completion order. A completion for an unknown task, a task without
    completions and a field both sides define are errors; completions of the tasks in ``skip``
    (cut by a ``limit``) are left out.

    Example:
        >>> join_completions([{"q": "1+1?"}, {"q": "2+2?"}], ["0", "1"],
        ...                  [{"task": 1, "out": "4"}, {"task": 0, "out": "2"}], "task",
        ...                  where="ds", where_completions="c.jsonl")
        [{'q': '1+1?', 'out': '2'}, {'q': '2+2?', 'out': '4'}]
    """
    index = {t: i for i, t in enumerate(task_ids)}
    per_task: list[list[Mapping[str, object]]] = [[] for _ in records]
    for j, c in enumerate(completions):
        if key not in c or c[key] is None:
            raise SpecError(f"{where_completions} record {j + 1}: field {key!r} (completions.key) "
                            "is missing; "
                            f"the record has {sorted(c)}")
        t = str(c[key])
        if t in skip:
            continue
        if t not in index:
            raise SpecError(f"{where_completions} record {j + 1}: {key} {t!r} is not a task of "
                            f"{where} "
                            f"(tasks: {list(task_ids[:5])}{'...' if len(task_ids) > 5 else ''})")
        per_task[index[t]].append(c)
    out = []
    for i, (rec, comps) in enumerate(zip(records, per_task)):
        if not comps:
            raise SpecError(f"{where}: task {task_ids[i]!r} has no completion in "
                            f"{where_completions}; give one, or keep only the tasks that have "
                            "completions (limit: or a slice)")
        for c in comps:
            clash = sorted((set(c) - {key}) & set(rec))
            if clash:
                raise SpecError(f"{where_completions}: fields {clash} are in both the "
                                f"completions and the records of {where}; rename them on one side")
            out.append({**rec, **{k: v for k, v in c.items() if k != key}})
    return out


def rows_from_records(records: Sequence[Mapping[str, object]], fields: FieldMap, *, where: str,
                      prompt_template: PromptTemplate | None = None,
                      reference_regex: str | None = None,
                      prompts_only: bool = False, start: int = 0,
                      book: TaskBook | None = None,
                      first_record: Mapping[str, object] | None = None) -> Rows:
    """Rows from prompt/completion records through a field mapping (one completion per record;
    records with the same task id or prompt group into one task). ``prompts_only``: the records
    hold prompts for the generate stage; each row's completion is left empty until it runs.

    ``prompt_template`` (a :class:`assay.sources.templates.PromptTemplate`) renders the prompt
    from the record instead of reading ``fields.prompt``; ``reference_regex`` reads the gold
    answer out of the reference field (group 1).

    Errors count records from 1 (``record 1`` is the first; in a JSONL file without blank
    lines, its line number); ``start``: how many records precede ``records``. ``book`` and
    ``first_record`` (the file's first record: whether a dotted field name is one key of it)
    continue an earlier batch of the same file (:func:`rows_in_batches`).
    """
    from assay.builder import rows

    prompts, completions, refs, tids, rewards, markers, metas = [], [], [], [], [], [], []
    mfields = fields.marker_fields()
    # a field the map consumes whole is not repeated in meta; a nested one keeps its parent
    roles = fields.roles()
    if prompts_only:
        roles.pop("fields.completion")
    head = first_record if first_record is not None else (records[0] if records else {})
    used = {p for p in roles.values() if "." not in p or p in head}
    if prompt_template is not None:
        used |= prompt_template.fields()
    need = ([] if prompts_only else [("completion", fields.completion)]) + (
        [] if prompt_template is not None else [("prompt", fields.prompt)])
    for i, rec in enumerate(records):
        at = f"{where} record {start + i + 1}"
        for role, name in need:
            v = get_field(rec, name)
            if v is _MISSING or v is None:
                raise SpecError(f"{at}: field {name!r} (fields.{role}) is missing; the record has "
                                f"{sorted(rec)}")
        prompts.append(prompt_template.render(rec, where=at) if prompt_template is not None
                       else get_field(rec, fields.prompt))
        completions.append("" if prompts_only else get_field(rec, fields.completion))
        if fields.reference is not None:
            ref = get_field(rec, fields.reference)
            if ref is _MISSING:
                raise SpecError(f"{at}: reference field {fields.reference!r} is missing; the "
                                f"record has {sorted(rec)}")
            if reference_regex is not None:
                ref = extract_reference(ref, reference_regex,
                                        where=f"{at} field {fields.reference!r}")
            refs.append(ref)
        if fields.task_id is not None:
            t = get_field(rec, fields.task_id)
            if t is _MISSING or t is None:
                raise SpecError(f"{at}: task id field {fields.task_id!r} is missing")
            tids.append(str(t))
        if fields.reward is not None:
            r = get_field(rec, fields.reward)
            if r is _MISSING:
                raise SpecError(f"{at}: reward field {fields.reward!r} is missing")
            rewards.append(r)
        mk = {}
        for name, path in mfields.items():
            v = get_field(rec, path)
            if v is _MISSING:
                raise SpecError(f"{at}: marker field {path!r} (fields.markers) is missing; the "
                                f"record has {sorted(rec)}")
            if v is None:
                continue  # a missing measurement: the marker is left out of this row
            if not isinstance(v, numbers.Real):
                raise SpecError(f"{at}: marker field {path!r} is {type(v).__name__} {v!r:.40}; "
                                "markers are numbers (convert the field, or drop it from "
                                "fields.markers)")
            mk[name] = v
        markers.append(mk)
        if fields.meta is not None:
            meta = {}
            for path in fields.meta:
                v = get_field(rec, path)
                if v is _MISSING:
                    raise SpecError(f"{at}: meta field {path!r} (fields.meta) is missing; the "
                                    f"record has {sorted(rec)}")
                meta[path] = v
        else:
            meta = {k: v for k, v in rec.items() if k not in used}
        metas.append(meta or None)
    if not prompts:
        raise SpecError(f"{where}: no records")
    try:
        return rows(prompts, completions, rewards if fields.reward is not None else None,
                    references=refs if fields.reference is not None else None,
                    task_ids=tids if fields.task_id is not None else None,
                    markers=markers if mfields else None, meta=metas,
                    record_names=lambda i: f"record {start + i + 1}", book=book)
    except (RowsError, RowsTypeError) as e:
        # rows() counts completions the way records are counted here (one per record)
        def num(m: re.Match[str], fmt: str) -> str:
            return fmt.format(n=start + int(m.group("i")) + 1, arg=m.groupdict().get("arg"))

        msg = re.sub(r"prompt (?P<i>\d+), completion 0", lambda m: num(m, "record {n}"), str(e))
        msg = re.sub(r"^(?P<arg>meta|markers|completions|prompts)\[(?P<i>\d+)\]",
                     lambda m: num(m, "record {n} ({arg})"), msg)
        # name the record's own field, not rows()'s argument ("reward" -> field 'score')
        own = {"reward": ("reward", fields.reward),
               "completions": ("completion", fields.completion),
               "prompts": ("prompt", fields.prompt),
               "references": ("reference", fields.reference)}
        m = re.match(r"^(\w+) \(record (\d+)\): ", msg)
        if m and own.get(m.group(1), (None, None))[1]:
            role, field = own[m.group(1)]
            msg = f"record {m.group(2)}, field {field!r} (fields.{role}): {msg[m.end():]}"
        m = re.match(r"^record (\d+) \((\w+)\)", msg)
        if m and own.get(m.group(2), (None, None))[1]:
            role, field = own[m.group(2)]
            msg = f"record {m.group(1)}, field {field!r} (fields.{role}){msg[m.end():]}"
        hint = (" (list the JSON fields to keep in fields.meta, or set fields.meta: [])"
                if "meta" in msg else "")
        raise SpecError(f"{where}: {msg}{hint}") from None


#: Records per batch when a file's rows are built a block at a time (:func:`record_batches`):
#: tens of MB of Python records (~2.5 KB a record) whatever the file's size (issue 50).
BATCH_RECORDS = 16_384


def record_batches(path: str | Path, fmt: str, size: int | None = None
                   ) -> Iterator[list[dict[str, object]]]:
    """The records of a JSONL or Parquet file, ``size`` at a time, in file order: those
    :func:`read_records` returns, never all held at once (a bad line raises as it does);
    ``size`` defaults to :data:`BATCH_RECORDS`.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = p.write_text("".join(f'{{"x": {i}}}\\n' for i in range(5)))
        >>> [len(b) for b in record_batches(p, "jsonl", 2)]
        [2, 2, 1]
    """
    size = size or BATCH_RECORDS
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetFile(path) as pf:
            for b in pf.iter_batches(batch_size=size, use_threads=False):
                yield b.to_pylist()
        return
    batch: list[dict[str, object]] = []
    for _, rec in iter_jsonl(path, error=SpecError):
        batch.append(rec)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _one_chunk(tables: list[pa.Table]) -> pa.Table:
    """``tables`` as one table of one chunk per column: the table one build of every row
    makes (a column's chunks decide its Parquet pages, so the stored bytes stay the same).
    Combined a column at a time, each batch's column released once copied (``tables`` is
    emptied of them), so the copy costs about one column, not a second table."""
    schema = tables[0].schema
    arrays = []
    for name in schema.names:
        arrays.append(pa.concat_arrays([c for t in tables for c in t.column(name).chunks]))
        # in place: the caller's list must not keep the copied column alive either
        tables[:] = [t.drop_columns([name]) for t in tables]
        # the copied-from buffers back to the system now, not at the allocator's leisure: the
        # next column's copy would otherwise stack on them
        pa.default_memory_pool().release_unused()
    return pa.Table.from_arrays(arrays, schema=schema)


# ------------------------------------------------------------------------------- record sources

#: ``assay validate`` lists at most this many bad records of one source.
MAX_RECORD_PROBLEMS = 20
#: Records checked together before a failing block is checked one record at a time.
_BLOCK = 256


class CompletionsSpec(SpecModel):
    """Completions kept apart from the problems (a JSONL/Parquet file), matched to them by task."""

    path: str = Field(description="JSONL or Parquet file; relative paths resolve from the spec "
                      "file")
    format: Literal["jsonl", "parquet"] | None = Field(None, description="default: from the suffix")
    key: str = Field("task_id", description="the completion records' field naming their task: the "
                     "problems' fields.task_id value, or the problem's index in the split when "
                     "fields.task_id is not set")


class RecordSourceSpec(SourceSpec):
    """A source whose rows come from records through a field map: ``file`` and ``hf_dataset``."""

    fields: FieldMap = Field(default_factory=FieldMap)
    prompt_template: str | None = Field(
        None, description="the prompt rendered from the record's fields: Jinja2 ({{ question }}) "
        "or str.format ({question}); e.g. a few-shot header then the question")
    template_format: Literal["jinja2", "format"] | None = Field(
        None, description="default: jinja2 when the template has {{ or {%, else format")
    reference_regex: str | None = Field(
        None, description="read the gold answer out of fields.reference: group 1 of the first "
        "match (GSM8K: '####\\\\s*(.+)$')")
    completions: CompletionsSpec | None = Field(
        None, description="completions in their own file, matched to the records by task")
    generate: GenerateSpec | None = Field(
        None, description="sample completions from a model (then records need only prompts)")
    choices: ChoicesSpec | None = Field(
        None, description="multiple choice scored by a model's log-likelihood of each choice "
        "(then records need the question, the choices and the answer)")
    perplexity: PerplexitySpec | None = Field(
        None, description="perplexity of a model on each record's document (rolling windows)")

    @property
    def mode(self) -> Mode:
        if self.choices is not None:
            return "choices"
        if self.perplexity is not None:
            return "perplexity"
        return super().mode

    @property
    def scoring_model(self) -> ModelEntry | None:
        scored = self.choices or self.perplexity
        return None if scored is None else scored.model

    @model_validator(mode="after")
    def _record_options(self) -> RecordSourceSpec:
        if self.choices is not None or self.perplexity is not None:
            mode = "choices" if self.choices is not None else "perplexity"
            clash = [n for n in ("generate", "completions", "verifier", "reference_regex",
                                 "choices" if mode == "perplexity" else "perplexity")
                     if getattr(self, n) is not None]
            if clash or self.fields.reward is not None:
                raise ValueError(f"{mode}: the model scores the records itself; drop "
                                 f"{clash or ['fields.reward']}")
        elif self.generate is not None:
            if self.completions is not None:
                raise ValueError("generate: and completions: both give the completions; keep one")
            if self.verifier is None or self.fields.reward is not None:
                raise ValueError("generate: completions made here need a verifier to grade them "
                                 "(fields.reward cannot hold scores of completions not yet made)")
        elif self.verifier is None and self.fields.reward is None:
            raise ValueError("give a verifier to grade the completions, or fields.reward naming "
                             "the field that already holds each completion's score")
        tmpl = self.template()  # None without prompt_template
        if tmpl is not None:
            try:
                tmpl.check()
            except SpecError as e:
                raise ValueError(str(e)) from None
        if self.reference_regex is not None:
            if self.fields.reference is None:
                raise ValueError("reference_regex reads the answer out of fields.reference: set "
                                 "fields.reference")
            try:
                re.compile(self.reference_regex)
            except re.error as e:
                raise ValueError(f"reference_regex {self.reference_regex!r} is not a regular "
                                 f"expression ({e})") from None
        if self.completions is not None and self.completions.format is None and \
                Path(self.completions.path).suffix.lower() not in (".jsonl", ".parquet"):
            raise ValueError(f"completions.path {self.completions.path!r}: cannot tell the "
                             "format from the suffix; set completions.format")
        return self

    def template(self) -> PromptTemplate | None:
        from assay.sources.templates import PromptTemplate

        return (None if self.prompt_template is None
                else PromptTemplate(self.prompt_template, self.template_format))

    def read_source_records(self, paths: Paths) -> list[dict[str, object]]:
        """The records this source reads (before the field map)."""
        raise NotImplementedError

    def _completion_records(self, paths: Paths) -> tuple[list[dict[str, object]], str]:
        assert self.completions is not None
        p = paths.resolve(self.completions.path)
        fmt = self.completions.format or p.suffix.lower().lstrip(".")
        return read_records(p, fmt), str(p)

    def join_ids(self, records: Sequence[Mapping[str, object]], where: str, start: int = 0
                 ) -> list[str]:
        """The task id each record is matched on: its ``fields.task_id`` value, else its index in
        the split (``start`` is the index of the first record)."""
        if self.fields.task_id is None:
            return [str(start + i) for i in range(len(records))]
        tids = []
        for i, r in enumerate(records):
            t = get_field(r, self.fields.task_id)
            if t is _MISSING or t is None:
                raise SpecError(f"{where} record {start + i + 1}: task id field "
                                f"{self.fields.task_id!r} is missing")
            tids.append(str(t))
        return tids

    def merged_records(self, paths: Paths, records: list[dict[str, object]], where: str,
                       skip: frozenset[str] | set[str] = frozenset()) -> list[dict[str, object]]:
        """The records with their completions joined in (when ``completions:`` is given);
        completions of the tasks in ``skip`` (cut by a limit) are left out."""
        if self.completions is None:
            return records
        tids = self.join_ids(records, where)
        if len(set(tids)) != len(tids):
            dup = next(t for t in tids if tids.count(t) > 1)
            raise SpecError(f"{where}: task id {dup!r} (fields.task_id) names several records; "
                            "completions are matched to one record per task")
        comps, cpath = self._completion_records(paths)
        return join_completions(records, tids, comps, self.completions.key, where=where,
                                where_completions=cpath, skip=skip)

    def rows_from(self, paths: Paths, records: list[dict[str, object]], where: str,
                  skip: frozenset[str] | set[str] = frozenset(), start: int = 0) -> Rows:
        if self.choices is not None:
            from assay.sources.choices import choice_rows

            return choice_rows(self, paths, records, where, start=start)
        if self.perplexity is not None:
            from assay.sources.documents import document_rows

            return document_rows(self, records, where, start=start)
        return rows_from_records(self.merged_records(paths, records, where, skip), self.fields,
                                 where=where, prompt_template=self.template(),
                                 reference_regex=self.reference_regex,
                                 prompts_only=self.generate is not None)

    def builds_in_batches(self) -> bool:
        """Whether each record makes its row on its own, so the rows can be built a batch of
        records at a time (no completions joined from another file, no choices or documents)."""
        return self.completions is None and self.choices is None and self.perplexity is None

    def _batch_tables(self, batches: Iterable[list[dict[str, object]]], where: str,
                      ) -> Iterator[pa.Table]:
        """Each batch's rows (an Arrow table), built as :meth:`rows_in_batches` says; what only
        the build needs (the book: a Python string per task) goes when the last is given."""
        from assay.builder import TaskBook

        book, start, head = TaskBook(), 0, None
        template = self.template()
        for recs in batches:
            head = recs[0] if head is None and recs else head
            r = rows_from_records(recs, self.fields, where=where, prompt_template=template,
                                  reference_regex=self.reference_regex,
                                  prompts_only=self.generate is not None, start=start,
                                  book=book, first_record=head)
            start += len(recs)
            del recs
            book.seal()  # a digest per task from here on, not its prompt (TaskBook)
            t = r.to_arrow()
            del r
            yield t
        if head is None:  # no records: the error one build gives
            rows_from_records([], self.fields, where=where)

    def rows_in_batches(self, batches: Iterable[list[dict[str, object]]], where: str, *,
                        keep: bool = True) -> Rows | None:
        """The rows :meth:`rows_from` makes of every record of ``batches`` (a file's, in
        order), built a batch at a time: tasks numbered and checked across batches as in one
        build, so the table (and its checksum) is the same. ``keep=False``: only check that
        they build (the data check before a run), holding no batch's rows. Only for a source
        that :meth:`builds_in_batches`; a bad record raises the error of its own batch."""
        tables = []
        for t in self._batch_tables(batches, where):
            if keep:
                tables.append(t)
            del t
        if not keep:
            return None
        return Rows(tables[0] if len(tables) == 1 else _one_chunk(tables))

    def parquet_in_batches(self, batches: Iterable[list[dict[str, object]]],
                           where: str) -> ParquetRows:
        """The rows of :meth:`rows_in_batches`, written a batch at a time into one Parquet
        file as they are built: the build holds a batch, never every row (issue 50); the
        rows, and their checksum, are the same."""
        import io

        import pyarrow.parquet as pq

        sink, writer, schema = io.BytesIO(), None, None
        for t in self._batch_tables(batches, where):
            if writer is None:
                schema = t.schema
                writer = pq.ParquetWriter(sink, schema, compression="zstd")
            writer.write_table(t, row_group_size=ROW_GROUP_ROWS)
            del t
        assert writer is not None and schema is not None  # no records raised in the build
        writer.close()
        return ParquetRows(sink.getvalue(), schema)

    def files(self, paths: Paths) -> list[Path]:
        out = [paths.resolve(self.completions.path)] if self.completions is not None else []
        if self.choices is not None and self.choices.fewshot.path is not None:
            out.append(paths.resolve(self.choices.fewshot.path))
        return out

    def identity(self, paths: Paths) -> dict[str, object]:
        from assay.hashing import file_checksum

        out = super().identity(paths)
        for mode in ("choices", "perplexity"):  # unset: existing sources keep their keys
            if out.get(mode, 0) is None:
                out.pop(mode)

        def entry(key: str) -> dict[str, object]:
            # a set sub-model's entry of model_dump(mode="json") (the identity): a dict
            return cast("dict[str, object]", out[key])

        if self.perplexity is not None:  # documents: the model keys the score-documents stage
            out["perplexity"] = {k: v for k, v in entry("perplexity").items() if k != "model"}
        if self.choices is not None:  # prompt rows: the model keys the score-choices stage
            choices = out["choices"] = {k: v for k, v in entry("choices").items() if k != "model"}
            if self.choices.fewshot.path is not None:
                # choices.fewshot is a FewShotSpec: its dump is a dict
                cast("dict[str, object]", choices["fewshot"])["path"] = file_checksum(
                    paths.resolve(self.choices.fewshot.path))
        if self.completions is not None:
            out["completions"] = {**entry("completions"),
                                  "path": file_checksum(paths.resolve(self.completions.path))}
        return out

    def check_records(self, records: list[dict[str, object]], paths: Paths, where: str
                      ) -> list[str]:
        """Problems of the field map against the records, as ``yaml.path: message`` (relative to
        the source entry): a field path no record has, a template field or regex that fails."""
        problems: list[str] = []
        if not records:
            return ["(data): no records"]
        first = records[0]
        if self.completions is not None:
            try:
                comps, cpath = self._completion_records(paths)
            except SpecError as e:
                return [f"completions.path: {e}"]
            if comps:
                clash = sorted((set(comps[0]) - {self.completions.key}) & set(first))
                first = {**first, **{k: v for k, v in comps[0].items()
                                     if k != self.completions.key}}
                if clash:
                    problems.append(f"completions: fields {clash} are in both the completions "
                                    "and the records")
        roles = self.fields.roles()
        if self.prompt_template is not None:
            roles.pop("fields.prompt", None)
        if self.generate is not None or self.choices is not None or self.perplexity is not None:
            roles.pop("fields.completion", None)
        if self.perplexity is not None:
            roles.pop("fields.prompt", None)
        for role, path in roles.items():
            why = field_problem(first, path)
            if why is not None:
                problems.append(f"{role}: {why}; fix: name one of the record's fields "
                                "(a dotted path reads nested records)")
        for path in self.fields.meta or ():
            why = field_problem(first, path)
            if why is not None:
                problems.append(f"fields.meta: {why}")
        if problems:
            return problems
        def key(e: Exception) -> str:
            msg = str(e)
            return "prompt_template" if "prompt_template" in msg else (
                "reference_regex" if "reference_regex" in msg else
                "choices" if "(choices." in msg or ": choices." in msg else
                "perplexity" if ": perplexity." in msg or "(perplexity." in msg else "fields")

        try:
            self.rows_from(paths, records, where)
        except SpecError as e:
            first_error = e
        else:
            return problems
        # a bad record: check each record on its own, so one validate lists them all (bounded)
        try:
            merged = self.merged_records(paths, records, where)
        except SpecError as e:
            return problems + [f"{key(e)}: {e}"]
        bad: list[str] = []
        template = self.template()

        def fails(lo: int, hi: int) -> SpecError | None:
            try:
                if self.choices is not None or self.perplexity is not None:
                    self.rows_from(paths, merged[lo:hi], where, start=lo)
                else:
                    rows_from_records(merged[lo:hi], self.fields, where=where,
                                      prompt_template=template,
                                      reference_regex=self.reference_regex,
                                      prompts_only=self.generate is not None, start=lo)
            except SpecError as e:
                return e
            return None

        # blocks first (a record at a time costs ~2 ms), then each record of a failing block
        for lo in range(0, len(merged), _BLOCK):
            hi = min(lo + _BLOCK, len(merged))
            if fails(lo, hi) is None:
                continue
            for i in range(lo, hi):
                err = fails(i, i + 1)
                # a problem of the whole source (a missing split) fails every record alike
                if err is not None and f"{key(err)}: {err}" not in bad:
                    bad.append(f"{key(err)}: {err}")
                if len(bad) == MAX_RECORD_PROBLEMS:
                    return problems + bad + [f"(data): stopped after {MAX_RECORD_PROBLEMS} bad "
                                             "records; fix these and validate again"]
        # none alone is bad: records that conflict with each other (one task id, two references)
        return problems + (bad or [f"{key(first_error)}: {first_error}"])

    def row_fields_of(self, records: list[dict[str, object]], paths: Paths, where: str) -> set[str]:
        """The names ``by:`` and ``where`` can read in this source's rows."""
        from assay.rows import COLUMNS

        # completions are matched to every record, so then every record is read
        r = self.rows_from(paths, records[:50] if self.completions is None else records, where)
        names = set(COLUMNS)
        def walk(d: Mapping[str, object], prefix: str, depth: int) -> None:
            for k, v in d.items():
                names.update({prefix + k, f"meta.{prefix}{k}"})
                if isinstance(v, Mapping) and depth < 4:
                    walk(v, f"{prefix}{k}.", depth + 1)

        for row in r[:200]:
            walk(row["meta"] or {}, "", 0)
            for k in row["markers"]:
                names |= {k, f"markers.{k}"}
        return names
