"""The completion journals are part of the store's upkeep: du counts them, verify checks their
lines, gc keeps the ones a kept run's generate stage names and removes the rest."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from assay import stages, upkeep
from assay.models.journal import Journal
from assay.spec import load_spec
from assay.store import Store

SPEC = """
name: j
sources:
  - name: m
    kind: file
    path: p.jsonl
    fields: {prompt: q, reference: gold}
    generate: {model: {kind: function, callable: "assay.models.function:echo"}, k: 2}
    verifier: {kind: exact_match}
measure: {pass_at: {k: 2}}
"""


def _run(tmp: Path, store: Store) -> upkeep.RunDir:
    (tmp / "p.jsonl").write_text("".join(json.dumps({"q": f"{i}", "gold": str(i)}) + "\n"
                                         for i in range(6)))
    (tmp / "s.yaml").write_text(SPEC)
    started = time.time()
    run = stages.run_study(load_spec(tmp / "s.yaml"), store, progress=None, workers=1)
    return upkeep.RunDir(tmp / "run", "j", tuple(sorted({r.key for r in run.results})), started,
                         None)


def test_du_verify_and_gc_see_the_journals(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    kept = _run(tmp_path, store)
    (used,) = list(store.journal_files())  # the generate stage's journal
    stray = Journal(store, "gshard:" + "ab" * 32)  # a journal no kept run names
    stray.append({"key": "k1", "status": "ok", "completion": "x"})
    stray.append({"key": "k2", "status": "ok", "completion": "y"})
    stray.close()
    lines = stray.path.read_bytes().split(b"\n")
    # damage line 1 of 2 (a flipped letter: a whole line that fails its checksum)
    stray.path.write_bytes(lines[0].replace(b'"x"', b'"X"') + b"\n" + lines[1] + b"\n")

    u = upkeep.du(store)
    jbytes = used.stat().st_size + stray.path.stat().st_size
    assert u.n_journals == 2 and u.journal_bytes == jbytes
    assert sum(u.by_stage.values()) + u.unreferenced_bytes + u.journal_bytes == u.total_bytes
    assert "journals (completions)" in u.table()

    v = upkeep.verify(store)
    assert v.n_journals == 2
    assert [c["path"] for c in v.corrupt] == [str(stray.path)]
    assert "1 corrupt line(s)" in v.corrupt[0]["reason"] and stray.path.exists()

    old = time.time() - 10 * 86400  # both journals last written long before the kept run
    for p in (used, stray.path):
        os.utime(p, (old, old))
    res = upkeep.gc(store, [kept], keep_nights=1, grace=0.0)
    assert (res.kept_journals, res.removed_journals) == (1, 1)
    assert used.exists() and not stray.path.exists()
    # what the kept run used is all still there: the rerun computes nothing
    again = stages.run_study(load_spec(tmp_path / "s.yaml"), store, progress=None, workers=1)
    assert again.computed_stages == []


def _journal(store: Store, *keys: str) -> Journal:
    j = Journal(store, "gshard:" + "cd" * 32)
    for k in keys:
        j.append({"key": k, "status": "ok", "completion": k.upper()})
    j.close()
    return j


def test_a_torn_tail_is_not_corruption_and_the_next_append_starts_a_new_line(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from assay.cli import main

    store = Store(tmp_path / "store")
    j = _journal(store, "k1", "k2")
    whole = j.path.read_bytes()
    j.path.write_bytes(whole[:-20])  # the last write cut short (a kill, a full disk)
    _journal(store, "k3")  # the rerun appends
    v = upkeep.verify(store)
    assert v.corrupt == [] and [t["lines"] for t in v.torn] == ["1"]
    assert "1 torn line(s)" in v.table()
    assert main(["store", "verify", "--store", str(tmp_path / "store")]) == 0
    assert sorted(Journal(store, "gshard:" + "cd" * 32).load()) == ["k1", "k3"]
    # corruption in the middle is still reported beside the torn line
    lines = j.path.read_bytes().split(b"\n")
    lines[0] = lines[0].replace(b'"K1"', b'"KX"')
    j.path.write_bytes(b"\n".join(lines))
    v = upkeep.verify(store)
    assert [c["reason"][:17] for c in v.corrupt] == ["1 corrupt line(s)"] and len(v.torn) == 1
    assert main(["store", "verify", "--store", str(tmp_path / "store")]) == 3
    capsys.readouterr()


def test_a_line_glued_to_a_torn_one_by_an_older_writer_is_read(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    j = _journal(store, "k1", "k2")
    whole = j.path.read_bytes()
    j.path.write_bytes(whole[:-20])
    with open(j.path, "ab") as f:  # what a writer before the fix did: no new line first
        f.write(_line_of({"key": "k3", "status": "ok"}))
    assert sorted(Journal(store, "gshard:" + "cd" * 32).load()) == ["k1", "k3"]
    v = upkeep.verify(store)
    assert v.corrupt == [] and len(v.torn) == 1


def _line_of(rec: dict) -> bytes:  # type: ignore[type-arg]
    from assay.models.journal import _line

    return _line(rec)
