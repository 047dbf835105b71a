"""Starting a daemon from recall-mcp when none answers and systemd is not managing one.

Several agents start their shims at about the same moment, so the start is serialised by an
exclusive ``flock`` on a file next to the socket: the first shim to hold it starts the
daemon and waits for its READY=1 (sd_notify on a socket of its own); the others, once they
hold the lock in turn, find the daemon answering and start nothing. The kernel drops the
lock when its holder dies, so a crashed shim never wedges the others.

Turned off by ``RECALLD_AUTOSTART=0`` or ``autostart = false`` in config.toml.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio

from .paths import ensure_private_dir, log_file

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


async def ensure_daemon(sock: Path) -> bool:
    """Make sure a daemon answers on ``sock``; True when this call started it.

    Raises:
        AutostartFailed: the daemon exited or stayed silent; see the log named.
        OSError: the socket's directory or the lock file cannot be created.
    """
    # The lock lives next to the socket: only in a directory no other user can change, and
    # never through a symlink planted there.
    ensure_private_dir(sock.parent)
    lock = os.open(sock.parent / f".{sock.name}.start-lock",
                   os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        # Blocks while another shim starts the daemon; that is bounded by its own timeout.
        await anyio.to_thread.run_sync(fcntl.flock, lock, fcntl.LOCK_EX)
        if await _answers(sock):
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


def _command(sock: Path) -> list[str]:
    # The recalld next to this interpreter is the one installed with this shim.
    script = Path(sys.executable).parent / "recalld"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "recalld"]
    return [*base, "--socket", str(sock)]


def _open_log() -> int:
    path = log_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        if path.stat().st_size > LOG_LIMIT:
            path.replace(path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600)


async def _start(sock: Path) -> None:
    path = log_file()
    # An abstract-namespace notify socket: no file to clean up, no path-length trouble.
    name = f"recall-mcp-{os.getpid()}-{os.urandom(4).hex()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as notify:
        notify.bind("\0" + name)
        notify.setblocking(False)
        env = dict(os.environ, NOTIFY_SOCKET="@" + name)
        for var in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC",
                    "WATCHDOG_PID"):
            env.pop(var, None)
        log_fd = _open_log()
        try:
            # Not anyio.open_process: the daemon must outlive this shim, and an asyncio
            # subprocess transport kills its process when it is closed.
            proc = subprocess.Popen(  # noqa: ASYNC220
                _command(sock), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log_fd, start_new_session=True, close_fds=True, cwd="/",
            )
        finally:
            os.close(log_fd)
        _started.append(proc)
        exited = os.pidfd_open(proc.pid)
        try:
            with anyio.move_on_after(STARTUP_TIMEOUT):
                while True:
                    # Whichever comes first: a notification, or the daemon exiting.
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_readable_then_cancel, notify, tg.cancel_scope)
                        tg.start_soon(_readable_then_cancel, exited, tg.cancel_scope)
                    if proc.poll() is not None:
                        raise AutostartFailed(
                            f"recalld exited with code {proc.returncode} at start; see {path}"
                        )
                    try:
                        message = notify.recv(4096).decode(errors="replace")
                    except BlockingIOError:
                        continue
                    if "READY=1" in message.split("\n"):
                        return
        finally:
            os.close(exited)
        raise AutostartFailed(
            f"recalld (pid {proc.pid}) did not report ready within {STARTUP_TIMEOUT:.0f}s; "
            f"see {path}"
        )


async def _readable_then_cancel(obj: socket.socket | int, scope: anyio.CancelScope) -> None:
    await anyio.wait_readable(obj)
    scope.cancel()
