"""The socket server: frames in, typed replies out, one task per in-flight request.

Handlers never raise into the listener. A request that fails gets an ``Error`` reply and the
connection goes on; only a frame that cannot be parsed at all (or is too large, or never
finishes arriving) closes that one connection. A peer of another uid is refused; the others
hold a connection slot each (:mod:`.slots`: a share per process, reclaimed when they run out).

Each request is looked up in the registry (:mod:`.registry`), authorized in one place
(:mod:`.authorization`: scopes, then the ids it names), checked against the workspace
approval gate, and handed to its handler with the :class:`~recalld.handlers.services.Services`.
Frames in flight share one byte budget (``max_inflight_bytes``): a frame that cannot get its
share in time is answered ``busy``.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import msgspec
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from recall_client import protocol as p
from recall_client.paths import peer_credentials

from ..asker import ASKER
from ..config import Settings
from ..domain import scopes
from ..domain.principal import Principal
from ..errors import RecallError
from ..handlers import workspaces
from ..handlers.services import Services
from ..ingest.sanitize import check_identifiers
from ..pipeline.intake import RequestJob
from ..pipeline.writer import WriteJob
from . import authorization, workspace
from .frames import FrameReader
from .registry import ROUTES, Route, route_of
from .slots import Slots

__all__ = ["Connection", "Server"]

log = logging.getLogger(__name__)

# Timeouts (idle, frame, send) are Settings; see config.py.

# A validation message can quote the offending value (an unknown op, a field name); a
# hostile frame must not be echoed back whole.
MAX_ERROR_MESSAGE = 1_000
# How long a frame waits for its share of the in-flight byte budget before it is refused.
BUDGET_WAIT_S = 5.0


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
    # waiting on a slow reply is not idle, so _answer lifts the deadline and sets it anew
    # when the last reply has gone out.
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


class _Out:
    """One connection's replies, written whole and in order, each under the send timeout.

    A reply goes to the socket at once when nothing is queued before it and the socket
    takes it whole (the common case: no task, no timeout scope). Else it queues, and one task
    writes what is queued together: the replies the writer's callbacks queue after a COMMIT
    (see Server._answered) go out in one system call per connection.
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


