"""What the sample viewer shows, as data: one summary line per task and the rows in chunks,
written as ``.js`` files that a page opened from the file system can load with ``<script>``.

Every string is JSON with ``<``, ``>``, ``&``, U+2028 and U+2029 escaped (``\\u003c``...), so no
text from a row can close a script tag or start markup; the page inserts it as text only.

Example:
    >>> js_call("meta", {"t": "</script><b>"})
    'assayData("meta",{"t":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"});\\n'
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from assay.errors import AssayError
from assay.jsontypes import JSONValue

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: Rows per data chunk (cut at task boundaries): a task page loads one chunk, a search all.
CHUNK_ROWS = 2000

#: Task flag bits (the page filters on them).
FLAGS = {"failed": 1, "truncated": 2, "gen_error": 4, "unjudged": 8, "guard": 16, "passed": 32}

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


class ViewError(AssayError, FileNotFoundError):
    """A folder is not a finished run (no report.json) or a nightly root with nights."""


class RowDoc(TypedDict):
    """One graded row as the page shows it (:func:`row_doc`)."""

    i: int | None
    text: str | None
    reward: float | None
    status: str | None
    judge: str | None
    reason: str | None
    markers: dict[str, float | None]
    judge_meta: object
    meta: object
    privileged: object
    #: the generate stage's note (``privileged.generation``), when the row has one
    generation: NotRequired[Mapping[str, object] | None]


class TaskDoc(TypedDict):
    """One task as the page shows it (:func:`task_docs`): its prompt and its rows."""

    id: str
    messages: list[Mapping[str, object]]
    category: str | None
    rows: list[RowDoc]


def safe_json(obj: object) -> str:
    """JSON that is inert inside a script: ASCII only, ``<>&`` as ``\\u`` escapes, no NaN.

    Example:
        >>> safe_json({"a": "<b>&\\u2028"})
        '{"a":"\\\\u003cb\\\\u003e\\\\u0026\\\\u2028"}'
    """
    text = json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":"),
                      sort_keys=True)
    # <, > and & occur only inside JSON strings, where the \\u form means the same character
    for ch, esc in _ESCAPES.items():
        text = text.replace(ch, esc)
    return text


def js_call(name: str, obj: object) -> str:
    """One data file's text: ``assayData(name, obj);``."""
    return f"assayData({safe_json(name)},{safe_json(obj)});\n"


def _loads(v: object) -> object:
    if v is None or not isinstance(v, str):
        return v
    return _parse(v)


@functools.lru_cache(maxsize=4096)
def _parse(v: str) -> JSONValue:
    # a task's k rows mostly carry the same meta and reference: parse each text once; callers
    # never change what this returns (row_doc copies the privileged dict before popping)
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v  # shown as the text it is


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def read_rows(path: str | Path) -> pa.Table:
    """A run's rows file, read with pyarrow (any extra columns are kept). One file: ParquetFile,
    not read_table, which goes through pyarrow.dataset and imports pandas (start-up time that a
    cached rerun's page would pay for nothing)."""
    return pq.ParquetFile(path).read()


def categories_by(report: Mapping[str, Any], source: str) -> str | None:
    """The field the report groups this source's tasks by (``measure.pass_at.by``), if any."""
    for m in report.get("measurements", []):
        if m.get("kind") == "pass_at_by" and m.get("source") == source and m.get("by"):
            return str(m["by"])
    return None


def _category_values(table: pa.Table, by: str | None) -> list[str | None]:
    if by is None:
        return [None] * table.num_rows
    from assay.rowfields import field_values

    try:
        vals = field_values(table, by)
    except AssayError:
        return [None] * table.num_rows
    return [None if v is None else str(v) for v in vals]


