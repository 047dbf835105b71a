"""Starting a recalld process and waiting until it accepts, the one way everyone does it.

The daemon reports READY=1 (sd_notify) once its socket accepts; the launcher gives it a notify
socket of its own (abstract namespace: no file to clean up, no path-length trouble) and waits
for that, or for the process to exit, whichever comes first. No sleeping, no polling. recall-mcp's
autostart, the test fixtures and the benchmarks all start daemons through :func:`start_daemon`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio

__all__ = ["DaemonStartFailed", "Started", "daemon_command", "start_daemon"]


class DaemonStartFailed(RuntimeError):
    """The daemon exited at start, or did not report ready in time."""


@dataclass(slots=True)
class Started:
    proc: subprocess.Popen[bytes]
    # Seconds from spawn to READY=1, and every notification received up to it.
    seconds: float
    notifications: list[str] = field(default_factory=list)


def daemon_command() -> list[str]:
    """The recalld installed next to this interpreter (the one installed with this client)."""
    script = Path(sys.executable).parent / "recalld"
    return [str(script)] if script.exists() else [sys.executable, "-m", "recalld"]


async def start_daemon(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    stderr: int,
    # Not a caller's deadline: a daemon silent this long is DaemonStartFailed, left running.
    timeout: float,  # noqa: ASYNC109
    detach: bool = False,
    cwd: str | None = None,
) -> Started:
    """Start ``command`` and return once it has reported READY=1.

    ``detach`` starts it in a session of its own, to outlive its starter (autostart).

    Raises:
        DaemonStartFailed: it exited first, or stayed silent for ``timeout`` seconds (it is
            left running then; the caller decides).
    """
    name = f"recalld-launch-{os.getpid()}-{os.urandom(4).hex()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as notify:
        notify.bind("\0" + name)
        notify.setblocking(False)
        child_env = dict(env, NOTIFY_SOCKET="@" + name)
        for var in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID"):
            child_env.pop(var, None)
        started = time.perf_counter()
        # Not anyio.open_process: a detached daemon must outlive its starter, and an asyncio
        # subprocess transport kills its process when it is closed.
        proc = subprocess.Popen(  # noqa: ASYNC220
            list(command),
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=detach,
            close_fds=True,
            cwd=cwd,
        )
        messages: list[str] = []
        exited = os.pidfd_open(proc.pid)
        try:
            with anyio.move_on_after(timeout):
                while True:
                    # Whichever comes first: a notification, or the daemon exiting.
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_readable_then_cancel, notify, tg.cancel_scope)
                        tg.start_soon(_readable_then_cancel, exited, tg.cancel_scope)
                    try:
                        message = notify.recv(4096).decode(errors="replace")
                    except BlockingIOError:
                        if proc.poll() is not None:
                            raise DaemonStartFailed(
                                f"recalld exited with code {proc.returncode} at start"
                            ) from None
                        continue
                    messages.append(message)
                    if "READY=1" in message.split("\n"):
                        return Started(proc, time.perf_counter() - started, messages)
        finally:
            os.close(exited)
    raise DaemonStartFailed(f"recalld (pid {proc.pid}) did not report ready within {timeout:.0f}s")


async def _readable_then_cancel(obj: socket.socket | int, scope: anyio.CancelScope) -> None:
    await anyio.wait_readable(obj)
    scope.cancel()