class Server:
    def __init__(
        self,
        services: Services,
        *,
        version: str,
        admin_token: Callable[[], str | None],
        stopping: Callable[[], bool],
    ) -> None:
        self._services = services
        self._version = version
        self._admin_token = admin_token
        self._stopping = stopping
        self._ids = itertools.count(1)
        self.slots = Slots[Connection](services.settings)
        self.connections = self.slots.held
        self.refused = 0
        self.budget = ByteBudget(services.settings().max_inflight_bytes)
        # Requests being answered across all connections; ``_idle`` is set whenever it is 0,
        # so a drain waits for an event instead of polling.
        self._inflight = 0
        self._idle = anyio.Event()
        self._idle.set()

    def inflight(self) -> int:
        return self._inflight

    async def wait_idle(self) -> None:
        """Return once no request is being answered (the drain at shutdown)."""
        while self._inflight:
            await self._idle.wait()

    async def handle(self, stream: SocketStream) -> None:
        """Serve one connection until it closes; never raises."""
        try:
            await self._serve(stream)
        except Exception:
            log.exception("connection handler failed")
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve(self, stream: SocketStream) -> None:
        uid, pid = peer_credentials(stream.extra(SocketAttribute.raw_socket))
        settings = self._settings()
        if uid != os.getuid():
            self.refused += 1
            log.warning("refused a connection from uid %d (pid %d)", uid, pid)
            await self._send_quietly(
                stream, p.Error(code="forbidden", message="recalld serves only its own user")
            )
            return
        conn = Connection(
            cid=next(self._ids), uid=uid, pid=pid, reads=anyio.Semaphore(settings.search_workers)
        )
        ASKER.set(conn.cid)  # this connection's request tasks are started from here
        refused = self.slots.take(conn)
        if refused is not None:
            await self._send_quietly(stream, p.Error(code="busy", message=refused, retryable=True))
            return
        inflight = anyio.Semaphore(settings.max_inflight_per_connection)
        reader = FrameReader(stream)
        out = _Out(stream, lambda: self._settings().send_timeout_s)
        try:
            async with anyio.create_task_group() as tg:
                out.tasks = tg
                while True:
                    body = await self._read_frame(reader, stream, conn)
                    if body is None:
                        break
                    # The frame holds its share of the byte budget until its reply is sent.
                    held = len(body)
                    try:
                        try:
                            req = p.decode_request(body)
                        except msgspec.ValidationError as exc:
                            conn.errors += 1
                            await self._reply(
                                out,
                                p.Error(
                                    id=p.peek_request_id(body),
                                    code="invalid_request",
                                    message=_bounded(str(exc)),
                                ),
                            )
                            continue
                        except (msgspec.DecodeError, RecursionError) as exc:
                            # Not msgpack at all (or nested too deep to walk, which msgspec
                            # reports as RecursionError and used to escape as an untyped
                            # failure): the stream cannot be trusted any more.
                            conn.errors += 1
                            await self._reply(
                                out,
                                p.Error(
                                    code="invalid_request",
                                    message=f"frame is not valid msgpack: {_bounded(str(exc))}",
                                ),
                            )
                            break
                        del body
                        conn.requests += 1
                        if conn.principal is None:
                            if not await self._hello(out, conn, req):
                                break
                            continue
                        if self._stopping() and not _while_draining(req):
                            # Draining: what was already read finishes; nothing new starts.
                            await self._reply(
                                out,
                                p.Error(
                                    id=req.id,
                                    code="unavailable",
                                    retryable=True,
                                    message="recalld is shutting down; retry after it restarts",
                                ),
                            )
                            continue
                        try:
                            inflight.acquire_nowait()
                        except anyio.WouldBlock:
                            await inflight.acquire()
                        if not self._write_now(out, inflight, conn, req, held):
                            tg.start_soon(
                                self._answer,
                                out,
                                inflight,
                                conn,
                                req,
                                held,
                                name=f"request {req.id} of connection {conn.cid}",
                            )
                        held = 0  # released once the request is answered
                    finally:
                        if held:
                            self.budget.release(held)
                # Reading is over; let in-flight requests finish and reply (the writes
                # handed over by _write_now have no task here to wait for).
                if conn.inflight:
                    conn.answered = anyio.Event()
                    await conn.answered.wait()
        finally:
            out.closed = True
            self.slots.give_back(conn)

    async def _read_frame(
        self, reader: FrameReader, stream: SocketStream, conn: Connection
    ) -> bytes | None:
        s = self._settings()
        try:
            size = reader.next_size()
            if size is None:
                # Wait for a header under the idle rule (no scope at all when one is here).
                with anyio.CancelScope() as conn.idle:
                    if conn.principal is None:
                        conn.idle.deadline = anyio.current_time() + s.frame_timeout_s
                    elif not conn.inflight:
                        conn.idle.deadline = anyio.current_time() + s.idle_timeout_s
                    conn.waiting = True
                    try:
                        await reader.fill(p.HEADER.size)
                    finally:
                        conn.waiting = False
                if conn.idle.cancelled_caught:
                    return None
                conn.active_at = time.monotonic()
                size = reader.next_size()
                assert size is not None
            if size > p.MAX_FRAME:
                await self._send_quietly(
                    stream,
                    p.Error(
                        code="invalid_request",
                        message=f"frame of {size} bytes is over the {p.MAX_FRAME}-byte limit",
                    ),
                )
                return None
            if not await self.budget.acquire(size, BUDGET_WAIT_S):
                await self._send_quietly(
                    stream,
                    p.Error(
                        code="busy",
                        retryable=True,
                        message="recalld holds as many request bytes as it may "
                        "(max_inflight_bytes); reconnect and retry shortly",
                    ),
                )
                return None
            try:
                if not reader.has_body(size):
                    with anyio.fail_after(s.frame_timeout_s):
                        await reader.fill(p.HEADER.size + size)
                return reader.take_body(size)
            except BaseException:
                self.budget.release(size)
                raise
        except (
            TimeoutError,
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ):
            return None

    async def _hello(self, out: _Out, conn: Connection, req: p.Request) -> bool:
        if not isinstance(req, p.Hello):
            await self._reply(
                out,
                p.Error(
                    id=req.id, code="invalid_request", message="the first frame must be a hello"
                ),
            )
            return False
        if req.version != p.PROTOCOL_VERSION:
            await self._reply(
                out,
                p.Error(
                    id=req.id,
                    code="invalid_request",
                    message=f"protocol version {req.version} is not spoken here "
                    f"(recalld speaks {p.PROTOCOL_VERSION}); upgrade the client",
                ),
            )
            return False
        try:
            check_identifiers(req)
            granted = scopes.grant(req.admin_token, self._admin_token())
            self._services.credentials.check(
                req.agent, req.agent_token, admin=scopes.ADMIN in granted
            )
            ws = await anyio.to_thread.run_sync(
                workspace.of_hello, req.workspace, scopes.ADMIN in granted
            )
        except RecallError as exc:
            await self._reply(
                out,
                p.Error(id=req.id, code=exc.code, message=exc.message, retryable=exc.retryable),
            )
            return False
        conn.principal = Principal(
            agent=req.agent,
            workspace=ws.id,
            path=ws.path,
            uid=conn.uid,
            pid=conn.pid,
            client=req.client,
            model=req.model,
            scopes=granted,
            session=req.session or f"conn-{uuid.uuid4().hex[:16]}",
        )
        await self._reply(
            out,
            p.Welcome(
                id=req.id,
                version=p.PROTOCOL_VERSION,
                server=f"recalld {self._version}",
                agent=req.agent,
                workspace=ws.id,
                workspace_path=ws.path or None,
                uid=conn.uid,
                pid=conn.pid,
                scopes=sorted(granted),
            ),
        )
        await workspaces.seen(self._services, ws)
        return True

    def _begin(self, conn: Connection) -> None:
        """A request of ``conn`` is being answered."""
        conn.inflight += 1
        conn.idle.deadline = math.inf
        self._inflight += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

    def _end(self, conn: Connection, inflight: anyio.Semaphore, held: int) -> None:
        """A request of ``conn`` has been answered (its reply sent, or its connection gone)."""
        conn.inflight -= 1
        if not conn.inflight:
            conn.active_at = time.monotonic()
            conn.idle.deadline = anyio.current_time() + self._settings().idle_timeout_s
            if conn.answered is not None:
                conn.answered.set()
        self._inflight -= 1
        if not self._inflight:
            self._idle.set()
        inflight.release()
        self.budget.release(held)

    async def _answer(
        self,
        out: _Out,
        inflight: anyio.Semaphore,
        conn: Connection,
        req: p.Request,
        held: int,
        job: RequestJob[p.Reply] | None = None,
    ) -> None:
        """Answer ``req``: dispatch it, or (``job``: admitted and built by _write_now) write
        its job."""
        self._begin(conn)
        handed_over = False  # to the reply, which ends the request once it is written
        try:
            try:
                if job is None:
                    reply = await self._dispatch(conn, req)
                else:
                    reply = await self._services.write(job)
            except Exception as exc:
                reply = _failed(conn, req, exc)
            reply.id = req.id
            out.send(p.frame(reply), lambda: self._end(conn, inflight, held))
            handed_over = True
        finally:
            if not handed_over:  # cancelled (the connection is closing), or a bug
                self._end(conn, inflight, held)

    def _admit(self, route: Route, who: Principal, req: p.Request) -> None:
        """The checks of a request that need no store read: its scopes, the approval gate.

        Raises:
            RecallError: ``forbidden``, or the gate's ``forbidden`` for an unapproved
                workspace.
        """
        authorization.check_scopes(route.rule, who, req)
        services = self._services
        if route.gated and services.settings().require_approval:
            override = getattr(req, "workspace", None)
            services.approvals.check(
                override if isinstance(override, str) and override else who.workspace
            )

    async def _dispatch(self, conn: Connection, req: p.Request) -> p.Reply:
        """Route, authorize, gate, then the handler: the one path of every request."""
        services = self._services
        who = conn.principal
        assert who is not None
        route = route_of(req)
        aimed = await workspace.aim(who, req)
        self._admit(route, who, req)
        if named := route.rule.named(who, req):
            own = route.rule.own
            await services.read(lambda reader: authorization.owned_ids(reader, who, named, own=own))
        if route.read:
            async with conn.reads:
                return await route.handler(services, aimed, req)
        return await route.handler(services, aimed, req)

    def _write_now(
        self, out: _Out, inflight: anyio.Semaphore, conn: Connection, req: p.Request, held: int
    ) -> bool:
        """Hand a write to the pipeline with no task of its own, when its route builds its
        job (names no ids to check first) and nothing has to wait (Intake.write_now); the
        writer's call after the COMMIT answers it. A job that has to wait gets a task that
        writes it; a refusal is answered at once. False: nothing was decided (a repository to
        read, ids to check), and :meth:`_answer` dispatches the request as any other.

        A capture burst is many small writes: a task per request, its await chain down to
        the job's event and the wake-up were most of what the event loop spent on one.
        """
        route = ROUTES.get(type(req))
        if route is None or route.job is None:
            return False
        who = conn.principal
        assert who is not None
        try:
            aimed = workspace.aim_now(who, req)
            if aimed is None:
                return False
            self._admit(route, who, req)
            if route.rule.named(who, req):
                return False
            job = route.job(self._services, aimed, req)
            if job is None:
                return False

            def answered(job: WriteJob[p.Reply]) -> None:
                self._answered(out, inflight, conn, req.id, held, job)

            queued = self._services.write_now(job, answered)
        except Exception as exc:
            # Refused (or a bug) here is answered here, by the same policy as a request's
            # task: the checks above are the slow path's own, so it would only repeat them.
            self._begin(conn)
            error = _failed(conn, req, exc)
            error.id = req.id
            out.send(p.frame(error), lambda: self._end(conn, inflight, held))
            return True
        if queued:
            self._begin(conn)
            return True
        assert out.tasks is not None
        out.tasks.start_soon(
            self._answer,
            out,
            inflight,
            conn,
            req,
            held,
            job,
            name=f"request {req.id} of connection {conn.cid}",
        )
        return True

    def _answered(
        self,
        out: _Out,
        inflight: anyio.Semaphore,
        conn: Connection,
        request_id: int,
        held: int,
        job: WriteJob[p.Reply],
    ) -> None:
        """Reply to a write :meth:`_write_now` handed over, now committed (or failed). Runs
        on the writer's turn of the event loop, so it never raises and never waits: the reply
        queues, and the connection's replies of the batch go out together."""
        try:
            reply = job.value() if job.error is None else _failed(conn, job, job.error)
            reply.id = request_id
            out.send(p.frame(reply), lambda: self._end(conn, inflight, held), at_once=False)
        except Exception:
            log.exception("answering write %d failed", request_id)
            self._end(conn, inflight, held)

    def _settings(self) -> Settings:
        return self._services.settings()

    async def _reply(self, out: _Out, reply: p.Reply) -> None:
        await out.reply(p.frame(reply))

    async def _send_quietly(self, stream: SocketStream, reply: p.Reply) -> None:
        try:
            with anyio.fail_after(1):
                await stream.send(p.frame(reply))
        except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass


def _failed(conn: Connection, what: object, exc: BaseException) -> p.Error:
    """The one error policy of an answered request: a :class:`RecallError` is the client's
    answer, typed; anything else is a bug, logged with its traceback and answered
    ``internal`` without detail. The caller sets the reply's id."""
    conn.errors += 1
    if isinstance(exc, RecallError):
        return p.Error(code=exc.code, message=exc.message, retryable=exc.retryable)
    log.error("%s failed", type(what).__name__, exc_info=exc)
    return p.Error(code="internal", message="internal error; see the daemon log")


def _bounded(message: str) -> str:
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return message[:MAX_ERROR_MESSAGE] + f"… ({len(message)} characters in all)"


def _while_draining(req: p.Request) -> bool:
    try:
        return route_of(req).while_draining
    except RecallError:
        return False