def row_doc(r: Mapping[str, Any]) -> RowDoc:
    """One graded row as the page shows it (the JSON columns parsed; the prompt is per task)."""
    markers = dict(r.get("markers") or [])
    priv = _loads(r.get("privileged"))
    generation = None
    if isinstance(priv, dict):
        priv = dict(priv)
        generation = priv.pop("generation", None)
    # the page's JSON sorts keys (safe_json): the order they are set in here is not written
    doc: RowDoc = {"i": r.get("rollout_index"), "text": r.get("final_text"),
                   "reward": _finite(r.get("reward")),
                   "status": r.get("judge_status"), "judge": r.get("judge_name"),
                   "reason": r.get("reason"),
                   "markers": {k: _finite(v) for k, v in sorted(markers.items())},
                   "judge_meta": _loads(r.get("judge_meta")), "meta": _loads(r.get("meta")),
                   "privileged": priv}
    if isinstance(priv, dict):
        doc["generation"] = generation
    return doc


def task_docs(table: pa.Table, by: str | None = None) -> list[TaskDoc]:
    """The rows grouped by task in order of first appearance: ``{"id", "messages", "prompt",
    "category", "rows": [row_doc...]}``."""
    cats = _category_values(table, by)
    cols = [c for c in ("task_id", "prompt", "messages", "final_text", "reward", "judge_status",
                        "judge_name", "reason", "markers", "judge_meta", "meta", "privileged",
                        "rollout_index") if c in table.column_names]
    data = {c: table.column(c).to_pylist() for c in cols}
    tasks: dict[str, TaskDoc] = {}
    for i in range(table.num_rows):
        r = {c: data[c][i] for c in cols}
        tid = str(r["task_id"])
        t = tasks.get(tid)
        if t is None:
            msgs = r.get("messages") or [{"role": "user", "content": r.get("prompt") or ""}]
            t = tasks[tid] = {"id": tid, "messages": msgs, "category": cats[i], "rows": []}
        t["rows"].append(row_doc(r))
    return list(tasks.values())


def _guarded(row: Mapping[str, object]) -> bool:
    jm = row.get("judge_meta")
    return isinstance(jm, Mapping) and isinstance(jm.get("guard"), str)


def task_line(t: TaskDoc, rm_names: Sequence[str]) -> list[object]:
    """The task's summary line (see :data:`TASK_COLUMNS`).

    Example:
        >>> t = {"id": "t1", "category": None, "messages": [{"role": "user", "content": "2+2?"}],
        ...      "rows": [{"reward": 1.0, "status": "ok", "text": "4", "markers": {}},
        ...               {"reward": 0.0, "status": "ok", "text": "5", "markers": {}}]}
        >>> task_line(t, [])
        ['t1', 1, 2, 0.5, None, 1, 1.0, 0.5, '2+2?', []]
    """
    rows = t["rows"]
    binary = [r["reward"] for r in rows if r["reward"] in (0.0, 1.0)]
    n_pass = sum(1 for b in binary if b == 1.0)
    rewards = [r["reward"] for r in rows if r["reward"] is not None]
    flags = 0
    if binary and n_pass < len(binary):
        flags |= FLAGS["failed"]
    if binary and n_pass == len(binary):
        flags |= FLAGS["passed"]
    if any((r["markers"].get("truncated") or 0) > 0
           or (r.get("generation") or {}).get("finish_reason") == "length" for r in rows):
        flags |= FLAGS["truncated"]
    if any(r["status"] == "gen_error" for r in rows):
        flags |= FLAGS["gen_error"]
    if any(r["reward"] is None and r["status"] != "gen_error" for r in rows):
        flags |= FLAGS["unjudged"]
    if any(_guarded(r) for r in rows):
        flags |= FLAGS["guard"]
    rm = []
    for name in rm_names:
        key = f"rm:{name}"
        vals = [v for r in rows if (v := r["markers"].get(key)) is not None]
        rm.append(round(sum(vals) / len(vals), 6) if vals else None)
    prompt = "\n".join(str(m.get("content") or "") for m in t["messages"]
                       if m.get("role") != "system")
    length = sum(len(r["text"] or "") for r in rows) / max(len(rows), 1)
    mean = round(sum(rewards) / len(rewards), 6) if rewards else None
    return [t["id"], n_pass, len(binary), mean,
            t["category"], flags, round(length, 1),
            (round(n_pass / len(binary), 6) if binary else None), prompt[:240], rm]


