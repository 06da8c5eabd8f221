"""One store per user, found from anywhere (issue 49): the same spec run from two working
folders asks the model once; a project's ``.assay`` is found above the spec; ``--store`` and
``ASSAY_STORE`` still win; every run prints ``store: <location>`` and run.json records it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from assay.paths import user_cache_dir
from assay.store_url import locate, store_from

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.openai_server import OpenAIServer  # noqa: E402

SPEC = """name: where
sources:
  - name: a
    kind: file
    path: p.jsonl
    fields: {{prompt: q, reference: gold, task_id: id}}
    generate:
      model: {{kind: openai, base_url: "{url}", model: tiny-ckpt}}
      k: 1
    verifier: {{kind: numeric}}
"""


def _user(tmp: Path) -> dict[str, str]:
    """A user whose home and cache are under ``tmp`` (never the real ~/.cache), with no store,
    cache or Prefect settings of their own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PREFECT_") and k not in ("ASSAY_STORE", "ASSAY_CACHE_DIR")}
    env.update(HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "xdg"),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return env


def _study(folder: Path, url: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "p.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"What is {i} + {i + 1}?", "gold": str(2 * i + 1)})
        + "\n" for i in range(6)))
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(url=url))
    return spec


def _run(spec: Path, cwd: Path, env: dict[str, str], *extra: str) -> tuple[list[str], dict]:
    """``assay run`` of ``spec`` from ``cwd`` (output under cwd); its ``store:`` lines (one is
    asserted by the caller, after what the run asked) and run.json."""
    cwd.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([str(BIN / "assay"), "run", str(spec), "--output", "out", "--no-view",
                        *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("store: ")]
    return lines, json.loads((cwd / "out" / "run.json").read_text())


@pytest.mark.slow
def test_the_same_spec_from_two_working_folders_asks_the_model_once(tmp_path: Path) -> None:
    srv = OpenAIServer().start()
    try:
        spec = _study(tmp_path / "study", srv.base_url)
        env = _user(tmp_path)
        line_a, run_a = _run(spec, tmp_path / "a", env)
        sent = srv.count()
        line_b, run_b = _run(spec, tmp_path / "b", env)  # `cd ..`: another working folder
        again = srv.count() - sent
    finally:
        srv.stop()
    user_store = tmp_path / "xdg" / "assay" / "store"
    assert sent == 6 and again == 0
    assert run_a["computed"] and run_b["computed"] == []
    assert len(line_a) == 1 and line_a[0].startswith(f"store: {user_store} (")
    assert line_b == line_a
    assert run_a["store"] == run_b["store"] == str(user_store)
    # one Prefect database for the user too: no fresh .prefect (nor .assay) in either folder
    assert (tmp_path / "xdg" / "assay" / "prefect" / "prefect.db").is_file()
    for folder in ("a", "b", "study"):
        assert not (tmp_path / folder / ".assay").exists()
        assert not (tmp_path / folder / ".prefect").exists()
    assert not (tmp_path / "home" / ".cache").exists()  # XDG_CACHE_HOME was followed


@pytest.mark.slow
def test_a_project_store_is_found_above_the_spec_and_store_flag_still_wins(
        tmp_path: Path) -> None:
    srv = OpenAIServer().start()
    try:
        project = tmp_path / "proj"
        (project / ".assay").mkdir(parents=True)  # an existing user's ./.assay
        spec = _study(project / "studies" / "one", srv.base_url)
        env = _user(tmp_path)
        line, run = _run(spec, tmp_path / "elsewhere", env)
        sent = srv.count()
        pinned = tmp_path / "pinned"
        line_p, run_p = _run(spec, tmp_path / "elsewhere", env, "--store", str(pinned))
        pinned_sent = srv.count() - sent
    finally:
        srv.stop()
    assert sent == 6 and (project / ".assay" / "refs").exists()
    assert run["store"] == str(project / ".assay")
    assert line == [f"store: {project / '.assay'} (the project's, found above the spec; "
                    "--store to choose another)"]
    assert (project / ".prefect" / "prefect.db").is_file()  # beside the project's store
    assert not (tmp_path / "xdg" / "assay" / "store").exists()
    # --store pins another store: nothing of the project's is there, so it asks again
    assert pinned_sent == 6 and run_p["computed"]
    assert line_p == [f"store: {pinned} (given by --store)"] and run_p["store"] == str(pinned)


def test_precedence_flag_then_env_then_project_then_user(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".assay").mkdir(parents=True)
    (project / "deep" / "er").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    # the user's default: XDG_CACHE_HOME, else ~/.cache; ASSAY_CACHE_DIR above both
    assert locate(None, [outside], environ=env).store == str(tmp_path / "xdg/assay/store")
    assert locate(None, [outside], environ={**env, "ASSAY_CACHE_DIR": str(tmp_path / "c")}
                  ).prefect_home == tmp_path / "c" / "prefect"
    # the project's .assay, from any depth below it; its Prefect home beside it
    found = locate(None, [project / "deep" / "er"], environ=env)
    assert (found.store, found.prefect_home) == (str(project / ".assay"), project / ".prefect")
    # ASSAY_STORE, then --store, over the project's
    via_env = store_from(None, {"ASSAY_STORE": str(tmp_path / "e")})
    assert locate(via_env, [project], given_by="ASSAY_STORE", environ=env).store == str(
        tmp_path / "e")
    via_flag = store_from(str(tmp_path / "f"), {"ASSAY_STORE": str(tmp_path / "e")})
    loc = locate(via_flag, [project], environ=env, prefect_home=str(tmp_path / "ph"))
    assert (loc.store, loc.prefect_home) == (str(tmp_path / "f"), tmp_path / "ph")
    assert loc.line() == f"store: {tmp_path / 'f'} (given by --store)"
    # a key in a URL never reaches the terminal
    assert "SECRET" not in locate("s3://AK:SECRET@b/p", [outside], environ=env).line()


def test_the_user_cache_follows_home_when_no_xdg(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache_dir({}) == (tmp_path / "home" / ".cache" / "assay").resolve()
    assert locate(None, [tmp_path], environ={}).store == str(
        (tmp_path / "home" / ".cache" / "assay" / "store").resolve())


def test_the_suite_never_uses_the_real_user_cache() -> None:
    # tests/conftest.py gives every test its own ASSAY_CACHE_DIR
    real = Path(os.path.expanduser("~")) / ".cache" / "assay"
    assert user_cache_dir() != real.resolve()
    assert "pytest" in str(user_cache_dir())



@pytest.mark.slow
def test_nightly_prints_its_store_and_a_bad_spec_only_its_error(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".assay").mkdir(parents=True)
    (project / "nights").mkdir()
    (project / "nights" / "d.jsonl").write_text("".join(
        json.dumps({"prompt": f"p{i}", "completion": "x", "r": i % 2}) + "\n" for i in range(6)))
    spec = project / "nights" / "n.yaml"
    spec.write_text("name: n\nsources:\n  - {name: m, kind: file, path: d.jsonl, "
                    "fields: {reward: r}}\n")
    bad = project / "nights" / "bad.yaml"
    bad.write_text("name: n\nsources: []\nbogus_field: 1\n")
    env = _user(tmp_path)
    nightly = [str(BIN / "assay"), "nightly", "--night", "2026-11-01", "--root", "nights"]
    p = subprocess.run([*nightly, str(spec)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (project / ".assay" / "refs").exists()  # the project's store, found from tmp_path
    assert p.stderr.splitlines()[0] == (f"store: {project / '.assay'} (the project's, found "
                                        "above the spec; --store to choose another)"), p.stderr
    p = subprocess.run([*nightly, str(bad)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error:"), p.stderr
    assert "store:" not in p.stderr
