"""A connection's requests, from frame to reply: what the server keeps per connection and per
request, and the one policy that answers a failure.

An :class:`Exchange` is one request: it holds a turn of its connection's in-flight bound and
its frame's share of the byte budget until its reply is written, whichever path answers it
(a task of its own, or the writer's call after the COMMIT). A connection's replies go out
whole and in order (:class:`Out`); those queued by one batch of writes go out together.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from recall_client import protocol as p

from ..domain.principal import Principal
from ..errors import RecallError
from ..pipeline.writer import WriteJob

__all__ = ["ByteBudget", "Connection", "Exchange", "Out", "Requests", "Session", "failed"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Connection:
    """What the daemon knows of one connected client (status shows these)."""

    cid: int
    uid: int
    pid: int
    principal: Principal | None = None
    connected_at: float = field(default_factory=time.time)
    requests: int = 0
    errors: int = 0
    inflight: int = 0
    # Bounds the wait for the next request. Idle means nothing in flight either: a client
    # waiting on a slow reply is not idle, so a request's begin lifts the deadline and its
    # end sets it anew once the last reply has gone out (Requests).
    idle: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    # Turns at the search workers (see Route.read).
    reads: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(1))
    # Set once nothing is in flight, when the connection's reading has ended and it waits
    # for its last replies.
    answered: anyio.Event | None = None
    # Waiting for its next frame under ``idle`` (so that cancelling ``idle`` closes it), and
    # since when it has been idle (monotonic: connected, a frame begun, or the last reply
    # sent): what decides which connection gives up its slot when they run short.
    waiting: bool = False
    active_at: float = field(default_factory=time.monotonic)


class Out:
    """One connection's replies, written whole and in order, each under the send timeout.

    A reply goes to the socket at once when nothing is queued before it and the socket
    takes it whole (the common case: no task, no timeout scope). Else it queues, and one task
    writes what is queued together: the replies the writer's callbacks queue after a COMMIT
    (see :meth:`Exchange.written`) go out in one system call per connection.
    """

    __slots__ = ("_flushing", "_queued", "_timeout", "closed", "sock", "stream", "tasks")

    def __init__(self, stream: SocketStream, timeout: Callable[[], float]) -> None:
        self.stream = stream
        # Looked up once: SocketStream.extra builds the stream's attribute table every call.
        self.sock = stream.extra(SocketAttribute.raw_socket)
        self._timeout = timeout
        # The connection's task group, for the task that writes what is queued.
        self.tasks: TaskGroup | None = None
        # Frames waiting, each with what to call once it is written (or has nowhere to go).
        self._queued: list[tuple[bytes, Callable[[], None]]] = []
        self._flushing = False
        # The connection has ended (or its socket failed): a reply has nowhere to go.
        self.closed = False

    def send(self, data: bytes, sent: Callable[[], None], *, at_once: bool = True) -> None:
        """Write one reply frame after those queued; ``sent()`` once it is written, or once
        the connection is gone. ``at_once``: try the socket now if nothing is queued."""
        if self.closed:
            sent()
            return
        if at_once and not self._queued:
            try:
                written = self.sock.send(data)
            except OSError:  # full, or the peer is gone: the task finds out which
                written = 0
            if written == len(data):
                sent()
                return
            data = data[written:]
        self._queued.append((data, sent))
        if not self._flushing:
            assert self.tasks is not None, "replies are sent while the connection reads"
            self._flushing = True
            self.tasks.start_soon(self._flush, name="replies")

    async def reply(self, data: bytes) -> None:
        """:meth:`send`, returning once ``data`` is written (or the connection is gone)."""
        written = anyio.Event()
        self.send(data, written.set)
        await written.wait()

    async def _flush(self) -> None:
        try:
            while self._queued:
                frames, self._queued = self._queued, []
                try:
                    await self._write(b"".join(data for data, _ in frames))
                finally:
                    for _, sent in frames:
                        sent()
        except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            # The peer is gone or not reading: closing makes its reader loop end too, and
            # the replies still to come have nowhere to go.
            self.closed = True
            await self.stream.aclose()
        finally:
            self._flushing = False
            dropped, self._queued = self._queued, []
            for _, sent in dropped:
                sent()

    async def _write(self, data: bytes) -> None:
        try:
            written = self.sock.send(data)
        except BlockingIOError:
            written = 0
        if written < len(data):
            with anyio.fail_after(self._timeout()):
                await self.stream.send(data[written:])


class ByteBudget:
    """Bytes of request frames the daemon holds at once, from their header until their reply
    is sent: 1,024 connections x 64 requests x 4 MiB frames must not all fit in memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        # Made by the first frame that has to wait, set (and dropped) by the next release:
        # the common case, a budget with room, costs no event and no cancel scope.
        self._freed: anyio.Event | None = None

    async def acquire(self, size: int, within_s: float) -> bool:
        """Reserve ``size`` bytes; False when they did not free up within ``within_s``."""
        if self.used + size <= self.limit:
            self.used += size
            return True
        with anyio.move_on_after(within_s):
            while self.used + size > self.limit:
                if self._freed is None:
                    self._freed = anyio.Event()
                await self._freed.wait()
            self.used += size
            return True
        return False

    def release(self, size: int) -> None:
        self.used -= size
        if self._freed is not None:
            self._freed.set()
            self._freed = None


