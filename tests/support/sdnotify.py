"""A stand-in for systemd's notify socket: the datagram socket a daemon's sd_notify writes to."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import IO

import anyio
from anyio.abc import UNIXDatagramSocket

from .daemon import BIN, DaemonProcess

__all__ = ["NotifyListener", "start_with_notify"]


class NotifyListener:
    """Receives sd_notify datagrams; each keeps the time it arrived."""

    def __init__(self, sock: UNIXDatagramSocket, path: Path) -> None:
        self._sock = sock
        self.path = path
        self.messages: list[tuple[float, str]] = []

    @classmethod
    async def open(cls, path: Path) -> NotifyListener:
        await anyio.Path(path).unlink(missing_ok=True)
        return cls(await anyio.create_unix_datagram_socket(local_path=path), path)

    async def receive(self) -> str:
        data, _ = await self._sock.receive()
        message = data.decode()
        self.messages.append((time.monotonic(), message))
        return message

    async def until(self, line: str, within_s: float = 30.0) -> str:
        """Receive until a message holding ``line`` (e.g. ``READY=1``) arrives; return it."""
        with anyio.fail_after(within_s):
            while True:
                message = await self.receive()
                if line in message.split("\n"):
                    return message

    def lines(self) -> list[str]:
        return [line for _, m in self.messages for line in m.split("\n")]

    async def aclose(self) -> None:
        await self._sock.aclose()


async def start_with_notify(
    d: DaemonProcess, stdout: IO[bytes] | int = subprocess.DEVNULL, **env: str
) -> NotifyListener:
    """Start ``d`` with NOTIFY_SOCKET on a listener the test keeps; return it after READY=1."""
    listener = await NotifyListener.open(d.root / "notify.sock")
    full = d.env()
    full.update(env, NOTIFY_SOCKET=str(listener.path))
    async with await anyio.open_file(d.log_path, "ab") as log:
        # A Popen, not anyio.open_process: DaemonProcess signals, waits for and kills d.proc.
        d.proc = subprocess.Popen(  # noqa: ASYNC220
            [str(BIN / "recalld")], env=full, stdout=stdout, stderr=log.wrapped
        )
    await listener.until("READY=1")
    return listener
