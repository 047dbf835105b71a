"""Reading a small file that someone else may have planted: one way for daemon and clients.

A path under a directory others can reach (a repository a clone brought, a spool, a data dir)
may hold a FIFO (an open blocks), a device (a read never ends) or a symlink (it leads
elsewhere). So it is opened without following a link and without blocking, checked as a
regular file on the descriptor itself, and read no further than a bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["read_regular"]


def read_regular(
    path: str | Path, limit: int, *, own: bool = False, private: bool = False
) -> bytes | None:
    """The bytes of the regular file at ``path``; None when it is missing, a symlink, not a
    regular file, longer than ``limit`` bytes, or unreadable. ``own``: also None when it is
    not this user's; ``private``: also when others may write it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        if (own or private) and st.st_uid != os.getuid():
            return None
        if private and st.st_mode & 0o022:
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None
