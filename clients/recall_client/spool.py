"""A durable queue of captured episodes, so a hook that fires while no daemon answers loses
nothing (``recallctl capture``).

Every capture goes through it: the episodes one ``recallctl capture`` read are written to one
0600 file in ``$XDG_STATE_HOME/recalld/spool`` (fsync'd, then renamed into place, so a file
there is always whole), then sent. A file is removed only once the daemon has acknowledged
every episode in it. Whoever reaches the daemon replays the spool, oldest file first, under
an exclusive lock: the capture that wrote it, the next capture, the daemon when it starts.
A crash between an acknowledgement and the removal sends a file again; every spooled episode
carries an idempotency key, so the daemon answers a repeat with the episode it stored
(``replayed``) and stores nothing twice.

The replay reads in a thread, and only regular files (a FIFO planted under a spooled name
would otherwise block whoever opens it: the daemon at start). A file that cannot be sent,
because it does not parse or its agent's token file can no longer be read, is moved into
``rejected/`` with a ``.reason`` beside it, and the replay goes on with the next: one bad
file must not hold back every later capture until the spool is full. When the spool is
full, the refused episodes are counted in ``.dropped``; ``recallctl status`` and the page
report both (:meth:`Spool.status`), so a hook need not tell the agent.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import msgspec

from . import protocol as p
from .client import RemoteError, connect
from .files import read_regular
from .paths import ensure_private_dir, read_token_file, state_dir

__all__ = [
    "MAX_BYTES",
    "MAX_FILES",
    "OnReply",
    "Spool",
    "SpoolFull",
    "SpooledCapture",
    "default_spool",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# A day of heavy hook traffic fits; a spool this full means no daemon has run for long.
MAX_FILES = 10_000
MAX_BYTES = 32 * 1024 * 1024
_SUFFIX = ".json"
REJECTED = "rejected"
_REASON = ".reason"
# Episodes refused because the spool was full (a _Dropped, updated under flock).
_DROPPED = ".dropped"
# A reason or the counter is a line: anything longer was not written by this module.
_SMALL = 4096


class SpoolFull(OSError):
    """The spool holds as much as it may; the message says where and how to empty it."""


class SpooledCapture(msgspec.Struct, forbid_unknown_fields=True):
    """One ``recallctl capture``: its episodes and the hello it would have said them in."""

    agent: str
    workspace: str
    # Present the daemon's admin token (recallctl does unless --no-admin).
    admin: bool
    # recallctl's --agent-token-file, read again when the file is sent.
    agent_token_file: str | None
    episodes: list[p.CaptureEpisode]


class _Dropped(msgspec.Struct):
    episodes: int = 0
    last_at: float | None = None


@dataclass(slots=True)
class _Loaded:
    """A spooled file read and ready to send: its capture and the agent's token."""

    capture: SpooledCapture
    agent_token: str | None


class _Unsendable(Exception):
    """A spooled file that no replay can send; the message says why."""


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(SpooledCapture).decode
_decode_dropped = msgspec.json.Decoder(_Dropped).decode

# Called with the file's name, the episode's index in it, and the reply or the refusal.
OnReply = Callable[[str, int, p.EpisodeCaptured | RemoteError], None]


def default_spool() -> Spool:
    return Spool(state_dir() / "spool")


