"""Reading a journal checks each line's sum on the bytes written (no record re-canonicalized, each
line parsed once), and accepts and refuses exactly the lines the general check does."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from assay.hashing import canonical_json
from assay.models import journal as jm
from assay.store import Store


def _records(n: int) -> list[dict[str, Any]]:
    return [{"key": f"gen:{i}", "status": "ok", "completion": f"r\u00e9ponse {i}",
             "usage": {"prompt_tokens": i, "completion_tokens": 2.5}, "batch": [i, None]}
            for i in range(n)]


def _count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls = [0]
    real = getattr(jm, name) if name == "canonical_json" else getattr(jm.json, name)

    def counted(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        return real(*a, **k)

    if name == "canonical_json":
        monkeypatch.setattr(jm, "canonical_json", counted)
    else:
        monkeypatch.setattr(jm.json, name, counted)
    return calls


@pytest.mark.parametrize("how", ["load", "lookup"])
def test_reading_rehashes_nothing_and_parses_each_line_once(
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    store = Store(tempfile.mkdtemp())
    j = jm.Journal(store, "gshard:cost")
    recs = _records(50)
    for r in recs:
        j.append(r)
    j.close()
    hashed = _count_calls(monkeypatch, "canonical_json")
    parsed = _count_calls(monkeypatch, "loads")
    reader = jm.Journal(Store(store.root), "gshard:cost")
    got = reader.load() if how == "load" else reader.lookup([r["key"] for r in recs])
    assert got == {r["key"]: r for r in recs}
    assert hashed[0] == 0
    assert parsed[0] == len(recs)


def _general(raw: bytes) -> bool:
    """The check as it reads without the fast path: parse, re-canonicalize, compare."""
    try:
        doc = json.loads(raw)
        ok = hashlib.sha256(canonical_json(doc["rec"])).hexdigest()[:16] == doc["sum"]
    except (ValueError, KeyError, TypeError):
        return False
    return ok and isinstance(doc["rec"], dict)


def test_same_verdict_as_the_general_check() -> None:
    good = jm._line({"key": "k", "completion": "caf\u00e9", "x": [1, 2.0]}).rstrip(b"\n")
    rec = json.loads(good)["rec"]
    other_layout = json.dumps({"sum": json.loads(good)["sum"], "rec": rec}, indent=1).encode()
    lines = [good, other_layout, good.replace(b'"k"', b'"K"'), good[:-1], good + b" ",
             good[:30], good[:30] + good, b'{"sum":"' + good[8:24] + b'","rec":[1]}',
             jm._line({"key": "k", "n": 1}).rstrip(b"\n").replace(b'"n":1', b'"n":1.0'), b"",
             b"{}", b'{"sum":"0123456789abcdef","rec":{"key":"k"}}']
    for raw in lines:
        assert jm.line_ok(raw) is _general(raw), raw
    assert jm.line_ok(good) and jm.line_ok(other_layout)  # both layouts are kept


def test_torn_and_corrupt_lines_still_counted(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    j = jm.Journal(store, "gshard:torn")
    j.append({"key": "a", "status": "ok"})
    j.close()
    path = tmp_path / j.rel
    good = jm._line({"key": "b", "status": "ok"})
    path.write_bytes(path.read_bytes() + good[:25] + good + good.replace(b'"b"', b'"c"'))
    with pytest.warns(Warning, match="2 torn or corrupt"):
        got = jm.Journal(store, "gshard:torn").load()
    assert sorted(got) == ["a", "b"]
