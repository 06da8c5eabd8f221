"""Content store: verified reads, atomic writes, killed writers, racing writers."""

import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pyarrow as pa
import pytest

from assay.errors import StoreError
from assay.store import CorruptEntryWarning, Store


def test_table_json_bytes_round_trip(tmp_path):
    s = Store(tmp_path)
    t = pa.table({"x": [1, 2, 3], "s": ["a", "\u00e9", None]})
    k = s.put_table(t)
    assert k.startswith("tbl:") and s.get_table(k).equals(t)
    assert s.put_table(t) == k  # same content, same key, written once
    d = s.put_json({"b": [1, 2], "a": "x"})
    assert s.get_json(d) == {"a": "x", "b": [1, 2]}
    b = s.put_bytes(b"\x00\x01")
    assert s.get_bytes(b) == b"\x00\x01"
    assert s.get_json("doc:" + "0" * 64) is None


def test_default_root_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSAY_STORE", str(tmp_path / "st"))
    assert Store().root == tmp_path / "st"
    monkeypatch.delenv("ASSAY_STORE")
    assert str(Store().root) == ".assay"


def test_a_malformed_store_url_in_the_env_is_refused_not_made_a_folder(tmp_path, monkeypatch):
    """``Store()`` reads ``ASSAY_STORE`` with the flags' parser: ``s3:bucket`` is an input error
    naming the variable, never a local folder named ``s3:bucket`` (what a library call made)."""
    from assay.errors import SpecError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASSAY_STORE", "s3:bucket/prefix")
    with pytest.raises(SpecError, match="ASSAY_STORE 's3:bucket/prefix': not a store URL"):
        Store()
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("ASSAY_STORE", "st")  # a relative folder is the same folder, made absolute
    assert Store().root == tmp_path / "st"


def test_bad_keys_are_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="not a store key"):
        Store(tmp_path).get_table("rows:abc")


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_corrupt_entries_are_reported_and_missing(tmp_path, damage):
    s = Store(tmp_path)
    k = s.put_table(pa.table({"x": list(range(1000))}))
    path = s._blob_path(k)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    else:
        path.write_bytes(b"")
    with pytest.warns(CorruptEntryWarning):
        assert s.get_table(k) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not s.has(k)
        # a rewrite heals the entry
        assert s.put_table(pa.table({"x": list(range(1000))})) == k
    assert s.get_table(k).num_rows == 1000


def test_refs_point_at_verified_blobs(tmp_path):
    s = Store(tmp_path)
    k = s.put_json({"v": 1})
    with pytest.raises(StoreError, match="not in the store"):
        s.set_ref("stage:x", "doc:" + "1" * 64)
    s.set_ref("stage:x", k, {"rows": 3})
    assert s.get_ref("stage:x") == {"name": "stage:x", "blob": k, "meta": {"rows": 3}}
    s._blob_path(k).write_bytes(b"{}")  # blob corrupted: the ref is a miss
    with pytest.warns(CorruptEntryWarning):
        assert s.get_ref("stage:x") is None
    s._ref_path("stage:y").parent.mkdir(parents=True, exist_ok=True)
    s._ref_path("stage:y").write_bytes(b'{"name": "stage:y", "blo')  # torn ref file
    with pytest.warns(CorruptEntryWarning):
        assert s.get_ref("stage:y") is None
    assert s.get_ref("never") is None


WRITER = textwrap.dedent("""
    import sys, pyarrow as pa
    from assay.store import Store
    s = Store(sys.argv[1])
    t = pa.table({"x": list(range(1_000_000)), "y": [str(i) for i in range(1_000_000)]})
    print("ready", flush=True)
    while True:
        s.put_table(t)
        s.delete_ref("r")
        s.set_ref("r", s.put_json({"n": t.num_rows}))
        t = t.slice(1)
""")


def test_killed_writer_never_leaves_a_readable_partial_entry(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WRITER)
    root = tmp_path / "store"
    for delay in (0.3, 0.9, 1.7):
        p = subprocess.Popen([sys.executable, str(script), str(root)], stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        s = Store(root)
        blobs = [f for f in (root / "blobs").rglob("*")
                 if f.is_file() and not f.name.startswith(".")]
        for f in blobs:
            key = {"parquet": "tbl", "json": "doc"}[f.suffix[1:]] + ":" + f.stem
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # any corrupt visible entry fails the test
                assert s.has(key)
        ref = s.get_ref("r")
        assert ref is None or s.get_json(ref["blob"])["n"] > 0
    # temp files may remain after a kill, but they are never read as entries
    assert all(f.name.startswith(".") or f.suffix in {".parquet", ".json"}
               for f in (root / "blobs").rglob("*") if f.is_file())


RACER = textwrap.dedent("""
    import sys, pyarrow as pa
    from assay.store import Store
    s = Store(sys.argv[1])
    t = pa.table({"x": list(range(200_000))})
    for _ in range(20):
        k = s.put_table(t)
        s.set_ref("shared", k)
        assert s.get_table(k).num_rows == 200_000
    print(k)
""")


def test_two_processes_writing_the_same_key(tmp_path):
    script = tmp_path / "r.py"
    script.write_text(RACER)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "s")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    res = [p.communicate(timeout=120) for p in procs]
    outs = [o.strip() for o, _ in res]
    assert all(p.returncode == 0 for p in procs), \
        [(p.returncode, e[-2000:]) for p, (_, e) in zip(procs, res)]
    assert outs[0] == outs[1]
    assert Store(tmp_path / "s").get_table(outs[0]).num_rows == 200_000
