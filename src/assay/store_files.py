"""Where a store's bytes live: a local folder (plain file calls) or an object store / any
filesystem ``pyarrow.fs`` serves (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``) by URL.

Both speak in paths relative to the store's root ("blobs/ab/ab12....json"). A location string
is a local path, a ``file://`` URL (the same as its path) or a URL; credentials come from the
standard variables (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...), never from the store.

Example:
    >>> import tempfile
    >>> f = open_files(tempfile.mkdtemp())
    >>> f.write("a/b.json", [b"{}"]); f.read("a/b.json"), [e.rel for e in f.list("a")]
    (b'{}', ['a/b.json'])
"""

from __future__ import annotations

import calendar
import contextlib
import errno
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

from assay.errors import StoreError, StoreFullError
from assay.filemode import create_temp

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: reads of one object on an object store before its failure is the store's (see read_with_mtime)
READ_ATTEMPTS = 3


@dataclass(frozen=True)
class Entry:
    """One stored file: its path under the root, size, last-modified time (epoch seconds) and
    where it is, for messages (a local path, or a URL without credentials)."""

    rel: str
    size: int
    mtime: float
    where: str


class Files(Protocol):
    """What a store needs of the place its bytes live."""

    remote: bool
    location: str

    def read(self, rel: str) -> bytes | None: ...

    def read_with_mtime(self, rel: str) -> tuple[bytes, float] | None: ...

    def write(self, rel: str, parts: Sequence[Any], *, durable: bool = True) -> None: ...

    def delete(self, rel: str) -> None: ...

    def touch(self, rel: str, data: bytes) -> None: ...

    def list(self, prefix: str) -> list[Entry]: ...

    def move(self, rel: str, dest: str) -> None: ...

    def exists(self) -> bool: ...

    def where(self, rel: str) -> str: ...


