"""Store upkeep for a store that lives for months: size (du), integrity (verify), cleanup (gc).

``gc`` keeps what the kept run directories reference and what was used since the oldest of them.

What a run references: its ``run.json`` lists the cache keys of its stages (``stage_keys``); each
names a ref ``assay-stage/<key>``, whose pointer document names the output blobs. Documents are
scanned for store keys, so everything reachable from a live ref (an index manifest's shards, a
pointer's outputs) stays. Refs record their last use in their mtime (``Store.get_ref`` touches
them), so caches that are not stage outputs (a corpus index, reward scores, a shard cut) stay
while the kept runs' window used them. ``gc`` holds the store's exclusive lock (no study runs
meanwhile) and never removes a file younger than ``grace`` seconds (a writer without the lock,
e.g. a library call of ``run_study`` or a worker on a host whose filesystem ignores ``flock``).

The journals (``journals/``: completions, judge calls, log-likelihoods, reward-model row scores)
count in ``du``, have their lines checked by ``verify``, and are kept by ``gc`` when a live stage
names one (generate, score-rows) or it was written since the oldest kept run started; the rest
are removed. Claims on requests (``claims/``) whose lease lapsed (their claimant died) are removed.

Example:
    >>> import tempfile
    >>> from assay.store import Store
    >>> st = Store(tempfile.mkdtemp())
    >>> k = st.put_json({"a": 1})
    >>> st.set_ref("assay-stage/x", k, {"stage": "measure"})
    >>> verify(st).corrupt, du(st).total_bytes > 0
    ([], True)
    >>> gc(st, [], keep_nights=1, grace=0.0).removed_blobs  # no run keeps it, and it is unused
    1
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import StoreError
from assay.store import Store

STAGE_REF_PREFIX = "assay-stage/"
_KEY_RE = re.compile(r"\b(?:tbl|doc|bin):[0-9a-f]{64}\b")


# ------------------------------------------------------------------------------- run directories


@dataclass(frozen=True)
class RunDir:
    """A finished run directory: its path, study, stage keys, start time and store root."""

    path: Path
    study: str
    stage_keys: tuple[str, ...] | None
    started: float
    store: str | None


def find_runs(roots: Iterable[str | os.PathLike[str]]) -> list[RunDir]:
    """Every directory holding a ``run.json`` under ``roots`` (recursively), in path order."""
    out = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise StoreError(f"--runs {root}: not a directory (give the folder that holds run "
                             "directories, e.g. runs/ or a nightly root)")
        for rj in sorted(root.rglob("run.json")):
            try:
                info = json.loads(rj.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as e:
                raise StoreError(f"{rj}: unreadable run.json ({e}); remove the run directory "
                                 "or rerun it") from None
            keys = info.get("stage_keys")
            started = info.get("started")
            out.append(RunDir(rj.parent, str(info.get("study", "?")),
                              tuple(keys) if isinstance(keys, list) else None,
                              float(started) if isinstance(started, (int, float))
                              else rj.stat().st_mtime, info.get("store")))
    return out


def _same_store(run: RunDir, store: Store) -> bool:
    if run.store is None:
        return True
    if store.remote:
        return run.store.rstrip("/") == store.location
    return Path(run.store).resolve() == store.root.resolve()


def kept_runs(runs: Sequence[RunDir], *, keep_nights: int | None = None,
              older_than_days: float | None = None, now: float | None = None) -> list[RunDir]:
    """The runs gc keeps: the newest ``keep_nights`` of each folder of runs (nightly dirs are
    named by date, so name order is night order), and/or those started within
    ``older_than_days``; a run either rule keeps is kept."""
    if keep_nights is None and older_than_days is None:
        raise StoreError("gc needs --keep-nights N or --older-than DAYS (what to keep)")
    if keep_nights is not None and keep_nights < 1:
        raise StoreError(f"--keep-nights must be >= 1, got {keep_nights}")
    now = time.time() if now is None else now
    keep: dict[Path, RunDir] = {}
    if keep_nights is not None:
        groups: dict[Path, list[RunDir]] = {}
        for r in runs:
            groups.setdefault(r.path.parent, []).append(r)
        for g in groups.values():
            for r in sorted(g, key=lambda r: r.path.name)[-keep_nights:]:
                keep[r.path] = r
    if older_than_days is not None:
        for r in runs:
            if r.started >= now - older_than_days * 86400:
                keep[r.path] = r
    return sorted(keep.values(), key=lambda r: str(r.path))


# ------------------------------------------------------------------------------- reachability


def _ref_doc(store: Store, rel: str) -> dict[str, Any] | None:
    try:
        data = store.read_file(rel)
        doc = json.loads(data) if data is not None else None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("name"), str) else None


def _ref_docs(store: Store, rels: Sequence[str]) -> list[dict[str, Any] | None]:
    """:func:`_ref_doc` of each of ``rels``, in order (side by side on an object store)."""
    return store.each(lambda rel: _ref_doc(store, rel), rels)


def _ref_rel(store: Store, name: str) -> str:
    return store._ref_rel(name)


def _read_quiet(store: Store, rel: str) -> bytes | None:
    try:
        return store.read_file(rel)
    except (OSError, StoreError):
        return None


class _Docs:
    """The JSON documents of one walk, each read once; a level of the walk's new documents is
    read side by side (``Store.each``: on an object store each read is a round trip)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.data: dict[str, bytes | None] = {}

    def fetch(self, keys: Iterable[str]) -> None:
        new = sorted({k for k in keys if k.startswith("doc:") and k not in self.data})

        def read(k: str) -> bytes | None:
            try:
                rel = self.store._blob_rel(k)
            except StoreError:
                return None
            return _read_quiet(self.store, rel)

        self.data.update(zip(new, self.store.each(read, new), strict=True))

    def keys_in(self, k: str) -> list[str]:
        data = self.data.get(k)
        return [] if data is None else _KEY_RE.findall(data.decode("utf-8", "replace"))

    def closure(self, keys: Iterable[str], seen: set[str] | None = None) -> set[str]:
        seen = set() if seen is None else seen
        level = {k for k in keys if k not in seen}
        while level:
            seen |= level
            self.fetch(level)
            level = {m for k in level for m in self.keys_in(k) if m not in seen}
        return seen


