"""One reading of ``--store`` / ``ASSAY_STORE`` for every command: a URL stays a URL (never a
local folder named ``s3:``), a path becomes absolute, a malformed URL is one ``error:`` line
(exit 2). End to end: ``assay nightly --store s3://...`` writes to a real S3 bucket."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.errors import SpecError
from assay.store_url import parse_store, store_from

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _store_commands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand of ``assay`` that takes ``--store``."""
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: sp for name, sp in sub.choices.items()
            if any("--store" in a.option_strings for a in sp._actions)}


def _argv(name: str, sp: argparse.ArgumentParser, store: str) -> list[str]:
    pos = [(a.choices and list(a.choices)[0]) or "spec.yaml" for a in sp._actions
           if not a.option_strings and a.dest != "help"]
    return [name, *pos, "--store", store]


def test_the_commands_with_a_store_include_run_nightly_and_store() -> None:
    # a command that gains --store later (validate, say) is covered by the tests below as is
    assert {"nightly", "run", "store"} <= set(_store_commands())


@pytest.mark.parametrize("given,expect", [
    ("s3://bucket/prefix", "s3://bucket/prefix"),
    ("gs://bucket", "gs://bucket"),
    ("file:///data/st", "/data/st"),
    ("rel/st", "<cwd>/rel/st"),
])
def test_every_command_gives_its_function_one_location(
        given: str, expect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASSAY_STORE", raising=False)
    seen: dict[str, Any] = {}
    real = cli.build_parser

    def spying() -> argparse.ArgumentParser:
        p = real()
        (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        for name, sp in sub.choices.items():
            sp.set_defaults(func=lambda a, name=name: seen.__setitem__(name, a.store) or 0)
        return p

    monkeypatch.setattr(cli, "build_parser", spying)
    for name, sp in _store_commands().items():
        assert cli.main(_argv(name, sp, given)) == 0
        assert seen[name] == expect.replace("<cwd>", str(tmp_path.resolve())), name
    # the variable takes the same road when the flag is absent
    monkeypatch.setenv("ASSAY_STORE", given)
    for name, sp in _store_commands().items():
        seen.pop(name)
        assert cli.main(_argv(name, sp, given)[:-2]) == 0
        assert seen[name] == expect.replace("<cwd>", str(tmp_path.resolve())), name
    assert not any(p.name.endswith(":") for p in tmp_path.iterdir())


@pytest.mark.parametrize("bad,says", [
    ("s3:bucket/prefix", "not a store URL"),
    ("s3:/bucket/prefix", "not a store URL"),
    ("s3:///prefix", "no bucket"),
    ("http://host/prefix", "http:// is not a store filesystem"),
    ("file://otherhost/x", "not on host"),
])
def test_a_malformed_url_is_one_error_line_for_every_command(
        bad: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for name, sp in _store_commands().items():
        assert cli.main(_argv(name, sp, bad)) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [err[0]] and err[0].startswith(f"error: --store {bad!r}: "), err
        assert says in err[0]
    monkeypatch.setenv("ASSAY_STORE", bad)
    name, sp = "store", _store_commands()["store"]
    assert cli.main(_argv(name, sp, bad)[:-2]) == 2
    assert capsys.readouterr().err.startswith(f"error: ASSAY_STORE {bad!r}: ")
    assert list(tmp_path.iterdir()) == []  # nothing was created: no folder `s3:`


def test_parse_store_against_the_path_rules() -> None:
    assert parse_store("~/st") == str(Path.home() / "st")
    assert parse_store("./s3:b") == str(Path.cwd() / "s3:b")  # a folder of that name, said so
    assert parse_store("file://localhost/tmp/st") == "/tmp/st"
    assert parse_store("hdfs:///warehouse/st") == "hdfs:///warehouse/st"  # the default namenode
    assert store_from(None, {"ASSAY_STORE": ""}) is None
    with pytest.raises(SpecError, match="--store is empty"):
        store_from(" ", {})


SPEC = """
name: s3night
sources:
  - name: model
    kind: file
    path: answers.jsonl
    fields: {prompt: q, completion: c, task_id: id, reward: r}
measure:
  pass_at: {k: 1}
nightly:
  must_not_regress: [pass@1]
"""


@pytest.mark.server
@pytest.mark.slow
def test_nightly_with_an_s3_store_writes_to_the_bucket(prefect_server: str, s3: Any,
                                                      tmp_path: Path) -> None:
    from pyarrow import fs

    (tmp_path / "spec.yaml").write_text(SPEC)
    with open(tmp_path / "answers.jsonl", "w") as f:
        for i in range(12):
            f.write(f'{{"id": "t{i}", "q": "q{i}", "c": "c{i}", "r": {i % 2}}}\n')
    env = {**os.environ, **s3.env, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
           "PREFECT_API_URL": prefect_server}
    env.pop("ASSAY_STORE", None)
    p = subprocess.run([str(BIN / "assay"), "nightly", "spec.yaml", "--night", "2026-11-01",
                        "--root", "nights", "--store", s3.url("nightly-flag")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert not (tmp_path / "s3:").exists() and not (tmp_path / ".assay").exists()
    bucket = fs.S3FileSystem(access_key=s3.env["AWS_ACCESS_KEY_ID"],
                             secret_key=s3.env["AWS_SECRET_ACCESS_KEY"],
                             endpoint_override=s3.endpoint, scheme="http", region="us-east-1")
    found = bucket.get_file_info(fs.FileSelector(f"{s3.bucket}/nightly-flag", recursive=True,
                                                 allow_not_found=True))
    assert any(i.type == fs.FileType.File and "/blobs/" in i.path for i in found), \
        [i.path for i in found]
    assert (tmp_path / "nights" / "s3night" / "2026-11-01" / "report.json").is_file()
