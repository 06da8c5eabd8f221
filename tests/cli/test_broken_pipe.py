"""`assay validate ... | head` (a reader gone before the output) prints no BrokenPipeError
traceback and exits as a command stopped by SIGPIPE does (141)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_stdout_prints_no_traceback() -> None:
    # the reader leaves before the command writes (it takes a second to start): its write fails
    p = subprocess.Popen([str(BIN / "assay"), "validate",
                          str(ROOT / "configs" / "quickstart.yaml")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode()
    rc = p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert rc == 141