class Spool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def add(self, capture: SpooledCapture) -> str:
        """Write ``capture`` durably; the name of its file.

        Each episode gets an idempotency key (if it has none) and its time (if it has none),
        so a replay stores it once, at the time it happened.

        Raises:
            SpoolFull: the spool has no room for it.
            OSError: the directory or the file cannot be written.
        """
        ensure_private_dir(self.directory)
        now = time.time()
        capture.episodes = [
            msgspec.structs.replace(
                ep,
                idempotency_key=ep.idempotency_key or f"spool:{uuid.uuid4().hex}",
                ts=ep.ts if ep.ts is not None else now,
            )
            for ep in capture.episodes
        ]
        data = _encode(capture)
        files, size = self._usage()
        if files + 1 > MAX_FILES or size + len(data) > MAX_BYTES:
            self._count_dropped(len(capture.episodes))
            raise SpoolFull(
                f"the capture spool {self.directory} is full ({files} files, {size} bytes; "
                f"at most {MAX_FILES} files, {MAX_BYTES} bytes): start recalld "
                "(`recallctl status` says whether it runs) and it replays the spool"
            )
        # Names sort in the order captures were made; the random tail keeps racers apart.
        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}{_SUFFIX}"
        tmp = self.directory / f".{name}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, self.directory / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._sync_directory()
        return name

    def names(self) -> list[str]:
        """The spooled files, oldest first."""
        try:
            return sorted(
                n for n in os.listdir(self.directory) if n.endswith(_SUFFIX) and n[0] != "."
            )
        except FileNotFoundError:
            return []

    async def replay(
        self, sock: Path, admin_token: str | None, on_reply: OnReply | None = None
    ) -> int | None:
        """Send every spooled file to the daemon on ``sock``, oldest first, each removed once
        all its episodes are answered; the number of files sent, or None when another process
        is replaying the spool now (it sends what is here, this call's files included).

        A refused episode (invalid, forbidden) is answered, so it goes with its file; the
        refusal reaches ``on_reply``. A file no replay can send is moved to ``rejected/``
        with its reason, and the replay goes on.

        Raises:
            DaemonUnavailable: the daemon went away; what is left stays for the next replay.
            RemoteError: a retryable refusal (busy, draining): likewise.
            OSError: a file cannot be removed.
        """
        # Nothing to send, so nothing to lock: the daemon's systemd unit sees this directory
        # read-only, and captures, which reach that daemon through its socket, send then.
        if not self.names():
            return 0
        lock = self._try_lock()
        if lock is None:
            return None
        sent = 0
        # Files that could be neither sent nor moved aside: left for the user, not retried.
        stuck: set[str] = set()
        try:
            # Until empty: captures may add files while this one sends.
            while names := [n for n in self.names() if n not in stuck]:
                for name in names:
                    # Off the event loop: it opens files and may wait on the disk.
                    loaded = await anyio.to_thread.run_sync(self._load, name)
                    if loaded is None:
                        if (self.directory / name).exists():
                            stuck.add(name)
                        continue
                    await _send(sock, admin_token, name, loaded, on_reply)
                    await anyio.to_thread.run_sync(self._remove, name)
                    sent += 1
        finally:
            os.close(lock)
        return sent

    def status(self) -> p.SpoolStatus:
        """What waits in the spool, what was moved aside and why, what was dropped for want
        of room (blocking: the daemon runs it in a thread)."""
        try:
            files, size = self._usage()
        except FileNotFoundError:
            files, size = 0, 0
        rejected_dir = self.directory / REJECTED
        try:
            reasons = sorted(n for n in os.listdir(rejected_dir) if n.endswith(_REASON))
        except OSError:
            reasons = []
        dropped = _decode_small(self.directory / _DROPPED, _decode_dropped) or _Dropped()
        last = _decode_small(rejected_dir / reasons[-1], _text) if reasons else None
        return p.SpoolStatus(
            directory=str(self.directory),
            waiting=len(self.names()),
            waiting_bytes=size,
            full=files >= MAX_FILES or size >= MAX_BYTES,
            rejected=len(reasons),
            last_rejection=last.strip() if last else None,
            dropped=dropped.episodes,
            last_dropped_at=dropped.last_at,
        )

    def _load(self, name: str) -> _Loaded | None:
        """The file and its agent's token, or None when it is gone or was moved aside."""
        try:
            capture = self._read(name)
            if capture is None:
                return None
            token_file = capture.agent_token_file
            try:
                agent_token = read_token_file(Path(token_file)) if token_file else None
            except PermissionError as exc:
                raise _Unsendable(str(exc)) from exc
        except _Unsendable as exc:
            self._reject(name, str(exc))
            return None
        return _Loaded(capture, agent_token)

    def _read(self, name: str) -> SpooledCapture | None:
        path = self.directory / name
        try:
            # Never block on a FIFO, never follow a symlink planted under a spooled name.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _Unsendable("a symlink, not a spooled capture") from None
            raise _Unsendable(f"cannot be opened: {exc}") from None
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise _Unsendable("not a regular file")
            try:
                data = fh.read(MAX_BYTES + 1)
            except OSError as exc:
                raise _Unsendable(f"cannot be read: {exc}") from None
        if len(data) > MAX_BYTES:
            raise _Unsendable(f"larger than the spool's bound ({MAX_BYTES} bytes)")
        try:
            return _decode(data)
        except msgspec.DecodeError as exc:
            raise _Unsendable(f"not a spooled capture: {exc}") from None

    def _reject(self, name: str, reason: str) -> None:
        """Move ``name`` into rejected/ with its reason, kept for the user to look at."""
        rejected = self.directory / REJECTED
        try:
            ensure_private_dir(rejected)
            os.replace(self.directory / name, rejected / name)
            _write_small(rejected / (name + _REASON), f"{name}: {reason}\n".encode())
            self._sync_directory()
        except OSError as exc:
            log.error(
                "spooled capture %s cannot be sent (%s) nor moved aside: %s", name, reason, exc
            )
            return
        log.error("spooled capture %s cannot be sent (%s); moved to %s", name, reason, rejected)

    def _remove(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)
        self._sync_directory()

    def _count_dropped(self, episodes: int) -> None:
        # Best effort: the refusal itself (SpoolFull) must reach the caller whatever happens.
        try:
            fd = os.open(
                self.directory / _DROPPED,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            log.warning("cannot count the episodes the full spool dropped: %s", exc)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held for a read and a write
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            try:
                before = _decode_dropped(os.pread(fd, _SMALL, 0))
            except msgspec.DecodeError:
                before = _Dropped()
            after = _Dropped(episodes=before.episodes + episodes, last_at=time.time())
            os.ftruncate(fd, 0)
            os.pwrite(fd, _encode(after), 0)
        except OSError as exc:
            log.warning("cannot count the episodes the full spool dropped: %s", exc)
        finally:
            os.close(fd)

    def _usage(self) -> tuple[int, int]:
        files = size = 0
        with os.scandir(self.directory) as entries:
            for entry in entries:
                try:
                    size += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue  # replayed meanwhile
                files += 1
        return files, size

    def _try_lock(self) -> int | None:
        ensure_private_dir(self.directory)
        fd = os.open(
            self.directory / ".replay-lock",
            os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _decode_small(path: Path, decode: Callable[[bytes], T]) -> T | None:
    """A small file of ours decoded, or None when it is missing, not a regular file of
    this user's, oversized or malformed."""
    data = read_regular(path, _SMALL, own=True)
    if data is None:
        return None
    try:
        return decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None


def _text(data: bytes) -> str:
    return data.decode(errors="replace")


def _write_small(path: Path, data: bytes) -> None:
    # O_NONBLOCK: a FIFO planted under the name fails (ENXIO) instead of waiting for a reader.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with os.fdopen(fd, "wb") as fh:
        fh.write(data[:_SMALL])


async def _send(
    sock: Path,
    admin_token: str | None,
    name: str,
    loaded: _Loaded,
    on_reply: OnReply | None,
) -> None:
    capture, agent_token = loaded.capture, loaded.agent_token
    answered = 0
    try:
        async with connect(
            agent=capture.agent,
            workspace=capture.workspace,
            client="recallctl",
            path=sock,
            admin_token=admin_token if capture.admin else None,
            agent_token=agent_token,
        ) as rc:
            for episode in capture.episodes:
                try:
                    reply: p.EpisodeCaptured | RemoteError = await rc.call(
                        episode, p.EpisodeCaptured
                    )
                except RemoteError as exc:
                    if exc.retryable:
                        raise
                    reply = exc
                if on_reply is not None:
                    on_reply(name, answered, reply)
                answered += 1
    except RemoteError as exc:
        if exc.retryable:
            raise
        # The hello was refused (an agent name with a credential, say): final for the rest.
        for n in range(answered, len(capture.episodes)):
            if on_reply is not None:
                on_reply(name, n, exc)