def atomic_write(path: Path, data: bytes | Sequence[Any], *, durable: bool = True) -> None:
    """Write ``data`` (bytes, or a sequence of buffers written one after another) to ``path`` so a
    reader sees the old file or the whole new one, never a part. ``durable=False`` skips the
    fsync: after a power loss the file may be lost or torn (the store's verified reads then
    treat it as missing), for data that is cheaper to rebuild than to sync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(path.parent, f".{path.name}.", ".tmp")  # the umask, not 0600
    try:
        with os.fdopen(fd, "wb") as f:
            parts: Sequence[Any] = (
                [data] if isinstance(data, (bytes, bytearray, memoryview)) else data)
            for part in parts:
                f.write(part)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


#: what a full disk (or a spent quota) says
_FULL = {errno.ENOSPC, errno.EDQUOT}


def full_error(store: str, path: str | os.PathLike[str], e: OSError) -> StoreFullError | None:
    """The error for a write that ``e`` (an OSError) ended, naming the store and the file, when
    ``e`` says the disk is full; None for any other OSError (the caller re-raises it).

    Example:
        >>> err = full_error("/st", "/st/blobs/x.json", OSError(errno.ENOSPC, "No space left"))
        >>> str(err).split(";")[0]
        'store /st: writing /st/blobs/x.json failed: the disk is full (No space left)'
    """
    if e.errno not in _FULL:
        return None
    why = "the disk is full" if e.errno == errno.ENOSPC else "the disk quota is spent"
    return StoreFullError(f"store {store}: writing {os.fspath(path)} failed: {why} "
                          f"({e.strerror or e}); free space on it, then rerun (what was "
                          "committed is kept)")


def is_url(location: str) -> bool:
    """Whether ``location`` names a filesystem by URL (``file://`` counts as a local path)."""
    return bool(_URL.match(location)) and not location.startswith("file://")


def absolute(location: str) -> str:
    """``location`` as another process (another working folder) must be given it: a URL as it
    is, a path or ``file://`` URL as an absolute path.

    Example:
        >>> absolute("s3://bucket/p"), absolute("file:///data/st"), absolute("/data/st")
        ('s3://bucket/p', '/data/st', '/data/st')
    """
    if is_url(location):
        return location
    if location.startswith("file://"):
        location = unquote(urlsplit(location).path)
    return str(Path(location).resolve())


def redact(url: str) -> str:
    """``url`` without a password (``s3://key:secret@bucket`` -> ``s3://key@bucket``) or query
    (which may carry keys), fit for run.json and logs.

    Example:
        >>> redact("s3://AK:SK@bucket/p?endpoint_override=x&secret_key=y")
        's3://AK@bucket/p'
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = user.split(":", 1)[0] + "@" + host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def open_files(location: str | os.PathLike[str]) -> Files:
    """The files behind a store location (see module docstring)."""
    loc = os.fspath(location)
    if loc.startswith("file://"):
        return LocalFiles(Path(unquote(urlsplit(loc).path)))
    if is_url(loc):
        return ObjectFiles(loc)
    return LocalFiles(Path(loc))


class LocalFiles:
    """A local folder: temp file + fsync + rename per write (a reader sees all or nothing)."""

    remote = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    def read(self, rel: str) -> bytes | None:
        try:
            return (self.root / rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_with_mtime(self, rel: str) -> tuple[bytes, float] | None:
        data = self.read(rel)
        return None if data is None else (data, time.time())

    def write(self, rel: str, parts: Sequence[Any], *, durable: bool = True) -> None:
        try:
            atomic_write(self.root / rel, parts, durable=durable)
        except OSError as e:
            full = full_error(self.location, self.root / rel, e)
            if full is None:
                raise
            raise full from e

    def delete(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    def touch(self, rel: str, data: bytes) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.root / rel)

    def list(self, prefix: str) -> list[Entry]:
        top = self.root / prefix
        out = []
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                out.append(Entry(p.relative_to(self.root).as_posix(), st.st_size, st.st_mtime,
                                 str(p)))
        return sorted(out, key=lambda e: e.rel)

    def move(self, rel: str, dest: str) -> None:
        (self.root / dest).parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.root / rel, self.root / dest)

    def exists(self) -> bool:
        return self.root.is_dir()


def _one_put(f: FileSystem) -> FileSystem:
    """``f`` (an S3 filesystem) opening its output streams lazily: a write that fits one part
    is then one PutObject at close, not a multipart upload's three requests (create, part,
    complete), each a round trip and a commit on the server. Rebuilt through the filesystem's
    own pickling (its options, credentials still from the environment); other filesystems as
    they are. A failure to open then shows at close, which ``ObjectFiles.write`` reaches in the
    same call."""
    from pyarrow import fs

    if not isinstance(f, fs.S3FileSystem):
        return f
    rebuild, args = f.__reduce__()[:2]
    if not (args and isinstance(args[0], dict) and "allow_delayed_open" in args[0]):
        return f
    return rebuild({**args[0], "allow_delayed_open": True})


class ObjectFiles:
    """A bucket prefix through ``pyarrow.fs``: one PUT per write (atomic: an object appears
    whole or not at all), last-modified times from the server."""

    remote = True

    def __init__(self, url: str, *, connect: bool = True) -> None:
        self.url = url
        self.location = redact(url).rstrip("/")
        self._fs: FileSystem | None = None
        self._base = ""
        self._open_lock = threading.Lock()
        if connect:
            self._open()

    def _open(self) -> None:
        # from_uri may ask the server (an S3 bucket's region) and reads the credentials: a
        # store unpickled on a worker (``connect=False``) does this on its first request, there
        from pyarrow import fs

        with self._open_lock:
            if self._fs is not None:
                return
            try:
                got, base = fs.FileSystem.from_uri(self.url)
            except (OSError, ValueError, TypeError) as e:
                raise StoreError(f"store {self.location}: cannot open it ({e}); give a local "
                                 "path, a file:// URL or an object-store URL such as "
                                 "s3://bucket/prefix (credentials and endpoint from "
                                 "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, "
                                 "AWS_ENDPOINT_URL)") from None
            self._base = base.rstrip("/")
            self._fs = _one_put(got)

    @property
    def fs(self) -> FileSystem:
        """The ``pyarrow.fs`` filesystem (made on first use when built with connect=False)."""
        if self._fs is None:
            self._open()
        return self._fs

    @property
    def base(self) -> str:
        """The store's path within its filesystem (the bucket and prefix)."""
        if self._fs is None:
            self._open()
        return self._base

    def where(self, rel: str) -> str:
        return f"{self.location}/{rel}"

    def _path(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def _err(self, what: str, rel: str, e: OSError) -> StoreError:
        return StoreError(f"store {self.location}: {what} {rel} failed: {e} (check the endpoint "
                          "and credentials: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                          "AWS_SECRET_ACCESS_KEY, AWS_REGION)")

    def read_with_mtime(self, rel: str) -> tuple[bytes, float] | None:
        for attempt in range(READ_ATTEMPTS):
            try:
                with self.fs.open_input_stream(self._path(rel)) as f:
                    data = f.read()
                    meta = f.metadata()
                break
            except FileNotFoundError:
                return None
            except OSError as e:
                # an object replaced or removed while it streams (another process renewing or
                # releasing a small document: SeaweedFS cuts the response) reads whole, or
                # absent, the next time; pyarrow's own retries stop at the response's headers
                if attempt == READ_ATTEMPTS - 1:
                    raise self._err("reading", rel, e) from None
        stamp = meta.get(b"Last-Modified") or meta.get("Last-Modified")
        mtime = time.time()
        if stamp:
            with contextlib.suppress(ValueError):
                s = stamp.decode() if isinstance(stamp, bytes) else str(stamp)
                mtime = calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))
        return data, mtime

    def read(self, rel: str) -> bytes | None:
        got = self.read_with_mtime(rel)
        return None if got is None else got[0]

    def write(self, rel: str, parts: Sequence[Any], *, durable: bool = True) -> None:
        # one buffer, one write, then close: the object is published only when close completes
        # the upload, so a killed writer leaves nothing
        data = b"".join(bytes(p) for p in parts) if len(parts) != 1 else parts[0]
        try:
            with self.fs.open_output_stream(self._path(rel)) as out:
                out.write(data)
        except OSError as e:
            raise self._err("writing", rel, e) from None

    def delete(self, rel: str) -> None:
        try:
            self.fs.delete_file(self._path(rel))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._err("deleting", rel, e) from None

    def touch(self, rel: str, data: bytes) -> None:
        self.write(rel, [data])  # an object's time changes only when it is written again

    def list(self, prefix: str) -> list[Entry]:
        from pyarrow import fs

        try:
            infos = self.fs.get_file_info(
                fs.FileSelector(self._path(prefix), recursive=True, allow_not_found=True))
        except OSError as e:
            raise self._err("listing", prefix, e) from None
        out = []
        n = len(self.base) + 1
        for i in infos:
            if i.type != fs.FileType.File:
                continue
            rel = i.path[n:]
            mtime = i.mtime.timestamp() if i.mtime is not None else time.time()
            out.append(Entry(rel, int(i.size or 0), mtime, self.where(rel)))
        return sorted(out, key=lambda e: e.rel)

    def move(self, rel: str, dest: str) -> None:
        try:
            self.fs.copy_file(self._path(rel), self._path(dest))
            self.fs.delete_file(self._path(rel))
        except OSError as e:
            raise self._err("moving", rel, e) from None

    def exists(self) -> bool:
        from pyarrow import fs

        try:
            return self.fs.get_file_info(self.base).type != fs.FileType.NotFound
        except OSError as e:
            raise self._err("checking", "", e) from None
