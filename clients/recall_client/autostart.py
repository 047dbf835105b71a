"""Starting a daemon from recall-mcp when none answers and systemd is not managing one.

Several agents start their shims at about the same moment, so the start is serialised by an
exclusive ``flock`` on a file in the data dir: the first shim to hold it starts the daemon
and waits for its READY=1 (sd_notify on a socket of its own); the others, once they hold the
lock in turn, find a daemon running on the data dir and start nothing. The lock lives in the
data dir, not beside the socket, because two shims whose environments differ (one without
``XDG_RUNTIME_DIR``) look for different sockets but share the data dir, which is what two
daemons must not share. The kernel drops the lock when its holder dies, so a crashed shim
never wedges the others.

Turned off by ``RECALLD_AUTOSTART=0`` or ``autostart = false`` in config.toml.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import anyio

from . import running
from .launch import DaemonStartFailed, daemon_command, start_daemon
from .paths import data_dir, log_file

__all__ = ["STARTUP_TIMEOUT", "AutostartFailed", "ensure_daemon"]

# Up to READY=1: the database opened and migrated, the socket bound. The model loads after.
STARTUP_TIMEOUT = 30.0
# The log of daemons started this way; rotated once when it grows past this.
LOG_LIMIT = 5 * 1024 * 1024

# Popen objects of the daemons this process started: kept so they are not collected (and
# warned about) while the daemon, which outlives the shim by design, runs on.
_started: list[subprocess.Popen[bytes]] = []


class AutostartFailed(RuntimeError):
    """A daemon was started but did not report ready; the message says where its log is."""


async def ensure_daemon(sock: Path, *, wait: bool = True) -> bool:
    """Make sure a daemon answers on ``sock``, or runs on this data dir; True when this call
    started it (on ``sock``).

    Without ``wait``, a start under way elsewhere (the lock is held) is left to finish on its
    own and this returns False at once (``recallctl capture``: its hook has a deadline, and
    that daemon replays the spool when it runs).

    Raises:
        AutostartFailed: the daemon exited or stayed silent; see the log named.
        OSError: the data dir or the lock file cannot be created.
    """
    # Never through a symlink planted there; the data dir is the user's own (the daemon
    # keeps the store in it), so no other user can swap the file.
    store = data_dir()
    store.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = os.open(
        store / ".autostart-lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        if not wait:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        else:
            # Blocks while another shim starts the daemon; that is bounded by its own timeout.
            await anyio.to_thread.run_sync(fcntl.flock, lock, fcntl.LOCK_EX)
        # A daemon holding the data dir (on whatever socket it recorded) is the one to use:
        # another would refuse to start beside it.
        if running.held(store) or await _answers(sock):
            return False
        await _start(sock)
        return True
    finally:
        os.close(lock)  # releases the lock


async def _answers(sock: Path) -> bool:
    try:
        with anyio.fail_after(2):
            stream = await anyio.connect_unix(sock)
    except (OSError, TimeoutError):
        return False
    await stream.aclose()
    return True


def _open_log() -> int:
    path = log_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        if path.stat().st_size > LOG_LIMIT:
            path.replace(path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    return os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )


async def _start(sock: Path) -> None:
    path = log_file()
    log_fd = _open_log()
    try:
        started = await start_daemon(
            [*daemon_command(), "--socket", str(sock)],
            os.environ,
            stderr=log_fd,
            timeout=STARTUP_TIMEOUT,
            detach=True,
            cwd="/",
        )
    except DaemonStartFailed as exc:
        raise AutostartFailed(f"{exc}; see {path}") from exc
    finally:
        os.close(log_fd)
    _started.append(started.proc)
