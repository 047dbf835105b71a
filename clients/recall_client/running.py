"""The running daemon's claim on its data dir: one daemon per store, and where it listens.

A daemon locks ``daemon.lock`` in its data dir for its whole life, so a second daemon on the
same store refuses to start instead of writing beside the first (two writers, two vector
indexes: a memory stored through one is never found by meaning through the other). The lock
is an open file description lock (``F_OFD_SETLK``): the kernel drops it when the daemon
dies, kill -9 included, and unlike ``flock`` anyone may test it without taking it
(``F_OFD_GETLK``), so a client's look never makes a starting daemon fail.

Beside it, ``daemon.json`` records the daemon's pid and the socket it listens on (written
after it binds, replaced atomically). A client looks there before any default, so it
finds the daemon whatever its environment: a host that drops ``XDG_RUNTIME_DIR`` still
shares the data dir, which depends only on ``HOME``. A record is believed only while its
lock is held by the pid it names (a record a killed daemon left is stale), and only when
it is a small regular file of this user's that others cannot write.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from pathlib import Path

import msgspec

from .files import read_regular

__all__ = [
    "LOCK_NAME",
    "RECORD_NAME",
    "Claim",
    "DaemonRecord",
    "DataDirInUse",
    "claim",
    "held",
    "running",
]

LOCK_NAME = "daemon.lock"
RECORD_NAME = "daemon.json"
# A record is a pid and a socket path (at most 108 bytes): anything larger is not ours.
_RECORD_MAX = 4096
# struct flock (fcntl(2)): l_type, l_whence, l_start, l_len, l_pid, padded as the C struct.
_FLOCK = "hhqqi4x"
_WHOLE_FILE_WRITE = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)


class DaemonRecord(msgspec.Struct, forbid_unknown_fields=True):
    """What the daemon holding a data dir's lock says of itself."""

    pid: int
    socket: str


class DataDirInUse(RuntimeError):
    """Another daemon holds the data dir; the message names it (pid, socket)."""


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(DaemonRecord).decode


class Claim:
    """The lock a daemon holds on its data dir, and its record beside it."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self._fd = fd

    def record(self, socket: Path) -> None:
        """Say where this daemon listens: ``daemon.json``, 0600, written whole then renamed
        into place, so a reader sees the old record or the new one, never half of one.

        Raises:
            OSError: it cannot be written (a full disk, say).
        """
        data = _encode(DaemonRecord(pid=os.getpid(), socket=str(socket)))
        _write_replacing(self.data_dir / RECORD_NAME, data)

    def release(self) -> None:
        """Remove the record and drop the lock (the record is ours while we hold it)."""
        try:
            (self.data_dir / RECORD_NAME).unlink(missing_ok=True)
        finally:
            os.close(self._fd)


def claim(data_dir: Path) -> Claim:
    """Lock ``data_dir`` for this process (creating it, 0700, if missing); the pid goes into
    the lock file, for a second daemon's message while no record is written yet.

    Raises:
        DataDirInUse: another process holds it.
        OSError: the directory or the lock file cannot be made.
    """
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _WHOLE_FILE_WRITE)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        raise DataDirInUse(_in_use_message(data_dir)) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a full disk: the lock is what counts; the message then lacks the pid
    return Claim(data_dir, fd)


def held(data_dir: Path) -> bool:
    """Whether a process holds ``data_dir``'s lock (a daemon runs or is starting on it)."""
    return _holder(data_dir) is not None


def running(data_dir: Path) -> DaemonRecord | None:
    """The record of the daemon running on ``data_dir``, or None: no daemon holds its lock,
    it has not bound its socket yet, or the record is not one to trust (a stale one left
    by a killed daemon, another user's, a symlink, a FIFO, oversized, malformed)."""
    pid = _holder(data_dir)
    if pid is None:
        return None
    data = read_regular(data_dir / RECORD_NAME, _RECORD_MAX, private=True)
    if data is None:
        return None
    try:
        record = _decode(data)
    except msgspec.DecodeError:
        return None
    if record.pid != pid or not os.path.isabs(record.socket):
        return None
    return record


def _holder(data_dir: Path) -> int | None:
    """The pid written in a held lock file (0 when it is unreadable), None when not held."""
    try:
        fd = os.open(data_dir / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        found = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _WHOLE_FILE_WRITE)
        if struct.unpack(_FLOCK, found)[0] == fcntl.F_UNLCK:
            return None
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
        return int(text) if text.isdigit() else 0
    except OSError:
        return None
    finally:
        os.close(fd)


def _in_use_message(data_dir: Path) -> str:
    record = running(data_dir)
    if record is not None:
        who = f"pid {record.pid}, listening on {record.socket}"
    else:
        pid = _holder(data_dir)
        who = f"pid {pid}, starting" if pid else "starting"
    return (
        f"another recalld ({who}) already runs on the data dir {data_dir}; two daemons on one "
        "store would corrupt it. Use that one, or stop it first"
    )


def _write_replacing(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
