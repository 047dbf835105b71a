"""Async client for the daemon socket: one connection, pipelined requests, typed errors."""

from __future__ import annotations

import itertools
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Required, TypedDict, TypeVar, Unpack, overload

import anyio
import msgspec
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from . import protocol as p
from .paths import (
    admin_token_path,
    find_workspace,
    peer_credentials,
    read_admin_token,
    read_token_file,
    socket_path,
)

__all__ = [
    "DaemonUnavailable",
    "RecallClient",
    "RemoteError",
    "Session",
    "UntrustedSocket",
    "connect",
    "open_client",
]

R = TypeVar("R", bound=p.Reply)

# How long aclose waits for the reader to see the shut-down socket (it takes microseconds).
_READER_EXIT_S = 1.0


class DaemonUnavailable(ConnectionError):
    """The daemon could not be reached, or the connection broke before a reply came."""


class UntrustedSocket(DaemonUnavailable):
    """The socket is served by another user: nothing (no hello, no token) is sent to it."""


def _check_server(stream: SocketStream, sock: Path) -> None:
    """Refuse a server that is not this user's (SO_PEERCRED: the kernel vouches for it).

    Another local user who could plant a listener on the socket path would otherwise read
    the hello, admin token included.

    Raises:
        UntrustedSocket: the peer runs as another uid.
    """
    uid, pid = peer_credentials(stream.extra(SocketAttribute.raw_socket))
    if uid != os.getuid():
        raise UntrustedSocket(
            f"the socket at {sock} is served by uid {uid} (pid {pid}), not by you "
            f"(uid {os.getuid()}); refusing to talk to it. Check who owns its directory."
        )


