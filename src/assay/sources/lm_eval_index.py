"""lm-eval's task index, built once per process and shared by every ``lm_eval`` source; the
lookup that refuses unknown names (and a group or tag a spec did not expand) before any data
loads; and the guard that turns whatever a task's own Python code raises (``exit()`` included)
into one spec error.

Why one per process: a ``TaskManager`` walks and parses every YAML it indexes (52-54 s over
lm-eval's installed tasks); a spec with one source per MMLU subject paid that 57 times.

Example:
    >>> with task_code("source 's' (lm-eval task 't')", "load the task"):
    ...     raise SystemExit(3)
    Traceback (most recent call last):
    assay.errors.SpecError: source 's' (lm-eval task 't'): the task's own code called exit(3) ...
"""

from __future__ import annotations

import contextlib
import difflib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from assay.errors import SpecError

if TYPE_CHECKING:
    # lm-eval ships no type information (no py.typed): these name what the values are
    from lm_eval.api.instance import Instance
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._index import Entry

#: What an index was built from (:func:`fingerprint`): lm-eval's version, or each YAML's
#: (path, size, mtime_ns) under a user's folder; None when lm-eval is not installed.
Fingerprint: TypeAlias = "str | tuple[tuple[str, int, int], ...] | None"
#: A task's requests as ``(doc_id, doc, instances)`` in document order: the document is
#: lm-eval's (a dataset record), only handed back to the task's own methods and read for meta.
Docs: TypeAlias = "list[tuple[int, object, list[Instance]]]"

_LOCK = threading.Lock()
#: index folder (None: lm-eval's installed tasks) -> (what it was built from, the TaskManager)
_MANAGERS: dict[str | None, tuple[Fingerprint, TaskManager]] = {}


def fingerprint(folder: Path | None) -> Fingerprint:
    """What the index was built from: lm-eval's version for its installed tasks; the name,
    size and time of every YAML under a user's folder (a task added or renamed re-indexes; a
    task's contents lm-eval re-reads on each load anyway)."""
    if folder is None:
        from importlib import metadata

        try:
            return metadata.version("lm_eval")
        except metadata.PackageNotFoundError:
            return None
    out: list[tuple[str, int, int]] = []
    for p in sorted(folder.rglob("*.yaml")):
        with contextlib.suppress(OSError):
            st = p.stat()
            out.append((p.relative_to(folder).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(out)


def task_manager(folder: Path | None) -> TaskManager:
    """The process's ``TaskManager`` over ``folder`` alone (None: lm-eval's installed tasks),
    built on first use and whenever the folder's YAML files changed."""
    key = None if folder is None else str(folder)
    seen = fingerprint(folder)
    with _LOCK:
        have = _MANAGERS.get(key)
        if have is not None and have[0] == seen:
            return have[1]
        from lm_eval.tasks import TaskManager

        tm = TaskManager(include_path=None if folder is None else str(folder),
                         include_defaults=folder is None)
        _MANAGERS[key] = (seen, tm)
        return tm


def forget() -> None:
    """Drop every cached index (tests; a long-lived process after upgrading lm-eval)."""
    with _LOCK:
        _MANAGERS.clear()


def task_entry(tm: TaskManager, name: str, where: str) -> Entry:
    """The index entry of one task named ``name``; a group, a tag or an unknown name is a
    :class:`SpecError` naming ``where`` — read from the index, before any task loads data (a
    spec has already expanded a group into its members: :mod:`assay.sources.lm_eval_group`)."""
    from lm_eval.tasks._index import Kind

    entry = tm.task_index.get(name)
    if entry is None:
        near = difflib.get_close_matches(name, list(tm.task_index), n=3)
        raise SpecError(f"{where}: lm-eval could not load the task: no task, group or tag is "
                        f"named {name!r} in its index"
                        + (f" (did you mean {', '.join(map(repr, near))}?)" if near else ""))
    if entry.kind in (Kind.GROUP, Kind.TAG):
        if entry.kind == Kind.GROUP:
            members = [m if isinstance(m, str) else
                       (m.get("task") or m.get("group")) if isinstance(m, dict) else repr(m)
                       for m in _as_list((entry.cfg or {}).get("task"))]
        else:
            members = sorted(entry.tags)
        kind = "group" if entry.kind == Kind.GROUP else "tag"
        raise SpecError(f"{where}: {name!r} is an lm-eval {kind} of {len(members)} tasks "
                        f"({', '.join(map(str, members[:6]))}{', ...' if len(members) > 6 else ''}"
                        "): a spec expands it into one source per task (read the spec with "
                        "assay.load_spec or assay validate)")
    return entry


def yaml_config(entry: Entry) -> dict[str, Any] | None:
    """A YAML task's indexed config (includes merged, ``!function`` unresolved); None for a
    Python task class, whose output type and metrics only its loaded object knows."""
    from lm_eval.tasks._index import Kind

    return entry.cfg if entry.kind == Kind.TASK and isinstance(entry.cfg, dict) else None


def _as_list(v: object) -> list[object]:
    return [] if v is None else list(v) if isinstance(v, list | tuple) else [v]


@contextlib.contextmanager
def task_code(where: str, what: str) -> Iterator[None]:
    """Run lm-eval and the task's own Python code (``!function`` modules, ``process_docs``,
    a task class): any exception, ``SystemExit`` and other ``BaseException`` included, becomes
    one :class:`SpecError` naming ``where``; only ``KeyboardInterrupt`` passes (the user's)."""
    try:
        yield
    except (SpecError, KeyboardInterrupt):
        raise
    except SystemExit as e:
        raise SpecError(f"{where}: the task's own code called exit({e.code!r:.80}) when "
                        f"lm-eval tried to {what}") from None
    except BaseException as e:  # noqa: BLE001 (task code is user code: any failure is its own)
        raise SpecError(f"{where}: lm-eval could not {what}: "
                        f"{type(e).__name__}: {e}") from None


def doc_meta(doc: object) -> dict[str, object] | None:
    """A document's scalar fields, kept as the row's ``meta`` (for ``by:`` and ``where``)."""
    import math
    from collections.abc import Mapping

    if not isinstance(doc, Mapping):
        return None
    out: dict[str, object] = {
        str(k): v for k, v in doc.items()
        if isinstance(v, str | int | bool) or (isinstance(v, float) and math.isfinite(v))}
    return out or None