#: The fields of a task line, in order.
TASK_COLUMNS = ["id", "n_pass", "n_binary", "mean_reward", "category", "flags", "length",
                "pass_rate", "preview", "rm"]


def rm_names(table: pa.Table) -> list[str]:
    """The reward models that scored these rows (markers ``rm:<name>``)."""
    if "markers" not in table.column_names:
        return []
    names: set[str] = set()
    for m in table.column("markers").to_pylist():
        for k, _ in m or ():
            if k.startswith("rm:"):
                names.add(k[3:])
    return sorted(names)


def write_source(out: Path, index: int, name: str, table: pa.Table, by: str | None,
                 chunk_rows: int = CHUNK_ROWS,
                 tasks: list[TaskDoc] | None = None) -> dict[str, object]:
    """Write ``s<index>-tasks.js`` and ``s<index>-rows-<j>.js`` into ``out``; return the source's
    entry for the page's meta (files, counts, the reward models, the category field).
    ``tasks``: :func:`task_docs` of the table, when the caller has them already."""
    tasks = task_docs(table, by) if tasks is None else tasks
    models = rm_names(table)
    lines: list[list[object]] = []
    chunks: list[str] = []
    cur: list[TaskDoc] = []
    cur_rows = 0

    def flush() -> None:
        nonlocal cur, cur_rows
        if cur:
            j = len(chunks)
            fname = f"s{index}-rows-{j}.js"
            (out / fname).write_text(js_call(f"rows:{index}:{j}", cur), encoding="ascii")
            chunks.append(fname)
            cur, cur_rows = [], 0

    for t in tasks:
        if cur_rows and cur_rows + len(t["rows"]) > chunk_rows:
            flush()
        line = task_line(t, models)
        line.append(len(chunks))  # the chunk that holds the task's rows
        lines.append(line)
        cur.append(t)
        cur_rows += len(t["rows"])
    flush()
    fname = f"s{index}-tasks.js"
    (out / fname).write_text(js_call(f"tasks:{index}", {"columns": [*TASK_COLUMNS, "chunk"],
                                                       "lines": lines}), encoding="ascii")
    return {"name": name, "index": index, "tasks_file": fname, "chunks": chunks,
            "n_tasks": len(tasks), "n_rows": table.num_rows, "rm": models, "by": by}


#: The columns :func:`task_docs` reads (the others are never shown).
_DOC_COLUMNS = ("task_id", "prompt", "messages", "final_text", "reward", "judge_status",
                "judge_name", "reason", "markers", "judge_meta", "meta", "privileged",
                "rollout_index")


def _chunk_plan(counts: Sequence[int], chunk_rows: int) -> list[tuple[int, int]]:
    """The tasks ``[t0, t1)`` of each rows chunk, cut as :func:`write_source` cuts them: a
    chunk closes before the task that would take it past ``chunk_rows`` (one task never splits).

    Example:
        >>> _chunk_plan([3, 3, 3, 5, 1], 6)
        [(0, 2), (2, 3), (3, 5)]
    """
    plan, t0, cur = [], 0, 0
    for t, n in enumerate(counts):
        if cur and cur + n > chunk_rows:
            plan.append((t0, t))
            t0, cur = t, 0
        cur += n
    if cur or t0 < len(counts):
        plan.append((t0, len(counts)))
    return plan


def _task_categories(pf: pq.ParquetFile, by: str | None, first: npt.NDArray[np.intp]
                     ) -> list[str | None]:
    """The category of each task (its first row's), reading only the columns ``by`` can name."""
    if by is None:
        return [None] * len(first)
    names = pf.schema_arrow.names
    cols = list(dict.fromkeys(c for c in (by.partition(".")[0], "meta", "markers") if c in names))
    vals = _category_values(pf.read(columns=cols), by)
    return [vals[i] for i in first]


