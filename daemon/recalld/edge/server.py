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
import os
import time
import uuid
from collections.abc import Callable

import anyio
import msgspec
from anyio.abc import SocketAttribute, SocketStream
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
from . import authorization, workspace
from .exchange import ByteBudget, Connection, Exchange, Out, Requests, Session
from .frames import FrameReader
from .registry import ROUTES, Route, route_of
from .slots import Slots

__all__ = ["Server"]

log = logging.getLogger(__name__)

# Timeouts (idle, frame, send) are Settings; see config.py.

# A validation message can quote the offending value (an unknown op, a field name); a
# hostile frame must not be echoed back whole.
MAX_ERROR_MESSAGE = 1_000
# How long a frame waits for its share of the in-flight byte budget before it is refused.
BUDGET_WAIT_S = 5.0


class Server:
    """Serves each connection: its hello, then its frames, each request admitted once
    (:meth:`_admit`) and answered by the fast path (:meth:`_write_now`) or a task."""

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
        self._requests = Requests(self.budget, lambda: self._settings().idle_timeout_s)

    def inflight(self) -> int:
        return self._requests.count

    async def wait_idle(self) -> None:
        """Return once no request is being answered (the drain at shutdown)."""
        await self._requests.wait_idle()

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
        session = Session(
            conn,
            Out(stream, lambda: self._settings().send_timeout_s),
            anyio.Semaphore(settings.max_inflight_per_connection),
        )
        reader = FrameReader(stream)
        try:
            async with anyio.create_task_group() as tg:
                session.out.tasks = tg
                while await self._take(session, reader):
                    pass
                # Reading is over; let in-flight requests finish and reply (the writes
                # handed over by _write_now have no task here to wait for).
                if conn.inflight:
                    conn.answered = anyio.Event()
                    await conn.answered.wait()
        finally:
            session.out.closed = True
            self.slots.give_back(conn)

    async def _take(self, session: Session, reader: FrameReader) -> bool:
        """Read the connection's next request and start answering it; False when the
        connection ends (closed, idle, or a frame that cannot be trusted)."""
        conn = session.conn
        body = await self._read_frame(reader, session.out.stream, conn)
        if body is None:
            return False
        # The frame holds its share of the byte budget until its reply is sent.
        held = len(body)
        try:
            try:
                req = p.decode_request(body)
            except msgspec.ValidationError as exc:
                conn.errors += 1
                await session.reply(
                    p.Error(
                        id=p.peek_request_id(body),
                        code="invalid_request",
                        message=_bounded(str(exc)),
                    )
                )
                return True
            except (msgspec.DecodeError, RecursionError) as exc:
                # Not msgpack at all (or nested too deep to walk, which msgspec reports as
                # RecursionError and used to escape as an untyped failure): the stream
                # cannot be trusted any more.
                conn.errors += 1
                await session.reply(
                    p.Error(
                        code="invalid_request",
                        message=f"frame is not valid msgpack: {_bounded(str(exc))}",
                    )
                )
                return False
            del body
            conn.requests += 1
            if conn.principal is None:
                return await self._hello(session, req)
            if self._stopping() and not _while_draining(req):
                # Draining: what was already read finishes; nothing new starts.
                await session.reply(
                    p.Error(
                        id=req.id,
                        code="unavailable",
                        retryable=True,
                        message="recalld is shutting down; retry after it restarts",
                    )
                )
                return True
            try:
                session.inflight.acquire_nowait()
            except anyio.WouldBlock:
                await session.inflight.acquire()
            exchange = Exchange(self._requests, session, req, held)
            held = 0  # the request's now, released once it is answered
            if not self._write_now(exchange):
                self._task(exchange)
            return True
        finally:
            if held:
                self.budget.release(held)

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

    async def _hello(self, session: Session, req: p.Request) -> bool:
        if not isinstance(req, p.Hello):
            await session.reply(
                p.Error(
                    id=req.id, code="invalid_request", message="the first frame must be a hello"
                )
            )
            return False
        if req.version != p.PROTOCOL_VERSION:
            await session.reply(
                p.Error(
                    id=req.id,
                    code="invalid_request",
                    message=f"protocol version {req.version} is not spoken here "
                    f"(recalld speaks {p.PROTOCOL_VERSION}); upgrade the client",
                )
            )
            return False
        conn = session.conn
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
            await session.reply(
                p.Error(id=req.id, code=exc.code, message=exc.message, retryable=exc.retryable)
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
        await session.reply(
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
            )
        )
        await workspaces.seen(self._services, ws)
        return True

    def _task(self, exchange: Exchange, job: RequestJob[p.Reply] | None = None) -> None:
        """Answer a request in a task of its own (:meth:`_answer`)."""
        tasks = exchange.session.out.tasks
        assert tasks is not None, "requests are started while the connection reads"
        tasks.start_soon(self._answer, exchange, job, name=exchange.name)

    async def _answer(self, exchange: Exchange, job: RequestJob[p.Reply] | None) -> None:
        """Dispatch a request, or (``job``: admitted and built by :meth:`_write_now`) write
        its job; then answer it, a failure by the one policy (:func:`failed`)."""
        exchange.begin()
        handed_over = False  # to the reply, which ends the request once it is written
        try:
            try:
                if job is None:
                    reply = await self._dispatch(exchange.session.conn, exchange.req)
                else:
                    reply = await self._services.write(job)
            except Exception as exc:
                reply = exchange.failed(exc)
            exchange.answer(reply)
            handed_over = True
        finally:
            if not handed_over:  # cancelled (the connection is closing), or a bug
                exchange.end()

    def _admit(
        self, route: Route, who: Principal, aimed: Principal, req: p.Request
    ) -> list[tuple[str, str]]:
        """The one admission of a request of ``who``, once :mod:`.workspace` has aimed it
        (``aimed``, the principal it acts as): its scopes,
        the approval gate; then the ids it names, which only the store can check (the task
        path checks them, the fast path hands such a request to the task path).

        Raises:
            RecallError: ``forbidden``, or the gate's ``forbidden`` for an unapproved
                workspace.
        """
        authorization.check_scopes(route.rule, who, aimed, req)
        services = self._services
        if route.gated and services.settings().require_approval:
            services.approvals.check(aimed.workspace)
        return route.rule.named(who, req)

    async def _dispatch(self, conn: Connection, req: p.Request) -> p.Reply:
        """Route, aim, admit, check the ids named, then the handler: the task path."""
        services = self._services
        who = conn.principal
        assert who is not None
        route = route_of(req)
        aimed = await workspace.aim(who, req)
        if named := self._admit(route, who, aimed, req):
            own = route.rule.own
            await services.read(lambda reader: authorization.owned_ids(reader, who, named, own=own))
        if route.read:
            async with conn.reads:
                return await route.handler(services, aimed, req)
        return await route.handler(services, aimed, req)

    def _write_now(self, exchange: Exchange) -> bool:
        """The fast path: hand a write to the pipeline with no task of its own, when its route
        builds its job, :meth:`_admit` leaves nothing to check and nothing has to wait
        (Intake.write_now); the writer's call after the COMMIT answers it. A job that has to
        wait gets a task that writes it; a refusal is answered at once. False: nothing was
        decided (a repository to read, ids to check), and the request takes the task path.

        A capture burst is many small writes: a task per request, its await chain down to
        the job's event and the wake-up were most of what the event loop spent on one.
        """
        req = exchange.req
        route = ROUTES.get(type(req))
        if route is None or route.job is None:
            return False
        who = exchange.session.conn.principal
        assert who is not None
        try:
            aimed = workspace.aim_now(who, req)
            if aimed is None or self._admit(route, who, aimed, req):
                return False
            job = route.job(self._services, aimed, req)
            if job is None:
                return False
            queued = self._services.write_now(job, exchange.written)
        except Exception as exc:
            # Refused (or a bug) here is answered here, by the same policy as a request's
            # task: the checks above are the task path's own, so it would only repeat them.
            exchange.begin()
            exchange.answer(exchange.failed(exc))
            return True
        if queued:
            exchange.begin()
        else:
            self._task(exchange, job)
        return True

    def _settings(self) -> Settings:
        return self._services.settings()

    async def _send_quietly(self, stream: SocketStream, reply: p.Reply) -> None:
        try:
            with anyio.fail_after(1):
                await stream.send(p.frame(reply))
        except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass


def _bounded(message: str) -> str:
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return message[:MAX_ERROR_MESSAGE] + f"… ({len(message)} characters in all)"


def _while_draining(req: p.Request) -> bool:
    try:
        return route_of(req).while_draining
    except RecallError:
        return False
