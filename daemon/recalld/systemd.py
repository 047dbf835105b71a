"""systemd integration without a dependency: sd_notify, the watchdog and socket activation."""

from __future__ import annotations

import os
import socket

__all__ = ["SD_LISTEN_FDS_START", "listen_fds", "notify", "watchdog_interval"]

SD_LISTEN_FDS_START = 3


def notify(message: str) -> bool:
    """Send ``message`` (e.g. ``READY=1``) to ``$NOTIFY_SOCKET``; False when not under systemd.

    Never raises: a missing or broken notify socket must not take the daemon down.
    """
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between the ``WATCHDOG=1`` pings systemd expects (``WatchdogSec=``), or None.

    Pings go out at a third of ``WATCHDOG_USEC`` so one late ping is not a restart.
    """
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1e6 / 3 if value > 0 else None


def listen_fds() -> list[socket.socket]:
    """Sockets passed by systemd socket activation, for this process only.

    Consumes the variables so a child process never mistakes them for its own.
    """
    pid = os.environ.pop("LISTEN_PID", None)
    count = os.environ.pop("LISTEN_FDS", None)
    os.environ.pop("LISTEN_FDNAMES", None)
    if pid is None or count is None or int(pid) != os.getpid():
        return []
    sockets = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count)):
        os.set_inheritable(fd, False)
        sockets.append(socket.socket(fileno=fd))
    return sockets
