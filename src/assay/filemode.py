"""A temp file for an atomic write that gets the mode a plain ``open(path, "w")`` would get.

``tempfile.mkstemp`` makes 0600 files whatever the umask; renamed into place, a teammate could
open the page but not the report beside it. Here the kernel applies the umask (and any default
ACL) to 0o666, as it does for every ordinary file.

Example:
    >>> import os, tempfile
    >>> old = os.umask(0o022)
    >>> fd, p = create_temp(tempfile.mkdtemp(), ".x.", ".tmp"); os.close(fd); _ = os.umask(old)
    >>> oct(os.stat(p).st_mode & 0o777)
    '0o644'
"""

from __future__ import annotations

import os
import secrets

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(
    os, "O_BINARY", 0)


def create_temp(directory: str | os.PathLike[str], prefix: str, suffix: str) -> tuple[int, str]:
    """Create a new, uniquely named file in ``directory`` (mode 0o666 less the umask) and
    return its open descriptor and path, as ``tempfile.mkstemp`` does.

    Example:
        >>> import os, tempfile
        >>> fd, p = create_temp(tempfile.mkdtemp(), ".a.", ".tmp"); os.close(fd)
        >>> os.path.basename(p).startswith(".a.") and p.endswith(".tmp")
        True
    """
    for _ in range(100):
        path = os.path.join(os.fspath(directory), f"{prefix}{secrets.token_hex(8)}{suffix}")
        try:
            return os.open(path, _FLAGS, 0o666), path
        except FileExistsError:  # 64 random bits: a clash means another writer, try again
            continue
    raise FileExistsError(f"no free temp name in {directory} after 100 tries")
