"""The daemon's socket: taken from systemd, or bound by this process private from its first
instant; at stop, removed only when this process made it."""

from __future__ import annotations

import logging
import os
import socket
import stat
from pathlib import Path

import anyio
from anyio.abc import SocketListener
from recall_client import paths

__all__ = ["OwnedSocket", "SocketInUse"]

log = logging.getLogger(__name__)


class SocketInUse(RuntimeError):
    """Another daemon already answers on the socket."""


class OwnedSocket:
    """Where the daemon listens, and whether the socket file there is this process's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # The socket file this process created (None when systemd passed the socket).
        self._made: tuple[int, int] | None = None

    async def listen(self, passed: socket.socket | None) -> SocketListener:
        """A listener on the socket systemd passed, else on :attr:`path`.

        Raises:
            SocketInUse: something else is at the path, or another daemon answers there.
            InsecureDirectory: another user could swap the socket in its directory.
        """
        if passed is not None:
            name = passed.getsockname()
            log.info("using the socket passed by systemd (%s)", name or "unnamed")
            if isinstance(name, str) and name:
                self.path = Path(name)
            return await SocketListener.from_socket(passed)
        path = self.path
        paths.ensure_private_dir(path.parent)
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise SocketInUse(f"{path} exists and is not a socket; refusing to replace it")
            if await _answers(path):
                raise SocketInUse(f"another recalld already answers on {path}")
            path.unlink()
        old = os.umask(0o177)  # the socket is 0600 from its first instant
        try:
            listener = await anyio.create_unix_listener(path)
        finally:
            os.umask(old)
        path.chmod(0o600)
        st = path.stat()
        self._made = (st.st_dev, st.st_ino)
        return listener

    def remove(self) -> None:
        """Unlink the socket this process created, so a client's next attempt fails at once
        (and recall-mcp may start a new daemon); never one systemd or another daemon owns."""
        if self._made is None:
            return
        try:
            st = self.path.lstat()
            if (st.st_dev, st.st_ino) == self._made:
                self.path.unlink()
        except OSError:
            pass


async def _answers(path: Path) -> bool:
    try:
        with anyio.fail_after(1):
            stream = await anyio.connect_unix(path)
    except (OSError, TimeoutError):
        return False
    await stream.aclose()
    return True
