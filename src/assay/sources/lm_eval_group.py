"""lm-eval groups and tags as sources: a ``kind: lm_eval`` source whose ``task`` is a group or
a tag expands, from lm-eval's index and before any data loads, into one source per leaf task.

Why at spec load: every stage, cache key and measurement is per source, so a member is an
ordinary lm_eval source named ``<source>.<task>`` with its own rows and measurements; what the
group adds is its aggregate (its ``aggregate_metric_list``), computed in the measure stage by
:func:`assay.measure.lm_eval_means.lm_eval_group` from what :func:`expand_groups` records.

Example:
    >>> doc = {"name": "x", "sources": [{"name": "s", "kind": "file", "path": "p.jsonl"}]}
    >>> new, groups = expand_groups(doc, None)
    >>> new == doc, groups
    (True, [])
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from assay.errors import SpecError

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager  # no type information of its own (no py.typed)

#: the lists of source names a spec may hold: a group's name there stands for its members
_SOURCE_LISTS = (("measure", "pass_at", "sources"), ("measure", "eval_variance", "sources"),
                 ("measure", "choice_accuracy", "sources"), ("measure", "perplexity", "sources"),
                 ("decontaminate", "sources"), ("reward", "score", "sources"))


@dataclass(frozen=True)
class GroupNode:
    """One lm-eval group (or tag) as its index says: its aggregate_metric_list (None: lm-eval
    gives no aggregate), and its children, leaf task names or subgroups, in lm-eval's order."""

    name: str
    kind: str  # "group" or "tag"
    aggregate: tuple[dict[str, object], ...] | None
    children: tuple[str | GroupNode, ...]

    def leaves(self) -> list[str]:
        """Every leaf task under this node, depth first, each once (lm-eval's ``get_all_tasks``
        order)."""
        out: dict[str, None] = {}
        for c in self.children:
            for t in ([c] if isinstance(c, str) else c.leaves()):
                out.setdefault(t)
        return list(out)

    def nodes(self) -> list[GroupNode]:
        """This node and every subgroup under it, depth first."""
        return [self] + [n for c in self.children if isinstance(c, GroupNode) for n in c.nodes()]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind,
                "aggregate": None if self.aggregate is None else list(self.aggregate),
                "children": [c if isinstance(c, str) else c.to_dict() for c in self.children]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupNode:
        agg = d.get("aggregate")
        return cls(d["name"], d["kind"], None if agg is None else tuple(agg),
                   tuple(c if isinstance(c, str) else cls.from_dict(c) for c in d["children"]))


def member_name(source: str, task: str) -> str:
    """The member source's name: the group source's name and the task's (characters a source
    name may not hold become ``_``)."""
    return f"{source}.{re.sub(r'[^A-Za-z0-9_.-]', '_', task)}"


