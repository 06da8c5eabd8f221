"""`assay store gc` removes claim documents whose lease lapsed (their claimant died), judged by
the store's clock as claimants judge each other, and keeps live claims and files that are no claim.
"""

from __future__ import annotations

import os
import time

from assay.hashing import canonical_json
from assay.models.claims import Claims
from assay.store import Store
from assay.upkeep import gc


def dead_claim(store: Store, journal: str, name: str, *, ttl: float, age: float) -> str:
    """A claim as a claimant killed ``age`` seconds ago left it: written, never renewed."""
    rel = f"claims/{journal}/{name}.json"
    store.write_file(rel, canonical_json({"kind": "claim", "ttl": ttl, "keys": ["gen:1"],
                                          "host": "gone", "pid": -1}))
    t = time.time() - age
    os.utime(store.root / rel, (t, t))
    return rel


def test_gc_removes_lapsed_claims_and_keeps_live_ones(tmp_path):
    store = Store(tmp_path / "st")
    dead = dead_claim(store, "ab", "dead", ttl=60, age=120)
    other = dead_claim(store, "cd", "dead2", ttl=5, age=30)
    # written 30 s ago with a 600 s lease: its holder may still be running (a slow renewal)
    young = dead_claim(store, "cd", "slow", ttl=600, age=30)
    # (a live claimant of journal ab would itself remove the lapsed claims of ab: another one)
    live = Claims(store, "journals/ef.jsonl", ttl=60)
    assert live.claim(["gen:2"]) == ["gen:2"]
    store.write_file("claims/ab/notes.txt", b"not a claim")
    try:
        dry = gc(store, [], keep_nights=1, grace=0.0, dry_run=True)
        assert (store.root / dead).exists() and (store.root / other).exists()  # only counted
        res = gc(store, [], keep_nights=1, grace=0.0)
        left = sorted(e.rel for e in store.entries("claims"))
        assert left == sorted([young, live.rel, "claims/ab/notes.txt"])
        assert res.removed_claims == dry.removed_claims == 2 and "2 lapsed claims" in res.table()
    finally:
        live.release()
    assert sorted(e.rel for e in store.entries("claims")) == sorted([young,
                                                                     "claims/ab/notes.txt"])