class RemoteError(Exception):
    """The daemon answered a request with a typed error."""

    def __init__(self, code: str, message: str, retryable: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable


class _Pending:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.reply: p.Reply | None = None


class RecallClient:
    """One open connection to the daemon. Use :func:`connect` to get one.

    Requests may be issued concurrently from many tasks; each waits for its own reply.
    """

    def __init__(self, stream: SocketStream, tg: TaskGroup, socket: Path) -> None:
        self._stream = stream
        self._tg = tg
        self._socket = socket
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        # Looked up once: SocketStream.extra builds the stream's attribute table every call.
        self._sock = stream.extra(SocketAttribute.raw_socket)
        self._send_lock = anyio.Lock()
        self._closed = False
        self._reader_done = anyio.Event()
        self.welcome: p.Welcome | None = None

    @overload
    async def call(self, request: p.Request) -> p.Reply: ...
    @overload
    async def call(self, request: p.Request, reply_type: type[R]) -> R: ...
    async def call(self, request: p.Request, reply_type: type[p.Reply] = p.Reply) -> p.Reply:
        """Send one request and wait for its reply.

        Raises:
            RemoteError: the daemon answered with a typed error.
            DaemonUnavailable: the connection is gone.
        """
        if self._closed:
            raise DaemonUnavailable(f"connection to recalld at {self._socket} is closed")
        rid = next(self._ids)
        request = msgspec.structs.replace(request, id=rid)
        slot = self._pending[rid] = _Pending()
        try:
            try:
                await self._send(p.frame(request))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise DaemonUnavailable(f"recalld at {self._socket} went away: {exc}") from exc
            await slot.event.wait()
        finally:
            self._pending.pop(rid, None)
        reply = slot.reply
        if reply is None:
            raise DaemonUnavailable(f"recalld at {self._socket} closed the connection")
        if isinstance(reply, p.Error):
            raise RemoteError(reply.code, reply.message, reply.retryable)
        if not isinstance(reply, reply_type):
            raise RemoteError("internal", f"unexpected reply {type(reply).__name__}")
        return reply

    async def _send(self, data: bytes) -> None:
        """Write one request frame whole, after any other being written.

        Straight to the socket when no other frame is being written and it takes the frame
        at once (the common case): no lock wait and no checkpoint, each of which costs a
        turn of the event loop, more than the write itself.
        """
        try:
            self._send_lock.acquire_nowait()
        except anyio.WouldBlock:
            async with self._send_lock:
                await self._stream.send(data)
            return
        try:
            try:
                sent = self._sock.send(data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                await self._stream.send(data[sent:])
        finally:
            self._send_lock.release()

    async def _read_replies(self) -> None:
        reader = BufferedByteReceiveStream(self._stream)
        try:
            while True:
                header = await reader.receive_exactly(p.HEADER.size)
                (size,) = p.HEADER.unpack(header)
                body = await reader.receive_exactly(size)
                reply = p.decode_reply(body)
                slot = self._pending.get(reply.id)
                if slot is not None:
                    slot.reply = reply
                    slot.event.set()
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
            msgspec.DecodeError,
            msgspec.ValidationError,
        ):
            pass
        finally:
            self._closed = True
            self._reader_done.set()
            for slot in self._pending.values():
                slot.event.set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Close the connection; requests still waiting fail with DaemonUnavailable.

        The socket is shut down first and the reader left to see the end of the stream
        itself: closing (or cancelling) under a pending read races anyio's own readiness
        callback on a UNIX socket, which then fails the event loop with InvalidStateError.
        """
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed or never connected: nothing to wake
        # Bounded and shielded: a reader that never started (its task group was cancelled
        # first) never sets the event, and a caller may already be cancelled.
        with anyio.move_on_after(_READER_EXIT_S, shield=True):
            await self._reader_done.wait()
        await self._stream.aclose()


async def open_client(
    tg: TaskGroup,
    *,
    agent: str,
    workspace: str | None = None,
    client: str = "",
    model: str | None = None,
    path: str | os.PathLike[str] | None = None,
    # Per step: a connect that runs out of time is DaemonUnavailable, a hello TimeoutError.
    timeout: float = 5.0,  # noqa: ASYNC109
    admin_token: str | None = None,
    session: str | None = None,
    agent_token: str | None = None,
) -> RecallClient:
    """Connect, start the reply reader in ``tg`` and say hello.

    ``admin_token`` (the contents of the daemon's admin.token file) asks for the
    admin:workspace scope; ``agent_token`` proves the agent name (``recallctl agent add``).

    Raises:
        DaemonUnavailable: nothing answers on the socket (not running, wrong path).
        UntrustedSocket: the socket is served by another user (nothing was sent).
        RemoteError: the daemon refused the hello (version mismatch, wrong uid, a token
            that does not match).
    """
    sock = Path(path) if path is not None else socket_path()
    try:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_unix(sock)
    except (OSError, TimeoutError) as exc:
        raise DaemonUnavailable(
            f"recalld is not answering at {sock} ({exc.__class__.__name__}: {exc}). "
            f"Start it with `{_daemon_command()}` or `systemctl --user start recalld.socket`."
        ) from exc
    try:
        _check_server(stream, sock)
    except BaseException:
        await stream.aclose()
        raise
    rc = RecallClient(stream, tg, sock)
    tg.start_soon(rc._read_replies, name="recall client reader")
    hello = p.Hello(
        version=p.PROTOCOL_VERSION,
        agent=agent,
        workspace=workspace if workspace is not None else find_workspace(),
        client=client,
        model=model,
        admin_token=admin_token,
        session=session,
        agent_token=agent_token,
    )
    try:
        with anyio.fail_after(timeout):
            rc.welcome = await rc.call(hello, p.Welcome)
    except BaseException:
        await rc.aclose()
        raise
    return rc


@asynccontextmanager
async def connect(
    *,
    agent: str,
    workspace: str | None = None,
    client: str = "",
    model: str | None = None,
    path: str | os.PathLike[str] | None = None,
    # Passed on to open_client, which says why it is per step.
    timeout: float = 5.0,  # noqa: ASYNC109
    admin_token: str | None = None,
    session: str | None = None,
    agent_token: str | None = None,
) -> AsyncIterator[RecallClient]:
    """Open a connection for the duration of a ``with`` block (see :func:`open_client`).

    Errors come out as themselves, not wrapped in the task group's ExceptionGroup.
    """
    try:
        async with anyio.create_task_group() as tg:
            rc = await open_client(
                tg,
                agent=agent,
                workspace=workspace,
                client=client,
                model=model,
                path=path,
                timeout=timeout,
                admin_token=admin_token,
                session=session,
                agent_token=agent_token,
            )
            try:
                yield rc
            finally:
                await rc.aclose()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class _Hello(TypedDict, total=False):
    """The keyword arguments of :func:`open_client` a :class:`Session` connects with."""

    agent: Required[str]
    workspace: str | None
    client: str
    model: str | None
    path: str | os.PathLike[str] | None
    timeout: float
    admin_token: str | None
    session: str | None
    agent_token: str | None


class Session:
    """A long-lived, reconnecting client (the MCP shim holds one for its whole life).

    Connects on first use. If the daemon went away (restart, idle timeout), the next call
    reconnects once and retries; writes stay safe to retry through idempotency keys.
    With ``admin``, each connection presents the admin token file, read when connecting (the
    daemon may create it only when it first starts); with ``agent_token_file``, the agent's
    own credential. With ``autostart``, a daemon that does not answer is started (see
    :mod:`.autostart`).
    """

    def __init__(
        self,
        tg: TaskGroup,
        *,
        admin: bool = False,
        autostart: bool = False,
        agent_token_file: str | None = None,
        **hello: Unpack[_Hello],
    ) -> None:
        self._tg = tg
        self._admin = admin
        self._agent_token_file = agent_token_file
        self._hello = hello
        self._autostart = autostart
        self._client: RecallClient | None = None
        self._lock = anyio.Lock()

    async def _ensure(self) -> RecallClient:
        async with self._lock:
            if self._client is not None and self._client.closed:
                # The daemon hung up (idle timeout, restart): release the dead socket too,
                # not only the object (it used to leak until garbage collection).
                await self._client.aclose()
                self._client = None
            if self._client is None:
                if self._admin and self._autostart and read_admin_token() is None:
                    await self._start_daemon()  # the daemon writes the token when it starts
                try:
                    self._client = await open_client(self._tg, **self._hello_args())
                except DaemonUnavailable:
                    if not self._autostart:
                        raise
                    await self._start_daemon()
                    self._client = await open_client(self._tg, **self._hello_args())
            return self._client

    def _hello_args(self) -> _Hello:
        hello = self._hello.copy()
        if self._admin:
            token = read_admin_token()
            if token is None:
                raise RemoteError(
                    "forbidden",
                    f"--admin: no readable admin token at {admin_token_path()} "
                    "(recalld writes it when it starts)",
                )
            hello["admin_token"] = token
        if self._agent_token_file is not None:
            try:
                hello["agent_token"] = read_token_file(Path(self._agent_token_file))
            except PermissionError as exc:
                raise RemoteError("forbidden", str(exc)) from exc
        return hello

    async def _start_daemon(self) -> None:
        from .autostart import AutostartFailed, ensure_daemon

        path = self._hello.get("path")
        sock = Path(path) if isinstance(path, (str, os.PathLike)) else socket_path()
        try:
            await ensure_daemon(sock)
        except (AutostartFailed, OSError) as exc:
            raise DaemonUnavailable(
                f"recalld is not answering at {sock} and starting it failed: {exc}"
            ) from exc

    @overload
    async def call(self, request: p.Request) -> p.Reply: ...
    @overload
    async def call(self, request: p.Request, reply_type: type[R]) -> R: ...
    async def call(self, request: p.Request, reply_type: type[p.Reply] = p.Reply) -> p.Reply:
        """Like :meth:`RecallClient.call`, reconnecting once if the connection had dropped."""
        client = await self._ensure()
        try:
            return await client.call(request, reply_type)
        except DaemonUnavailable:
            await client.aclose()
        client = await self._ensure()
        return await client.call(request, reply_type)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _daemon_command() -> str:
    """The daemon's command beside this client's interpreter (the same install), by its
    absolute path so the hint works from any directory; else its name on PATH."""
    beside = Path(sys.executable).with_name("recalld")
    return str(beside) if beside.exists() else "recalld"