def group_tree(tm: TaskManager, name: str, where: str, _seen: tuple[str, ...] = ()
               ) -> GroupNode | None:
    """The group or tag ``name`` as a tree read from lm-eval's index (no task loads); None when
    ``name`` is not a group or tag. A member the index cannot place (an inline config, an
    unknown name, a cycle) is a :class:`SpecError` naming it."""
    from lm_eval.tasks._index import Kind

    entry = tm.task_index.get(name)
    if entry is None or entry.kind not in (Kind.GROUP, Kind.TAG):
        return None
    if name in _seen:
        raise SpecError(f"{where}: lm-eval group {name!r} contains itself "
                        f"({' -> '.join((*_seen, name))})")
    if entry.kind == Kind.TAG:  # a tag's members are tasks (the index tags only tasks)
        return GroupNode(name, "tag", None, tuple(sorted(entry.tags)))
    cfg = entry.cfg or {}
    children: list[str | GroupNode] = []
    members = cfg.get("task")
    for m in members if isinstance(members, list) else [] if members is None else [members]:
        if not isinstance(m, str):
            label = (m.get("task") or m.get("group")) if isinstance(m, dict) else m
            raise SpecError(f"{where}: member {label!r:.60} of lm-eval group {name!r} is an "
                            "inline config (its own overrides of a task); not supported: give "
                            "the task a YAML of its own and name it in the group")
        sub = tm.task_index.get(m)
        if sub is None:
            raise SpecError(f"{where}: member {m!r} of lm-eval group {name!r} is not in "
                            "lm-eval's index")
        if sub.kind == Kind.TAG:  # lm-eval adds a tag's tasks as the group's own children
            children += sorted(sub.tags)
        elif sub.kind == Kind.GROUP:
            children.append(group_tree(tm, m, where, (*_seen, name)))  # type: ignore[arg-type]
        else:
            children.append(m)
    agg = cfg.get("aggregate_metric_list")
    aggs = agg if isinstance(agg, list) else [] if agg is None else [agg]
    for i, a in enumerate(aggs):
        why = _aggregate_refusal(a)
        if why is not None:
            raise SpecError(f"{where}: lm-eval group {name!r}: aggregate_metric_list[{i}]"
                            f"{why}; lm-eval refuses the group")
    return GroupNode(name, "group",
                     tuple(dict(a) for a in aggs if isinstance(a, dict)) or None,
                     tuple(children))


#: the fields of an aggregate_metric_list entry (lm-eval's AggMetricConfig)
_AGG_FIELDS = ("metric", "filter_list", "aggregation", "weight_by_size")


def _aggregate_refusal(entry: object) -> str | None:
    """Why lm-eval 0.4.13 refuses a group's ``aggregate_metric_list`` entry when it loads the
    group (``AggMetricConfig``: a field it has not, no ``metric``, an ``aggregation`` other
    than "mean" or a ``!function``), as the end of a message; None when it takes it. A
    ``!function`` (an unresolved path here) it takes and ignores: ``Group.aggregate`` means
    the members' values whatever the entry names, and so does assay."""
    if not isinstance(entry, dict):
        return f" is {entry!r:.40}, not a mapping"
    extra = [k for k in entry if k not in _AGG_FIELDS]
    if extra:
        return f".{extra[0]}: not a field lm-eval knows (it has {', '.join(_AGG_FIELDS)})"
    if not isinstance(entry.get("metric"), str):
        return ".metric: missing"
    agg = entry.get("aggregation", "mean")
    if agg != "mean" and not callable(agg) and "/" not in str(agg):
        return (f".aggregation: {agg!r}; lm-eval takes only 'mean' (or a !function, which it "
                "ignores) for a group")
    return None


def _member_refusals(tm: TaskManager, tree: GroupNode, mode: str, where: str) -> list[str]:
    """What the index already says against each leaf (its output type, its metrics), every
    leaf checked, before any of them loads data."""
    from assay.sources.lm_eval import _refuse_output_type
    from assay.sources.lm_eval_index import yaml_config
    from assay.sources.lm_eval_metrics import config_refusal, output_type

    want = {"generate": "generate_until", "choices": "multiple_choice",
            "perplexity": "loglikelihood_rolling"}[mode]
    out = []
    for leaf in tree.leaves():
        at = f"{where}, member {leaf!r}"
        entry = tm.task_index.get(leaf)
        if entry is None:
            out.append(f"{at}: not in lm-eval's index")
            continue
        cfg = yaml_config(entry)
        if cfg is None:
            continue  # a Python task class: its loaded object decides, when the member builds
        try:
            _refuse_output_type(output_type(cfg), want, at)
        except SpecError as e:
            out.append(str(e))
            continue
        why = config_refusal(cfg)
        if why is not None:
            out.append(f"{at}: {why}; refused")
    return out


def _mode_of(src: Mapping[str, object]) -> str | None:
    modes = [m for m in ("generate", "choices", "perplexity") if src.get(m) is not None]
    return modes[0] if len(modes) == 1 else None


