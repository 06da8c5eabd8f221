"""The store on a real S3 server (SeaweedFS on 127.0.0.1): a whole `assay run` there, cached on
rerun, the same bytes as a local store; du/verify/gc; corruption found; leases hold off gc."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from assay import upkeep
from assay.cli import main
from assay.errors import StoreError
from assay.models.journal import Journal
from assay.store import CorruptEntryWarning, Store
from tests.helpers.seaweed import S3Server

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "configs" / "own_completions.yaml"
ASSAY = str(Path(sys.executable).with_name("assay"))


def _raw(s3: S3Server) -> object:
    """The bucket through pyarrow directly (to corrupt and inspect objects behind the store)."""
    from pyarrow import fs

    return fs.S3FileSystem(access_key=s3.env["AWS_ACCESS_KEY_ID"],
                           secret_key=s3.env["AWS_SECRET_ACCESS_KEY"],
                           endpoint_override=s3.endpoint, scheme="http", region="us-east-1")


def test_blobs_refs_and_journals_on_s3(s3: S3Server) -> None:
    import pyarrow as pa

    st = Store(s3.url("api"))
    assert st.remote and st.location == s3.url("api") and repr(st) == f"Store({s3.url('api')!r})"
    key = st.put_table(pa.table({"x": [1, 2, 3]}))
    # two writers of one key at once: both complete, the object is whole
    keys = []
    threads = [threading.Thread(target=lambda: keys.append(st.put_json({"a": list(range(500))})))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 1 and st.get_json(keys[0]) == {"a": list(range(500))}
    st.set_ref("stage:x", key, {"stage": "demo"})
    assert Store(s3.url("api")).get_ref("stage:x")["blob"] == key
    assert Store(s3.url("api")).get_table(key).column("x").to_pylist() == [1, 2, 3]
    assert Store(s3.url("elsewhere")).get_ref("stage:x") is None
    with pytest.raises(StoreError, match="is not in the store"):
        st.set_ref("stage:y", "doc:" + "0" * 64)
    # a journal: no append on S3, so each flush is a segment; a reader joins them in order
    j = Journal(st, "gshard:" + "cd" * 32)
    j.append({"key": "g1", "completion": "a", "status": "ok"})
    j._flush()
    j.append({"key": "g1", "completion": "b", "status": "ok"})  # a later line supersedes
    j.append({"key": "g2", "completion": "c", "status": "ok"})
    j.close()
    got = Journal(Store(s3.url("api")), "gshard:" + "cd" * 32).load()
    assert {k: v["completion"] for k, v in got.items()} == {"g1": "b", "g2": "c"}
    assert len(st.journal_entries()) == 2
    usage = upkeep.du(st)
    assert usage.n_journals == 2 and usage.journal_bytes > 0
    assert upkeep.verify(st).n_journals == 2
    # pickled (to a worker), a store travels as its URL: no credentials ride along
    import pickle

    blob = pickle.dumps(Store(s3.url("api")))
    assert s3.env["AWS_SECRET_ACCESS_KEY"].encode() not in blob
    assert pickle.loads(blob).get_json(keys[0]) == {"a": list(range(500))}
    # gc two hours on, no run kept: the segments go with everything else unused
    res = upkeep.gc(st, [], older_than_days=1, grace=3600, now=time.time() + 7200)
    assert res.removed_journals == 2 and st.journal_entries() == []
    assert Journal(Store(s3.url("api")), "gshard:" + "cd" * 32).load() == {}


def test_a_corrupt_object_is_a_miss_and_verify_quarantines_it(s3: S3Server,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    st = Store(s3.url("corrupt"))
    key = st.put_json({"hello": "world"})
    st.set_ref("stage:c", key)
    raw = _raw(s3)
    obj = f"{s3.bucket}/corrupt/{st._blob_rel(key)}"
    with raw.open_output_stream(obj) as f:  # type: ignore[attr-defined]
        f.write(b'{"hello":"w0rld"}')  # one byte flipped behind the store's back
    assert st.get_json(key) == {"hello": "world"}  # what this process verified and still holds
    st = Store(s3.url("corrupt"))  # another process reads what is stored
    with pytest.warns(CorruptEntryWarning, match="checksum mismatch"):
        assert st.get_json(key) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptEntryWarning)
        assert st.get_ref("stage:c") is None  # a ref is only as good as its blob
    assert main(["store", "verify", "--store", s3.url("corrupt")]) == 3
    out = capsys.readouterr().out
    assert "CORRUPT " + key in out and "quarantine/blobs/" in out
    assert main(["store", "verify", "--store", s3.url("corrupt")]) == 0  # moved aside
    assert "dangling ref stage:c" in capsys.readouterr().out
    assert st.put_json({"hello": "world"}) == key and st.get_ref("stage:c")["blob"] == key


def _run(spec: Path, store: str, out: Path,
         env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ASSAY, "run", str(spec), "--store", store, "--output", str(out)],
                          capture_output=True, text=True, timeout=300, env=env,
                          cwd=out.parent)


@pytest.mark.slow
def test_assay_run_on_s3_is_cached_on_rerun_and_matches_a_local_store(
        s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "study" / "spec.yaml"
    spec.parent.mkdir()
    shutil.copy(SPEC, spec)
    (spec.parent / "data").mkdir()
    shutil.copy(SPEC.parent / "data" / "own_completions.jsonl", spec.parent / "data")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    url = s3.url("run")
    first = _run(spec, url, tmp_path / "s3run", env)
    assert first.returncode == 0, first.stderr[-3000:]
    again = _run(spec, url, tmp_path / "s3again", env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 computed" in again.stderr, again.stderr[-2000:]
    local = _run(spec, str(tmp_path / "localstore"), tmp_path / "local", env)
    assert local.returncode == 0, local.stderr[-3000:]
    for d in ("s3run", "s3again"):
        for f in ("report.json", "report.md", "rows/model.parquet"):
            assert (tmp_path / d / f).read_bytes() == (tmp_path / "local" / f).read_bytes(), f
    info = json.loads((tmp_path / "s3run" / "run.json").read_text())
    assert info["store"] == url
    for f in ("run.json", "run.log"):  # credentials never land in the run's files
        text = (tmp_path / "s3run" / f).read_text()
        assert s3.env["AWS_SECRET_ACCESS_KEY"] not in text
    # nothing of the study was written to a local folder named after the URL
    assert not any(p.name == "s3:" for p in tmp_path.rglob("s3:"))
    # upkeep on the bucket
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(tmp_path / "s3run", runs / "keep")
    far = time.time() + 7200  # gc's "now" two hours on: what is not kept is old and unused
    kept = json.loads((runs / "keep" / "run.json").read_text())
    (runs / "keep" / "run.json").write_text(json.dumps({**kept, "started": far - 60}))
    st = Store(url)
    usage = upkeep.du(st, upkeep.find_runs([runs]))
    # the stages' 7 and the source's shard cut (assay-cut/)
    assert usage.n_refs == 8 and usage.by_study["own-completions"] > 0
    assert usage.unreferenced_bytes == 0
    stray = st.put_json({"stray": 1})
    st.set_ref("cache:stray", stray)
    res = upkeep.gc(st, upkeep.find_runs([runs]), keep_nights=1, grace=3600)
    assert res.removed_blobs == 0  # younger than the grace period: kept
    res = upkeep.gc(st, upkeep.find_runs([runs]), keep_nights=1, grace=3600, now=far)
    # the stray and the shard cut (a cache unused since the kept run started, two hours on:
    # the next run cuts again, computing no stage)
    assert (res.removed_refs, res.removed_blobs, res.kept_refs) == (2, 2, 7)
    assert not st.has(stray)
    capsys.readouterr()
    assert main(["store", "du", "--store", url, "--runs", str(runs)]) == 0
    assert "own-completions" in capsys.readouterr().out
    assert main(["store", "verify", "--store", url]) == 0
    rerun = _run(spec, url, tmp_path / "after-gc", env)
    assert rerun.returncode == 0 and "0 computed" in rerun.stderr, rerun.stderr[-2000:]


@pytest.mark.slow
def test_file_url_is_the_path(tmp_path: Path) -> None:
    a = Store(f"file://{tmp_path}/st")
    key = a.put_json({"k": 1})
    assert not a.remote and a.root == tmp_path / "st"
    assert Store(tmp_path / "st").get_json(key) == {"k": 1}
    # `assay run --store file://...` from another folder: the study's entries land in that folder
    spec = tmp_path / "study" / "spec.yaml"
    spec.parent.mkdir()
    shutil.copy(SPEC, spec)
    (spec.parent / "data").mkdir()
    shutil.copy(SPEC.parent / "data" / "own_completions.jsonl", spec.parent / "data")
    (tmp_path / "cwd").mkdir()
    run = _run(spec, f"file://{tmp_path}/st", tmp_path / "cwd" / "out",
               {**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(Store(tmp_path / "st").ref_entries()) == 8  # 7 stages and the shard cut
    assert not (tmp_path / "cwd" / "file:").exists()  # no folder named after the URL


def test_a_lease_holds_off_gc_until_released_or_expired(s3: S3Server, tmp_path: Path) -> None:
    url = s3.url("lease")
    st = Store(url)
    key = st.put_json({"in": "use"})
    runs = tmp_path / "runs"
    runs.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ASSAY_STORE_LEASE_S": "4"}
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from assay.store import Store
        with Store({url!r}).in_use():
            print("held", flush=True)
            time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert [x["kind"] for x in st.live_leases()] == ["study"]
        # the holder renews its lease: well past one lease length, gc still may not run
        with pytest.raises(StoreError, match="locked by a running study"):
            upkeep.gc(st, [], older_than_days=1, grace=0, wait=9)
        assert st.has(key)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # dies without releasing: its lease must expire
        holder.wait()
    # the dead holder's lease is not renewed: gc may run once it expires (bounded wait)
    res = upkeep.gc(st, [], older_than_days=1, grace=0, wait=30)
    assert res.removed_blobs == 1 and not st.has(key)
    with st.exclusive():  # a study cannot start while gc holds the store
        with pytest.raises(StoreError, match="locked by a store gc"):
            with Store(url).in_use(wait=0.5):
                pass
    with st.in_use(wait=0):  # released leases leave nothing live behind
        pass
    assert st.live_leases() == []


def test_bulk_walks_of_an_object_store_go_side_by_side_in_order(s3: S3Server,
                                                               tmp_path: Path) -> None:
    def calls(both: threading.Barrier):  # type: ignore[no-untyped-def]
        def call(rel: str) -> str:
            if rel in ("a", "b"):
                both.wait()  # passes only when both calls are in flight at once
            return rel.upper()
        return call

    # upkeep's walks (du, verify, gc) read and delete through ``each``
    got = Store(s3.url("each")).each(calls(threading.Barrier(2, timeout=30)), ["a", "b", "c"])
    assert got == ["A", "B", "C"]
    with pytest.raises(threading.BrokenBarrierError):  # a local folder: one after another
        Store(tmp_path / "local").each(calls(threading.Barrier(2, timeout=0.5)), ["a", "b"])


def test_verify_on_an_object_store_reads_blobs_side_by_side(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay import store_files

    st = Store(s3.url("verify-each"))
    keys = [st.put_json({"i": i}) for i in range(4)]
    real = store_files.ObjectFiles.read_with_mtime
    both = threading.Barrier(2, timeout=30)
    first_two = {st._blob_rel(k) for k in sorted(keys)[:2]}

    def read(self, rel):  # type: ignore[no-untyped-def]
        if rel in first_two:
            both.wait()  # one read at a time never gets past this
        return real(self, rel)

    monkeypatch.setattr(store_files.ObjectFiles, "read_with_mtime", read)
    found = upkeep.verify(Store(s3.url("verify-each")))
    assert found.n_blobs == 4 and not found.corrupt