class Requests:
    """The requests being answered across all connections, and the bytes their frames hold
    (a drain waits for an event set whenever none is left, instead of polling)."""

    def __init__(self, budget: ByteBudget, idle_timeout: Callable[[], float]) -> None:
        self.budget = budget
        self.count = 0
        self._idle_timeout = idle_timeout
        self._idle = anyio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        while self.count:
            await self._idle.wait()

    def begin(self, conn: Connection) -> None:
        """A request of ``conn`` is being answered."""
        conn.inflight += 1
        conn.idle.deadline = math.inf
        self.count += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

    def end(self, conn: Connection, turn: anyio.Semaphore, held: int) -> None:
        """A request of ``conn`` has been answered (its reply sent, or its connection gone):
        its ``turn`` of the connection's in-flight bound and its ``held`` bytes go back."""
        conn.inflight -= 1
        if not conn.inflight:
            conn.active_at = time.monotonic()
            conn.idle.deadline = anyio.current_time() + self._idle_timeout()
            if conn.answered is not None:
                conn.answered.set()
        self.count -= 1
        if not self.count:
            self._idle.set()
        turn.release()
        self.budget.release(held)


@dataclass(slots=True, eq=False)
class Session:
    """One connection as its requests are answered: who asks, where the replies go, and
    the bound on its requests in flight (max_inflight_per_connection)."""

    conn: Connection
    out: Out
    inflight: anyio.Semaphore

    async def reply(self, reply: p.Reply) -> None:
        """A reply outside any request's exchange (the hello, a frame refused)."""
        await self.out.reply(p.frame(reply))


@dataclass(slots=True, eq=False)
class Exchange:
    """One request, from its frame to its reply. It holds a turn of its connection's
    in-flight bound and its frame's share of the byte budget from when it is read until its
    reply is written (or its connection is gone): :meth:`answer` sends the reply and gives
    both back."""

    requests: Requests
    session: Session
    req: p.Request
    held: int

    @property
    def name(self) -> str:
        return f"request {self.req.id} of connection {self.session.conn.cid}"

    def begin(self) -> None:
        """It is being answered (a task runs it, or the pipeline has its write)."""
        self.requests.begin(self.session.conn)

    def end(self) -> None:
        self.requests.end(self.session.conn, self.session.inflight, self.held)

    def answer(self, reply: p.Reply, *, at_once: bool = True) -> None:
        """Send ``reply`` as the request's answer, after the connection's replies queued
        before it; the request ends once it is written. ``at_once``: see :meth:`Out.send`."""
        reply.id = self.req.id
        self.session.out.send(p.frame(reply), self.end, at_once=at_once)

    def failed(self, exc: BaseException, what: object | None = None) -> p.Error:
        """The error answering ``exc`` (:func:`failed`); ``what`` failed, for the log."""
        return failed(self.session.conn, self.req if what is None else what, exc)

    def written(self, job: WriteJob[p.Reply]) -> None:
        """Answer a write the fast path handed to the pipeline, now committed (or failed).
        Runs on the writer's turn of the event loop, so it never raises and never waits: the
        reply queues, and the connection's replies of the batch go out together."""
        try:
            reply = job.value() if job.error is None else self.failed(job.error, job)
            self.answer(reply, at_once=False)
        except Exception:
            log.exception("answering write %d failed", self.req.id)
            self.end()


def failed(conn: Connection, what: object, exc: BaseException) -> p.Error:
    """The one error policy of an answered request: a :class:`RecallError` is the client's
    answer, typed; anything else is a bug, logged with its traceback and answered
    ``internal`` without detail. The caller sets the reply's id."""
    conn.errors += 1
    if isinstance(exc, RecallError):
        return p.Error(code=exc.code, message=exc.message, retryable=exc.retryable)
    log.error("%s failed", type(what).__name__, exc_info=exc)
    return p.Error(code="internal", message="internal error; see the daemon log")