def expand_groups(doc: dict[str, object], base_dir: str | None
                  ) -> tuple[dict[str, object], list[dict[str, object]]]:
    """The spec document with each ``lm_eval`` source naming a group or tag replaced by one
    source per leaf task (and the group's name in the spec's lists of sources by its members),
    and what each expanded source was: ``{"source", "mode", "tree", "members"}``. A source the
    index cannot read (lm-eval missing, no such folder, an unknown name) is left for its own
    check to report. Raises :class:`SpecError` listing every member refused."""
    sources = doc.get("sources")
    if not isinstance(sources, list):
        return doc, []
    new: list[object] = []
    groups: list[dict[str, object]] = []
    by_name: dict[str, list[str]] = {}  # a group source's name -> its members' names
    problems: list[str] = []
    for i, src in enumerate(sources):
        found = _expanded(src, base_dir, f"sources[{i}].task")
        if found is None:
            new.append(src)
            continue
        tree, refused, metrics = found
        if refused:
            problems += refused
            new.append(src)
            continue
        members = {t: member_name(src["name"], t) for t in tree.leaves()}
        new += [{**src, "name": members[t], "task": t} for t in tree.leaves()]
        groups.append({"source": src["name"], "mode": _mode_of(src), "tree": tree.to_dict(),
                       "members": members, "metrics": metrics})
        by_name[src["name"]] = list(members.values())
    if problems:
        raise SpecError("\n".join(problems))
    if not groups:
        return doc, []
    out = {**doc, "sources": new}
    for path in _SOURCE_LISTS:
        parent: object = out
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        lst = parent.get(path[-1]) if isinstance(parent, dict) else None
        if isinstance(lst, list) and any(isinstance(n, str) and n in by_name for n in lst):
            _set(out, path, [m for n in lst for m in (by_name.get(n, [n])
                                                       if isinstance(n, str) else [n])])
    return out, groups


def _metric_names(base_dir: str | None, src: Mapping[str, object], tree: GroupNode
                  ) -> dict[str, list[str] | None]:
    """Per leaf, the metrics its ``metric_list`` names (what lm-eval reports for it, and so
    what the group's members list); None where the index cannot say (lm-eval's defaults)."""
    from assay.sources.lm_eval_index import yaml_config

    tm = _index_of(base_dir, src)
    out: dict[str, list[str] | None] = {}
    for leaf in tree.leaves():
        cfg = yaml_config(tm.task_index[leaf]) or {}
        ml = cfg.get("metric_list")
        names = [m.get("metric") for m in ml if isinstance(m, dict)] if isinstance(ml, list) \
            else None
        out[leaf] = [n for n in names if isinstance(n, str)] if names else None
    return out


def _folder_of(base_dir: str | None, src: Mapping[str, object]) -> Path | None:
    from assay.paths import SpecPaths

    inc = src.get("include_path")
    if not isinstance(inc, str):
        return None
    p = SpecPaths(base_dir).resolve(inc)
    return p.parent if p.is_file() else p


def _index_of(base_dir: str | None, src: Mapping[str, object]) -> TaskManager:
    from assay.sources.lm_eval_index import task_manager

    return task_manager(_folder_of(base_dir, src))


#: bump when what :func:`_expanded` records or refuses changes (older records are then never
#: read; 2: an aggregate_metric_list entry lm-eval refuses is refused)
_MEMO_VERSION = 2