def closure(store: Store, keys: Iterable[str], seen: set[str] | None = None) -> set[str]:
    """Every blob key reachable from ``keys``: JSON documents are scanned for store keys (a
    level of new documents read side by side on an object store)."""
    return _Docs(store).closure(keys, seen)


_JOURNAL_RE = re.compile(r"journals/([0-9a-f]{16,64}\.jsonl)")


def _journal_name(rel: str) -> str:
    """The journal a file belongs to: ``journals/<shard>.jsonl``, or a segment of it on an
    object store (``journals/<shard>/<segment>.jsonl``) -> ``<shard>.jsonl``."""
    parts = rel.split("/")
    return parts[1] if len(parts) == 2 else parts[1] + ".jsonl"


def _journals_named(docs: _Docs, keys: Iterable[str]) -> set[str]:
    """File names of the journals the documents among ``keys`` name (a generate stage's
    summary names the journal its completions are in)."""
    keys = [k for k in keys if k.startswith("doc:")]
    docs.fetch(keys)
    out: set[str] = set()
    for k in keys:
        data = docs.data.get(k)
        if data is not None:
            out.update(_JOURNAL_RE.findall(data.decode("utf-8", "replace")))
    return out


# ------------------------------------------------------------------------------- du


@dataclass
class Usage:
    """Store size: total, per stage (or cache kind), per study, and what no ref reaches."""

    total_bytes: int
    n_blobs: int
    n_refs: int
    by_stage: dict[str, int]
    by_study: dict[str, int]
    unreferenced_bytes: int
    quarantined_bytes: int
    journal_bytes: int = 0
    n_journals: int = 0

    def table(self) -> str:
        lines = [f"store: {_h(self.total_bytes)} in {self.n_blobs} blobs, {self.n_refs} refs, "
                 f"{self.n_journals} journals"]
        lines.append("by stage (each blob counted once, under the first ref that reaches it):")
        lines += [f"  {k:<28} {_h(v):>10}" for k, v in sorted(self.by_stage.items())]
        lines.append(f"  {'(unreferenced)':<28} {_h(self.unreferenced_bytes):>10}")
        lines.append(f"  {'journals (completions)':<28} {_h(self.journal_bytes):>10}")
        if self.by_study:
            lines.append("by study (what its run directories reference; shared blobs count in "
                         "each):")
            lines += [f"  {k:<28} {_h(v):>10}" for k, v in sorted(self.by_study.items())]
        if self.quarantined_bytes:
            lines.append(f"quarantine: {_h(self.quarantined_bytes)} (corrupt entries moved aside "
                         "by verify)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _h(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{n} B"


def _owner(name: str, meta: Mapping[str, object]) -> str:
    if name.startswith(STAGE_REF_PREFIX):
        return str(meta.get("stage") or "stage")
    return "cache:" + re.split(r"[/:]", name, maxsplit=1)[0]


def du(store: Store, runs: Sequence[RunDir] = ()) -> Usage:
    """Size of the store by stage (refs' ``meta.stage``; other caches by ref name prefix) and
    by study (the blobs the studies' run directories reference)."""
    sizes = {k: e.size for k, e in store.blob_entries()}
    by_stage: dict[str, int] = {}
    owned: set[str] = set()
    refs = store.ref_entries()
    docs = _Docs(store)
    ref_docs = _ref_docs(store, [p.rel for p in refs])
    pointed = [d for d in ref_docs if d is not None and isinstance(d.get("blob"), str)]
    docs.closure([d["blob"] for d in pointed])  # every document read once, side by side
    for doc in pointed:  # then attributed ref by ref, in path order, from memory
        owner = _owner(doc["name"], doc.get("meta") or {})
        for k in sorted(docs.closure([doc["blob"]])):
            if k in sizes and k not in owned:
                owned.add(k)
                by_stage[owner] = by_stage.get(owner, 0) + sizes[k]
    by_study: dict[str, set[str]] = {}
    for r in runs:
        if not _same_store(r, store) or r.stage_keys is None:
            continue
        reach = by_study.setdefault(r.study, set())
        rels = [_ref_rel(store, STAGE_REF_PREFIX + key) for key in r.stage_keys]
        for found in _ref_docs(store, rels):
            if found and isinstance(found.get("blob"), str):
                docs.closure([found["blob"]], reach)
    journals = [e.size for e in store.journal_entries()]
    return Usage(
        total_bytes=sum(sizes.values()) + sum(journals), n_blobs=len(sizes), n_refs=len(refs),
        by_stage=by_stage,
        by_study={s: sum(sizes.get(k, 0) for k in ks) for s, ks in by_study.items()},
        unreferenced_bytes=sum(v for k, v in sizes.items() if k not in owned),
        quarantined_bytes=sum(e.size for e in store.entries("quarantine")),
        journal_bytes=sum(journals), n_journals=len(journals),
    )


# ------------------------------------------------------------------------------- verify


@dataclass
class Verification:
    """What ``verify`` found: corrupt blobs and refs (moved to quarantine), dangling refs."""

    n_blobs: int
    n_refs: int
    corrupt: list[dict[str, str]] = field(default_factory=list)
    dangling: list[dict[str, str]] = field(default_factory=list)

    n_journals: int = 0
    torn: list[dict[str, str]] = field(default_factory=list)

    def table(self) -> str:
        lines = [f"verified {self.n_blobs} blobs, {self.n_refs} refs and {self.n_journals} "
                 "journals: "
                 + (f"{len(self.corrupt)} corrupt" if self.corrupt else "all intact")]
        for c in self.corrupt:
            lines.append(f"  CORRUPT {c['key']}  {c['path']}  ({c['reason']}; moved to "
                         f"{c['moved_to']})")
        for d in self.dangling:
            lines.append(f"  dangling ref {d['ref']} -> {d['blob']} (a miss: the next run "
                         "recomputes it)")
        for t in self.torn:
            lines.append(f"  {t['lines']} torn line(s) in {t['path']} (a write cut short by a "
                         "kill or a full disk; skipped on read, those completions are asked "
                         "again)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _sha(path: Path) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def _sha_of(store: Store, rel: str) -> str | None:
    if not store.remote:  # streamed: a blob need not fit in memory
        return _sha(store.root / rel)
    data = store.read_file(rel)
    return None if data is None else hashlib.sha256(data).hexdigest()


def verify(store: Store) -> Verification:
    """Re-hash every blob and parse every ref; corrupt ones move to ``<root>/quarantine/`` (so
    the next run recomputes them instead of warning on every read) and are reported by key and
    path. A blob that a concurrent writer heals between the check and the move is put back."""
    blobs = list(store.blob_entries())
    refs = store.ref_entries()
    out = Verification(len(blobs), len(refs))
    present_blobs = {k for k, _ in blobs}
    shas = store.each(lambda rel: _sha_of(store, rel), [e.rel for _, e in blobs])
    for (key, e), got in zip(blobs, shas, strict=True):
        want = key.split(":", 1)[1]
        if got is None or got == want:
            continue
        moved = store.quarantine(e.rel)
        store.forget(key)
        if _sha_of(store, "quarantine/" + e.rel) == want:  # healed by a writer in between
            store.restore(e.rel)
            continue
        present_blobs.discard(key)
        out.corrupt.append({"key": key, "path": e.where, "moved_to": moved,
                            "reason": f"sha256 {got[:12]}... != name, {e.size} bytes"})
    ref_docs = _ref_docs(store, [e.rel for e in refs])
    for e, doc in zip(refs, ref_docs, strict=True):
        if doc is None:
            moved = store.quarantine(e.rel)
            out.corrupt.append({"key": "ref", "path": e.where, "moved_to": moved,
                                "reason": "unreadable ref document"})
            continue
        blob = doc.get("blob")
        if not (isinstance(blob, str) and blob in present_blobs):
            out.dangling.append({"ref": doc["name"], "blob": str(blob), "path": e.where})
    journals = store.journal_entries()
    damage = store.each(lambda rel: _journal_damage(store.read_file(rel)),
                        [e.rel for e in journals])
    for e, (bad, torn) in zip(journals, damage, strict=True):
        out.n_journals += 1
        if bad:  # kept in place: its intact lines still serve, the bad ones are asked again
            out.corrupt.append({"key": "journal", "path": e.where, "moved_to": "(kept)",
                                "reason": f"{bad} corrupt line(s) (skipped on read; those "
                                "completions are asked again)"})
        if torn:  # not corruption: a write cut short, skipped on read (left as it is: a
            # writer may be appending to the file now, and the next one starts a new line)
            out.torn.append({"path": e.where, "lines": str(torn)})
    return out


def _journal_damage(data: bytes | None) -> tuple[int, int]:
    """(corrupt lines, torn lines) of a journal: a torn line is a write cut short (the last
    line when the file does not end in a newline, or a cut piece a later writer ended with
    one); a corrupt one is a whole line that fails its checksum."""
    from assay.models.journal import line_state

    if data is None:
        return 0, 0
    lines = data.split(b"\n")
    bad = torn = 0
    for i, ln in enumerate(lines):
        if not ln:
            continue
        state = line_state(ln)[0]
        if state == "ok":
            continue
        if state == "torn" or i == len(lines) - 1:  # the last, unended line: cut short
            torn += 1
        else:
            bad += 1
    return bad, torn


# ------------------------------------------------------------------------------- gc


def _remove(store: Store, rels: Sequence[str], dry_run: bool) -> None:
    if not dry_run:
        store.each(store.delete_file, rels)


@dataclass
class Collection:
    """What ``gc`` kept and removed."""

    kept_runs: list[str]
    dropped_runs: list[str]
    kept_refs: int
    kept_blobs: int
    kept_bytes: int
    removed_refs: int
    removed_blobs: int
    removed_bytes: int
    removed_temp: int
    dry_run: bool
    kept_journals: int = 0
    removed_journals: int = 0
    removed_claims: int = 0

    def table(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (f"kept {len(self.kept_runs)} run(s) ({len(self.dropped_runs)} older not kept): "
                f"{self.kept_blobs} blobs, {self.kept_refs} refs, {self.kept_journals} journals, "
                f"{_h(self.kept_bytes)}\n"
                f"{verb} {self.removed_blobs} blobs, {self.removed_refs} refs, "
                f"{self.removed_journals} journals, {self.removed_claims} lapsed claims, "
                f"{self.removed_temp} stale temp files: {_h(self.removed_bytes)}")

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def gc(store: Store, runs: Sequence[RunDir], *, keep_nights: int | None = None,
       older_than_days: float | None = None, grace: float = 3600.0, wait: float = 0.0,
       dry_run: bool = False, now: float | None = None) -> Collection:
    """Remove every store entry that no kept run references and nothing used since the oldest
    kept run started, except files younger than ``grace`` seconds. Holds the exclusive lock
    (StoreError after ``wait`` seconds while studies hold it). A kept run whose run.json lists
    no stage keys (written before they were recorded) is an error: gc cannot tell what it needs.
    """
    now = time.time() if now is None else now
    mine = [r for r in runs if _same_store(r, store)]
    keep = kept_runs(mine, keep_nights=keep_nights, older_than_days=older_than_days, now=now)
    blind = [str(r.path) for r in keep if r.stage_keys is None]
    if blind:
        raise StoreError(f"{len(blind)} kept run(s) do not list their stage keys in run.json "
                         f"(made before gc existed): {blind[:3]}; rerun them (cached, quick) so "
                         "gc knows what they reference, or move them out of --runs")
    with store.exclusive(wait=wait):
        since = min((r.started for r in keep), default=now)
        young = now - grace
        live_refs: set[str] = set()
        for r in keep:
            for key in r.stage_keys or ():
                live_refs.add(_ref_rel(store, STAGE_REF_PREFIX + key))
        all_refs = store.ref_entries()
        for e in all_refs:
            if e.mtime >= since or e.mtime >= young:
                live_refs.add(e.rel)
        roots = [doc["blob"] for doc in _ref_docs(store, sorted(live_refs))
                 if doc and isinstance(doc.get("blob"), str)]
        docs = _Docs(store)
        live = docs.closure(roots)
        named = _journals_named(docs, live)
        res = Collection([str(r.path) for r in keep],
                         [str(r.path) for r in mine if r not in keep], 0, 0, 0, 0, 0, 0, 0, dry_run)
        # each kind's removals side by side (``Store.each``: on an object store each is a
        # request), refs before the blobs they name: a ref never outlives its blob
        doomed: list[str] = []
        for e in all_refs:
            if e.rel in live_refs:
                res.kept_refs += 1
                continue
            res.removed_refs += 1
            res.removed_bytes += e.size
            doomed.append(e.rel)
        _remove(store, doomed, dry_run)
        doomed, gone = [], []
        for key, e in store.blob_entries():
            if key in live or e.mtime >= young:
                res.kept_blobs += 1
                res.kept_bytes += e.size
                continue
            res.removed_blobs += 1
            res.removed_bytes += e.size
            doomed.append(e.rel)
            gone.append(key)
        _remove(store, doomed, dry_run)
        if not dry_run:
            for key in gone:
                store.forget(key)
        doomed = []
        for e in store.journal_entries():
            # kept: named by a live generate stage, or written since the oldest kept run began
            # (judge calls and in-progress generations are named by no stage)
            if _journal_name(e.rel) in named or e.mtime >= since or e.mtime >= young:
                res.kept_journals += 1
                res.kept_bytes += e.size
                continue
            res.removed_journals += 1
            res.removed_bytes += e.size
            doomed.append(e.rel)
        stale = [e for e in store.temp_entries() if e.mtime < young]
        res.removed_temp = len(stale)
        res.removed_bytes += sum(e.size for e in stale)
        # claims of dead claimants (lease lapsed by the store's clock; a live claimant renews
        # every ttl/3): only another claimant of the same journal would remove them otherwise
        from assay.models.claims import lapsed_claims

        lapsed = lapsed_claims(store)
        res.removed_claims = len(lapsed)
        res.removed_bytes += sum(e.size for e in lapsed)
        _remove(store, doomed + [e.rel for e in stale] + [e.rel for e in lapsed], dry_run)
    return res