def write_source_file(out: Path, index: int, name: str, path: str | Path, by: str | None,
                      chunk_rows: int = CHUNK_ROWS) -> dict[str, object]:
    """:func:`write_source` for a rows Parquet file, holding one chunk's rows at a time (not
    every row as Python objects: 2-3 KB a row): the same files, byte for byte.

    Tasks are grouped in order of first appearance (``dictionary_encode`` numbers them so);
    when each task's rows are contiguous (what a run writes) the file is read in batches, else
    the row order of each chunk is taken from the whole Arrow table.

    Example:
        >>> import tempfile, assay
        >>> d = Path(tempfile.mkdtemp())
        >>> t = assay.rows(["q"], [["a", "b"]], [[1.0, 0.0]]).to_arrow()
        >>> pq.write_table(t, d / "r.parquet")
        >>> write_source_file(d, 0, "r", d / "r.parquet", None)["chunks"]
        ['s0-rows-0.js']
    """
    import numpy as np
    import pyarrow.compute as pc

    pf = pq.ParquetFile(path)
    n_rows = pf.metadata.num_rows
    enc = pc.dictionary_encode(pf.read(columns=["task_id"]).column("task_id").combine_chunks())
    codes = enc.indices.to_numpy(zero_copy_only=False)
    n_tasks = len(enc.dictionary)
    counts = np.bincount(codes, minlength=n_tasks)
    first = np.unique(codes, return_index=True)[1] if n_rows else np.zeros(0, dtype=np.int64)
    cats = _task_categories(pf, by, first)
    cols = [c for c in _DOC_COLUMNS if c in pf.schema_arrow.names]
    models: set[str] = set()
    if "markers" in cols:
        for b in pf.iter_batches(columns=["markers"], batch_size=chunk_rows):
            models.update(k[3:] for m in b.column(0).to_pylist() for k, _ in m or ()
                          if k.startswith("rm:"))
    rm = sorted(models)
    plan = _chunk_plan(counts.tolist(), chunk_rows)
    contiguous = bool(n_rows == 0 or (codes[1:] >= codes[:-1]).all())
    if contiguous:
        batches = pf.iter_batches(columns=cols, batch_size=chunk_rows)
        pending: list[pa.RecordBatch] = []
        have = 0

        def rows_of(n: int) -> pa.Table:
            nonlocal have, pending
            while have < n:
                b = next(batches)
                pending.append(b)
                have += b.num_rows
            t = pa.Table.from_batches(pending)
            pending = [] if have == n else t.slice(n).combine_chunks().to_batches()
            have -= n
            return t.slice(0, n)
    else:
        whole = pf.read(columns=cols)
        order = np.argsort(codes, kind="stable")
        at = 0

        def rows_of(n: int) -> pa.Table:
            nonlocal at
            t = whole.take(pa.array(order[at:at + n]))
            at += n
            return t

    head = "assayData(" + safe_json(f"tasks:{index}") + ",{\"columns\":" + \
        safe_json([*TASK_COLUMNS, "chunk"]) + ",\"lines\":["
    chunks: list[str] = []
    fname = f"s{index}-tasks.js"
    with open(out / fname, "w", encoding="ascii") as lines_file:
        lines_file.write(head)
        sep = ""
        for j, (t0, t1) in enumerate(plan):
            tasks = task_docs(rows_of(int(counts[t0:t1].sum())))
            assert len(tasks) == t1 - t0, "a chunk's rows are exactly its tasks'"
            for t, cat in zip(tasks, cats[t0:t1]):
                t["category"] = cat
                line = task_line(t, rm)
                line.append(j)
                lines_file.write(sep + safe_json(line))
                sep = ","
            chunk = f"s{index}-rows-{j}.js"
            (out / chunk).write_text(js_call(f"rows:{index}:{j}", tasks), encoding="ascii")
            chunks.append(chunk)
        lines_file.write("]});\n")
    return {"name": name, "index": index, "tasks_file": fname, "chunks": chunks,
            "n_tasks": n_tasks, "n_rows": n_rows, "rm": rm, "by": by}