def cache_dir() -> Path:
    """Where assay keeps what it derived once per machine and may derive again at will:
    ``$ASSAY_CACHE_DIR``, else ``$XDG_CACHE_HOME/assay``, else ``~/.cache/assay``."""
    env = os.environ.get("ASSAY_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "assay"


def _memo_path(base_dir: str | None, src: Mapping[str, object], where_field: str) -> Path | None:
    """The file recording one source's expansion, named by everything it depends on: the
    index's fingerprint (lm-eval's version, or every YAML's name, size and time under the
    source's folder), the task, the source's name and mode; None when the index has none."""
    from assay.sources.lm_eval_index import fingerprint

    folder = _folder_of(base_dir, src)
    seen = fingerprint(folder)
    if seen is None:
        return None
    key = json.dumps([_MEMO_VERSION, None if folder is None else str(folder.resolve()), seen,
                      src["task"], src["name"], _mode_of(src), where_field], default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()
    return cache_dir() / "lm-eval-groups" / f"{digest}.json"


def _names_a_task(src: object) -> TypeGuard[dict[str, object]]:
    """Whether a spec's raw source entry is of a kind that is an lm-eval task (its spec class
    declares ``lm_eval_task``) and names its ``task`` and ``name``."""
    from assay.sources.registry import SOURCES

    if not isinstance(src, dict):
        return False
    kind = src.get("kind")
    return (isinstance(kind, str) and kind in SOURCES and SOURCES.get(kind).obj.lm_eval_task
            and isinstance(src.get("task"), str) and isinstance(src.get("name"), str))


def _expanded(src: object, base_dir: str | None, where_field: str
              ) -> tuple[GroupNode, list[str], dict[str, list[str] | None]] | None:
    """:func:`_expand_one` and the members' metric names, remembered on disk: reading a spec
    whose ``lm_eval`` task is a plain task (the usual case) or a group seen before costs a file
    read, not lm-eval's index (seconds to build: a fully cached rerun would pay it at every
    start). A group that is refused, or an index that raises, is not remembered."""
    if not _names_a_task(src):
        return None
    memo = None
    with contextlib.suppress(Exception):  # lm-eval missing, a folder gone: _expand_one says
        memo = _memo_path(base_dir, src, where_field)
    if memo is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            rec = json.loads(memo.read_text(encoding="utf-8"))
            if rec["tree"] is None:
                return None
            return GroupNode.from_dict(rec["tree"]), [], rec["metrics"]
    found = _expand_one(src, base_dir, where_field)
    tree, refused = found if found is not None else (None, [])
    metrics = (_metric_names(base_dir, src, tree) if tree is not None and not refused
               else {})
    if memo is not None and not refused:
        rec = {"tree": None if tree is None else tree.to_dict(), "metrics": metrics}
        with contextlib.suppress(OSError):  # a read-only home: derived again next time
            from assay.store_files import atomic_write

            memo.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(memo, json.dumps(rec, sort_keys=True).encode(), durable=False)
    return None if tree is None else (tree, refused, metrics)


def _set(doc: dict[str, Any], path: tuple[str, ...], value: object) -> None:
    """Set ``doc[path]`` in copies of the mappings along the path (the caller's stay as
    they were)."""
    node = doc
    for key in path[:-1]:
        node[key] = dict(node[key])
        node = node[key]
    node[path[-1]] = value


def _expand_one(src: object, base_dir: str | None, where_field: str
                ) -> tuple[GroupNode, list[str]] | None:
    """The tree of one source's group and the refusals of its members; None when the source
    is not an lm_eval source naming a group or tag the index can read."""
    if not _names_a_task(src):
        return None
    mode = _mode_of(src)
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        return None  # the source's check says how to install it
    from assay.paths import SpecPaths
    from assay.sources.lm_eval_index import task_code

    inc = src.get("include_path")
    if isinstance(inc, str) and not SpecPaths(base_dir).resolve(inc).exists():
        return None  # the source's check names the missing folder
    where = f"{where_field}: source {src['name']!r} (lm-eval group {src['task']!r})"
    with task_code(where, "index the tasks"):
        tm = _index_of(base_dir, src)
    tree = group_tree(tm, str(src["task"]), where)  # a str (_names_a_task)
    if tree is None:
        return None
    if mode is None:
        return tree, []  # the source's own validation says which mode to give
    return tree, _member_refusals(tm, tree, mode, where)
