"""What installing assay puts in a user's environment: the wheel holds one top-level package,
``assay`` (the orchestration as ``assay.flows`` and ``assay.tasks``), so a user's own ``tasks`` or
``flows`` module stays theirs; installed from it, ``import assay`` beside a clone named assay is
the installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _checkout_copy(dst: Path) -> Path:
    """The files git tracks (and untracked ones it does not ignore), links kept as links: a build
    never writes into this checkout, and nothing ignored (a venv, runs) goes in."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    for name in sorted(set(names.decode().split("\0")) - {""}):
        src, out = ROOT / name, dst / name
        if not src.is_symlink() and not src.exists():
            continue  # deleted in the working tree, not yet committed
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            out.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, out)
    return dst


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    tree = _checkout_copy(base / "assay")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--no-index", "-q", "-w", str(base / "dist"), str(tree)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (whl,) = (base / "dist").glob("assay-*.whl")
    return whl


def test_the_wheel_installs_only_the_assay_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"assay", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    # the repository's flows/ and tasks/ are inside the package, with the core's data files
    for name in ["assay/flows/study.py", "assay/flows/nightly.py", "assay/tasks/stages.py",
                 "assay/py.typed", "assay/view/static/index.html"]:
        assert name in names, name
    meta = zipfile.ZipFile(wheel)
    (eps,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "assay = assay.cli:console" in meta.read(eps).decode()
    (tl,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert meta.read(tl).decode().split() == ["assay"]


@pytest.mark.slow
def test_installed_from_the_wheel_assay_beside_a_clone_named_assay_is_the_package(
        wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    py = venv / "bin" / "python"
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                        "--no-deps", "--no-index", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True,
                               timeout=60).stdout.strip())
    # the dependencies from this suite's environment, after the wheel's own site-packages (a
    # plain path line: the development install's .pth files there are not processed)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    parent = tmp_path / "parent"
    parent.mkdir()
    (parent / "assay").symlink_to(ROOT)  # a clone named assay, seen from its parent
    code = ("import importlib.util, assay, assay.flows.study, assay.tasks.stages; "
            "r = assay.rows(['q'], ['a'], [1]); "
            "print(assay.__file__, assay.flows.study.__file__, r[0]['reward'], "
            "importlib.util.find_spec('tasks'), importlib.util.find_spec('flows'))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([str(py), "-c", code], cwd=parent, capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    init, study, reward, tasks_spec, flows_spec = p.stdout.split()
    assert Path(init) == site / "assay" / "__init__.py"
    assert Path(study) == site / "assay" / "flows" / "study.py"
    assert (reward, tasks_spec, flows_spec) == ("1.0", "None", "None")
