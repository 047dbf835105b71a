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
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import msgspec

from . import protocol as p
from .client import RemoteError, connect
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

# A day of heavy hook traffic fits; a spool this full means no daemon has run for long.
MAX_FILES = 10_000
MAX_BYTES = 32 * 1024 * 1024
_SUFFIX = ".json"


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


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(SpooledCapture).decode

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
            return sorted(n for n in os.listdir(self.directory) if n.endswith(_SUFFIX))
        except FileNotFoundError:
            return []

    async def replay(
        self, sock: Path, admin_token: str | None, on_reply: OnReply | None = None
    ) -> int | None:
        """Send every spooled file to the daemon on ``sock``, oldest first, each removed once
        all its episodes are answered; the number of files sent, or None when another process
        is replaying the spool now (it sends what is here, this call's files included).

        A refused episode (invalid, forbidden) is answered, so it goes with its file; the
        refusal reaches ``on_reply``.

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
        try:
            # Until empty: captures may add files while this one sends.
            while names := self.names():
                for name in names:
                    capture = self._read(name)
                    if capture is not None:
                        await _send(sock, admin_token, name, capture, on_reply)
                    (self.directory / name).unlink(missing_ok=True)
                    self._sync_directory()
                    sent += 1
        finally:
            os.close(lock)
        return sent

    def _read(self, name: str) -> SpooledCapture | None:
        path = self.directory / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
            return _decode(data)
        except (OSError, msgspec.DecodeError) as exc:
            # Kept for the user to look at, out of the way of the replay.
            log.error("spooled capture %s cannot be read (%s); moved aside as .bad", path, exc)
            os.replace(path, path.with_name(name + ".bad"))
            return None

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


async def _send(
    sock: Path,
    admin_token: str | None,
    name: str,
    capture: SpooledCapture,
    on_reply: OnReply | None,
) -> None:
    agent_token = (
        read_token_file(Path(capture.agent_token_file)) if capture.agent_token_file else None
    )
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
