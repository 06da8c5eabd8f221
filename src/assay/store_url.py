"""One reading of a store location for every command: ``--store`` and ``ASSAY_STORE`` alike
become a URL kept as written (``s3://bucket/prefix``) or an absolute local path.

Why one parser: each command used to read the flag its own way, and ``Path("s3://b/p")``
quietly made a local folder named ``s3:``. A value that looks like a URL but is not one
(``s3:/bucket``, ``s3:bucket``, ``http://...``) is an input error naming its field.

Example:
    >>> parse_store("s3://bucket/prefix"), parse_store("file:///data/st"), parse_store("/data/st")
    ('s3://bucket/prefix', '/data/st', '/data/st')
    >>> try:
    ...     parse_store("s3:/bucket", field="--store")
    ... except SpecError as e:
    ...     print(str(e)[:40])
    --store 's3:/bucket': not a store URL (w
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from assay.errors import SpecError
from assay.paths import PREFECT_DIR, find_upward, user_cache_dir
from assay.store_files import is_url, redact

__all__ = ["ENV", "SCHEMES", "Located", "locate", "parse_store", "secret_bearing", "store_from"]

#: The variable a store location comes from when no flag gives one.
ENV = "ASSAY_STORE"

#: URL schemes ``pyarrow.fs.FileSystem.from_uri`` serves (``file://`` is read as a local path).
SCHEMES = frozenset({"s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs", "mock"})

#: ``scheme:`` at the start: two letters at least, so a drive letter (``C:``) is not one.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def parse_store(value: str, *, field: str = ENV) -> str:
    """``value`` (a ``--store`` flag or ``ASSAY_STORE``, named ``field`` in errors) as every
    process must be given it: a URL unchanged, a ``file://`` URL or a path made absolute
    (``~`` expanded). Raises :class:`SpecError` (exit 2) for a value that is neither."""
    text = value.strip()
    if not text:
        raise SpecError(f"{field} is empty: give a folder or a URL such as s3://bucket/prefix")
    m = _SCHEME.match(text)
    if m is None:
        return str(Path(os.path.expanduser(text)).resolve())
    scheme = m.group(1).lower()
    if not text[m.end():].startswith("//"):
        raise SpecError(f"{field} {value!r}: not a store URL (write scheme://bucket/prefix, "
                        "e.g. s3://bucket/prefix), nor a folder (write ./" + text
                        + " for a local folder of that name)")
    parts = urlsplit(text)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise SpecError(f"{field} {value!r}: a file:// URL names a folder on this machine "
                            "(file:///path), not on host " + repr(parts.netloc))
        return str(Path(unquote(parts.path) or "/").resolve())
    if scheme not in SCHEMES:
        raise SpecError(f"{field} {value!r}: {scheme}:// is not a store filesystem (one of "
                        + ", ".join(f"{s}://" for s in sorted(SCHEMES - {"mock"}))
                        + ", or a local folder)")
    if not parts.netloc and scheme in ("s3", "gs", "gcs", "abfs", "abfss"):
        raise SpecError(f"{field} {value!r}: no bucket (write {scheme}://bucket/prefix)")
    return text


def store_from(flag: str | None, environ: Mapping[str, str] | None = None, *,
               field: str = "--store") -> str | None:
    """The store a command uses: ``flag`` when given, else ``ASSAY_STORE``, each through
    :func:`parse_store`; None when neither is set (then :func:`locate` finds the run's).

    Example:
        >>> store_from(None, {"ASSAY_STORE": "s3://b/nightly"}), store_from(None, {})
        ('s3://b/nightly', None)
    """
    env = os.environ if environ is None else environ
    if flag is not None:
        return parse_store(flag, field=field)
    if env.get(ENV):
        return parse_store(env[ENV], field=ENV)
    return None


def secret_bearing(location: str) -> bool:
    """Whether a store location is a URL with a password or a query (which may hold keys): such
    a location travels in the environment, never as a flow parameter the server records.

    Example:
        >>> secret_bearing("s3://AK:SK@bucket/p"), secret_bearing("s3://bucket/p")
        (True, False)
    """
    return is_url(location) and redact(location) != location


@dataclass(frozen=True)
class Located:
    """Where a run keeps its content store and its embedded Prefect home, and why there."""

    store: str
    prefect_home: Path
    why: str

    def line(self) -> str:
        """The one line every ``run``/``nightly`` prints before its work (a key in a URL
        redacted)."""
        return f"store: {redact(self.store) if is_url(self.store) else self.store} ({self.why})"


def locate(given: str | None, spec_dirs: Sequence[str | os.PathLike[str]], *,
           given_by: str = "--store", prefect_home: str | None = None,
           environ: Mapping[str, str] | None = None) -> Located:
    """The store and Prefect home of a run of the specs in ``spec_dirs``. The store: ``given``
    (``--store`` or ``ASSAY_STORE``, already through :func:`store_from`), else a ``.assay``
    folder in the first spec's folder or one above it (a project's own store, found as git
    finds ``.git``), else this user's ``<cache>/store`` (:func:`assay.paths.user_cache_dir`).
    Why: a run from another working folder must find the completions it already paid for.
    The Prefect home: ``prefect_home``, else ``.prefect`` beside the project's ``.assay``, else
    ``<cache>/prefect``: one Prefect database wherever the run starts from.

    Example:
        >>> import tempfile
        >>> proj = Path(tempfile.mkdtemp()).resolve()
        >>> (proj / ".assay").mkdir(); (proj / "study").mkdir()
        >>> loc = locate(None, [proj / "study"], environ={"XDG_CACHE_HOME": "/c"})
        >>> loc.store == str(proj / ".assay"), loc.prefect_home == proj / ".prefect"
        (True, True)
        >>> loc = locate(None, ["/"], environ={"XDG_CACHE_HOME": "/c"})
        >>> loc.store, loc.prefect_home.as_posix()
        ('/c/assay/store', '/c/assay/prefect')
        >>> locate("s3://b/p", ["/"], environ={}).line()
        'store: s3://b/p (given by --store)'
    """
    project = find_upward(spec_dirs[0]) if spec_dirs else None
    cache = user_cache_dir(environ)
    if given:
        store, why = given, f"given by {given_by}"
    elif project is not None:
        store, why = str(project), "the project's, found above the spec; --store to choose another"
    else:
        store, why = str(cache / "store"), "this user's; --store or ASSAY_STORE to choose another"
    if prefect_home:
        home = Path(os.path.expanduser(prefect_home)).resolve()
    elif project is not None:
        home = project.parent / PREFECT_DIR
    else:
        home = cache / "prefect"
    return Located(store, home, why)
