"""The daemon: one exit stack and one root task group holding the store, the pipeline, the
readers and the listener.

:class:`Parts` is the one place that builds what runs (every actor, queue, reader and the
services the edge gets) and :meth:`Daemon._serve` starts it: each part starts with
``start(stops, tg)`` and puts the step that stops it on ``stops``, so the stop runs its
steps the other way round; what must be released (the store, its readers, the semantic
side's threads, the task groups) is on the exit stack.

Start-up, downstream first: the index keeper, the writer, the embedding and evaluation
actors, the search workers; then the listener binds and READY is reported; then the model
loads in the background. Shutdown runs the other way: stop accepting, let in-flight requests
finish (under a deadline), stop the search workers, stop the background actors (their work
lives in the store and resumes next start), let the writer commit what is queued (the keeper
then applies its last index changes), snapshot the index.

Nothing imports this module: the edge and the handlers get :class:`Services`, the status
report gets :class:`StatusParts`; both are built here from the parts.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import numpy as np
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream
from recall_client import __version__, paths, running
from recall_client import protocol as p
from recall_client.spool import default_spool

from . import housekeeping, systemd
from .actor import Actor
from .config import RELOADABLE, Settings
from .domain import git_process, workspace_identity
from .domain.approvals import Approvals
from .domain.credentials import AgentCredentials
from .domain.principal import Principal
from .domain.scopes import AdminTokenUnavailable, ensure_admin_token
from .edge.server import Server
from .handlers.services import Services
from .handlers.status import StatusParts, build_report
from .listening import OwnedSocket, SocketInUse
from .pipeline.embedding import EmbeddingActor, IndexKeeper
from .pipeline.evaluation import EvaluationActor
from .pipeline.intake import Intake
from .pipeline.model import Model
from .pipeline.settled import Settled
from .pipeline.writer import IndexChange, WriteJob, WriteQueue, WriterActor
from .retrieval import fusion
from .retrieval.memory_reader import MemoryReader, MemorySearchConfig
from .retrieval.search_actor import SearchActor
from .store.port import Reader, Store, StoreUnreachable
from .store.rekey import rekey_workspaces
from .store.sqlite.engine import SqliteStore

__all__ = ["Daemon", "SocketInUse"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# The stop stays inside the unit's TimeoutStopSec=30 even when every step runs to its bound:
# the drain (settings.drain_timeout_s, 10 s), the writer's queued batches, the snapshot.
WRITER_TIMEOUT = 5.0
SAVE_TIMEOUT = 10.0
# Waiting for room in a full writer queue longer than this answers busy instead.
SUBMIT_TIMEOUT = 5.0
# Changes the index keeper may have waiting.
INDEX_CHANGES = 1024


class Daemon:
    """The daemon's life: its state, the stop it is asked for, the config it reloads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state = p.RunState.STARTING
        self.started_at = time.time()
        self.socket = OwnedSocket(settings.socket_path)
        self._stop = anyio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    def reload(self, fresh: Settings) -> list[str]:
        """Apply a re-read config: the reloadable keys now; returns the changed keys that
        only a restart applies."""
        now = {k: getattr(fresh, k) for k in RELOADABLE}
        self.settings = msgspec.structs.replace(self.settings, **now)
        old, new = msgspec.structs.asdict(self.settings), msgspec.structs.asdict(fresh)
        return sorted(k for k in new if k not in RELOADABLE and new[k] != old[k])

    async def run(
        self,
        *,
        listener_socket: socket.socket | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with AsyncExitStack() as stack:
            # Before the store opens: a second daemon on this data dir stops here.
            claim = running.claim(self.settings.data_path)
            stack.callback(claim.release)
            parts = await Parts.build(stack, self)
            await self._serve(stack, parts, claim, listener_socket, task_status)
        self.state = p.RunState.STOPPED
        log.info("recalld stopped")

    async def _serve(
        self,
        stack: AsyncExitStack,
        parts: Parts,
        claim: running.Claim,
        listener_socket: socket.socket | None,
        task_status: TaskStatus[None],
    ) -> None:
        root = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(root.cancel_scope.cancel)
        # The stop a signal asks for: each part registers its step here as it starts, so
        # the steps run the other way, the head of the pipeline first. A forced stop (a
        # second signal) or a failure skips them: the exit stack still releases everything.
        stops = AsyncExitStack()
        stops.push_async_callback(self._snapshot, parts.store)
        await parts.writes.start(stops, root)
        await parts.background.start(stops, root)
        await parts.search.start(stops, root)
        await self._listen(stops, root, parts.server, claim, listener_socket)
        self.state = p.RunState.RUNNING
        systemd.notify(
            f"READY=1\nSTATUS=accepting on {self.socket.path}; model loading\nMAINPID={os.getpid()}"
        )
        log.info("recalld %s accepting on %s (pid %d)", __version__, self.socket.path, os.getpid())
        task_status.started()

        bg = parts.background.tasks
        ready = parts.readiness
        bg.start_soon(ready.load_model, name="model loader")
        bg.start_soon(ready.replay_spool, self.socket.path, parts.admin_token, name="spool replay")
        submit = parts.writes.clients.submit
        bg.start_soon(housekeeping.snapshot_periodically, parts.store, submit, name="snapshots")
        interval = systemd.watchdog_interval()
        if interval is not None:
            bg.start_soon(housekeeping.watchdog, submit, interval, name="watchdog")

        await self._stop.wait()
        self.state = p.RunState.STOPPING
        await stops.aclose()

    async def _listen(
        self,
        stops: AsyncExitStack,
        tg: TaskGroup,
        server: Server,
        claim: running.Claim,
        listener_socket: socket.socket | None,
    ) -> None:
        """Bind (or take systemd's socket) and serve connections in ``tg``; its stop: no new
        connections, the requests in flight drained under a deadline, then the connections
        closed."""
        listener = await self.socket.listen(listener_socket)
        try:
            await anyio.to_thread.run_sync(claim.record, self.socket.path.absolute())
        except OSError as exc:
            log.warning(
                "cannot record the socket in %s (%s): clients whose environment differs "
                "from this daemon's may not find it",
                claim.data_dir,
                exc,
            )
        accepting = anyio.CancelScope()
        connections = anyio.CancelScope()

        async def accept(*, task_status: TaskStatus[None]) -> None:
            with connections:
                async with anyio.create_task_group() as conn_tg:
                    with accepting:
                        task_status.started()
                        await listener.serve(server.handle, task_group=conn_tg)
                    # No longer accepting; open connections finish until cancelled.

        await tg.start(accept, name="listener")

        async def stop() -> None:
            accepting.cancel()
            await listener.aclose()
            self.socket.remove()
            systemd.notify("STOPPING=1\nSTATUS=draining in-flight requests")
            log.info(
                "stopping: no new connections; draining %d in-flight requests", server.inflight()
            )
            drain_s = self.settings.drain_timeout_s
            with anyio.move_on_after(drain_s) as drain:
                await server.wait_idle()
            if drain.cancelled_caught:
                log.warning(
                    "drain deadline (%.0fs) passed with %d requests in flight; "
                    "closing their connections",
                    drain_s,
                    server.inflight(),
                )
            connections.cancel()

        stops.push_async_callback(stop)

    @staticmethod
    async def _snapshot(store: Store) -> None:
        """The last step of a stop: the vector index saved, whatever cancels the stop."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(SAVE_TIMEOUT):
            try:
                await anyio.to_thread.run_sync(store.snapshot)
            except Exception as exc:
                # Disk full or the like: the store holds every vector, so this costs only a
                # rebuild at the next start; it must not turn a clean stop into a crash.
                log.error(
                    "index snapshot failed (%s); the index will be rebuilt from the "
                    "store at the next start",
                    exc,
                )


class _WriteSide:
    """The writer, one named queue per sender of its jobs, and the index keeper it hands
    committed vectors to. Its stop closes every queue, so the writer commits what is queued
    and its loop ends; the keeper applies the changes it was handed, then ends too."""

    def __init__(
        self, store: Store, s: Settings, downstream: MemoryObjectSendStream[list[int]]
    ) -> None:
        jobs_send, jobs_recv = anyio.create_memory_object_stream[WriteJob[Any]](s.queue_size)
        change_send, change_recv = anyio.create_memory_object_stream[IndexChange](INDEX_CHANGES)
        self.writer = WriterActor(store, jobs_recv, downstream, change_send, batch=s.capture_batch)
        self.keeper = IndexKeeper(store, change_recv)
        # Every sender of the writer's queue holds a clone of its own, closed at the stop.
        self.clients = WriteQueue(jobs_send, SUBMIT_TIMEOUT)
        self.evaluation = WriteQueue(jobs_send.clone(), SUBMIT_TIMEOUT)
        self.embedding = WriteQueue(jobs_send.clone(), SUBMIT_TIMEOUT)

    async def start(self, stops: AsyncExitStack, tg: TaskGroup) -> None:
        """Start the keeper, then the writer, in ``tg``; their stop on ``stops``."""
        keeper_done = await _run_until_done(tg, self.keeper, "index keeper")
        writer_done = await _run_until_done(tg, self.writer, "writer actor")

        async def stop() -> None:
            for queue in (self.clients, self.evaluation, self.embedding):
                await queue.aclose()
            with anyio.move_on_after(WRITER_TIMEOUT):
                await writer_done.wait()
                await keeper_done.wait()

        stops.push_async_callback(stop)


class _Background:
    """The work the daemon does for itself, in a task group of its own: the evaluation and
    embedding actors, then (once the daemon is ready) the model loader, the spool replay,
    the snapshots, the watchdog. Its stop cancels all of it first (its work lives in the
    store and resumes at the next start) and closes the model."""

    def __init__(
        self,
        model: Model,
        evaluation: EvaluationActor,
        embedding: EmbeddingActor,
        wake: MemoryObjectSendStream[list[int]],
    ) -> None:
        self._model = model
        self.evaluation = evaluation
        self.embedding = embedding
        self.wake = wake
        self._tasks: TaskGroup | None = None

    @property
    def tasks(self) -> TaskGroup:
        assert self._tasks is not None, "the background runs once started"
        return self._tasks

    async def start(self, stops: AsyncExitStack, tg: TaskGroup) -> None:
        scope = anyio.CancelScope()

        async def run(*, task_status: TaskStatus[None]) -> None:
            with scope:
                async with anyio.create_task_group() as self._tasks:
                    await self._tasks.start(self.embedding.run, name="embedding actor")
                    await self._tasks.start(self.evaluation.run, name="evaluation actor")
                    task_status.started()

        await tg.start(run, name="background actors")

        async def stop() -> None:
            scope.cancel()
            self._model.close()
            await self.wake.aclose()

        stops.push_async_callback(stop)


async def _run_until_done(tg: TaskGroup, actor: Actor, name: str) -> anyio.Event:
    """Start ``actor`` in ``tg``; the event is set once its run has ended."""
    done = anyio.Event()

    async def run(*, task_status: TaskStatus[None]) -> None:
        try:
            await actor.run(task_status=task_status)
        finally:
            done.set()

    await tg.start(run, name=name)
    return done


class _Aside:
    """Reads beside the search workers (``Services.read_aside``): each on a reader of its
    own, opened for it; on a shared database, at most ``limiter``'s many at once."""

    def __init__(self, store: Store, limiter: anyio.CapacityLimiter | None) -> None:
        self._store = store
        self._limiter = limiter

    async def read(self, fn: Callable[[Reader], T]) -> T:
        def run() -> T:
            reader = self._store.reader()
            try:
                return fn(reader)
            finally:
                self._store.close_reader(reader)

        return await anyio.to_thread.run_sync(run, limiter=self._limiter)


class _Readiness:
    """Whether the daemon is warm (the model loaded, or failed to, and the vector index
    open) and settled (every actor idle, the capture spool replayed, no embedding backlog):
    what ``recallctl status --wait`` and the tests wait for. It runs the two start-up steps
    that decide them, the model's load and the spool's replay."""

    def __init__(
        self,
        store: Store,
        model: Model,
        embedding: EmbeddingActor,
        wake: MemoryObjectSendStream[list[int]],
        aside: _Aside,
    ) -> None:
        self._store = store
        self._model = model
        self._embedding = embedding
        self._wake = wake
        self._aside = aside
        self.warm = anyio.Event()
        self.settled = Settled()
        # Until the start-up replay of the capture spool has run: not settled before that.
        self._replaying_spool = True

    def watch(self, actors: list[Actor]) -> None:
        settled = self.settled
        for actor in actors:
            actor.on_change = settled.changed

            def idle(actor: Actor = actor) -> bool:
                return actor.idle and actor.queue_depth()[0] == 0

            settled.watch(idle)
        settled.watch(lambda: self._model.state != "loading")
        settled.watch(lambda: not self._replaying_spool)

    async def load_model(self) -> None:
        try:
            await self._warm_up()
        finally:
            self.warm.set()
            self.settled.changed()

    async def _warm_up(self) -> None:
        systemd.notify("STATUS=accepting; loading the embedding model")
        await self._model.load()
        embedder = self._model.embedder
        if embedder is None:
            systemd.notify(f"STATUS=accepting; lexical search only ({self._model.reason})")
            return
        await anyio.to_thread.run_sync(self._store.open_vectors, self._model.name, embedder.dim)
        self._embedding.ready = True
        self.wake_embedding()
        status = self._store.index_status()
        systemd.notify(f"STATUS=ready; {status.size if status else 0} vectors indexed")

    async def replay_spool(self, socket_path: Path, admin_token: str | None) -> None:
        try:
            await housekeeping.replay_spool(socket_path, admin_token)
        finally:
            self._replaying_spool = False
            self.settled.changed()

    def wake_embedding(self) -> None:
        """Have the embedding actor look at its backlog now."""
        try:
            self._wake.send_nowait([0])
        except (anyio.WouldBlock, anyio.ClosedResourceError):
            pass  # already awake, or stopping

    async def wait_warm(self, within_s: float) -> None:
        with anyio.move_on_after(within_s):
            await self.warm.wait()

    async def wait_settled(self, within_s: float) -> bool:
        """Wait for the pipeline to settle, then check the store agrees: a nudge dropped on
        a full queue leaves a backlog no actor is looking at, so wake the embedding actor."""
        deadline = anyio.current_time() + within_s
        while True:
            if not await self.settled.wait(max(0.0, deadline - anyio.current_time())):
                return False
            _counts, backlog = await self._aside.read(lambda r: r.records.counts())
            if not backlog or not self._embedding.ready:
                return True
            if anyio.current_time() >= deadline:
                return False
            # The nudge is in the embedding actor's queue now: the next wait sees it busy.
            self.wake_embedding()


class Parts:
    """What a running daemon is made of, built in one place (:meth:`build`): the store's
    side, the actors and their queues, the reads aside and the readiness, the search
    workers, and the :class:`Services` and :class:`Server` wired from them. The parts do
    the work; what is here beside the wiring reads several of them at once (the status
    report, whether semantic search is up)."""

    def __init__(
        self, daemon: Daemon, store: Store, approvals: Approvals, credentials: AgentCredentials
    ) -> None:
        s = daemon.settings
        self._daemon = daemon
        self.store = store
        self.model = Model(s.embedder, s.model_path, s.embed_backend)
        # Presented in a hello, it grants admin:workspace (see recalld.domain.scopes).
        self.admin_token: str | None = None
        # Why there is none, for the log and the status report.
        self.admin_token_problem: str | None = None
        try:
            self.admin_token = ensure_admin_token(paths.admin_token_path())
        except AdminTokenUnavailable as exc:
            self.admin_token_problem = str(exc)
            log.error("%s: admin:workspace cannot be granted", exc)
        self.aside = _Aside(
            store,
            # Reads aside wait here, in the event loop, for a connection left beside the
            # long-lived readers' (the store's bound), not in threads the writer needs.
            anyio.CapacityLimiter(s.database_connection_limit - s.search_workers - 3)
            if s.database_url
            else None,
        )
        eval_reader, embed_reader = store.reader(), store.reader()
        self.readers = [eval_reader, embed_reader]

        eval_send, eval_recv = anyio.create_memory_object_stream[list[int]](256)
        embed_send, embed_recv = anyio.create_memory_object_stream[list[int]](256)
        self.writes = _WriteSide(store, s, eval_send)
        self.writer, self.keeper = self.writes.writer, self.writes.keeper
        self.evaluation = EvaluationActor(
            eval_recv, embed_send, eval_reader, self.writes.evaluation.submit
        )
        self.embedding = EmbeddingActor(
            self.model,
            embed_recv,
            embed_reader,
            self.writes.embedding.submit,
            batch=s.embed_batch,
            last_client_write=lambda: self.writer.last_client_write,
            next_client_write=self.writer.next_client_write,
        )
        self.wake: MemoryObjectSendStream[list[int]] = embed_send.clone()
        self.background = _Background(self.model, self.evaluation, self.embedding, self.wake)
        self.readiness = _Readiness(store, self.model, self.embedding, self.wake, self.aside)
        self.readiness.watch([self.writer, self.keeper, self.evaluation, self.embedding])
        memory = MemoryReader(
            MemorySearchConfig(
                mode=s.search_mode,
                bm25=s.bm25,
                rerank=s.rerank,
                rerank_model_path=s.rerank_model_path,
            )
        )
        self.search = SearchActor(
            store,
            memory,
            workers=s.search_workers,
            queue_size=s.queue_size,
            processes=s.search_processes,
        )
        clients = self.writes.clients
        intake = Intake(clients.submit, clients.submit_nowait, self.model, self._semantic)
        self.services = Services(
            settings=lambda: daemon.settings,
            read=self.search.read,
            search_memories=self.search.memory_search,
            read_aside=self.aside.read,
            write=intake.write,
            write_now=intake.write_now,
            submit=clients.submit,
            embed_query=self.model.embed_query,
            semantic=self._semantic,
            model=self.model,
            memory=memory,
            approvals=approvals,
            credentials=credentials,
            report=self._report,
            wait_warm=self.readiness.wait_warm,
            wait_settled=self.readiness.wait_settled,
            wake_embedding=self.readiness.wake_embedding,
            index_ids=self._index_ids,
            index_status=store.index_status,
        )
        self.server = Server(
            self.services,
            version=__version__,
            admin_token=lambda: self.admin_token,
            stopping=lambda: daemon.state is p.RunState.STOPPING,
        )

    @classmethod
    async def build(cls, stack: AsyncExitStack, daemon: Daemon) -> Parts:
        """Open the store (waiting for a shared one to answer), bring its rows up to date and
        build every part on it; what needs releasing goes on ``stack``."""
        s = daemon.settings
        beside = stack.enter_context(fusion.semantic_threads())
        store = await _open_store_when_reachable(s, s.data_path, beside)
        stack.callback(store.close)
        git_readers = git_process.GitReaders(deadline_s=s.git_read_deadline_s)
        git_process.use(git_readers)
        stack.callback(git_process.use, None)
        stack.push_async_callback(anyio.to_thread.run_sync, git_readers.close)
        await anyio.to_thread.run_sync(rekey_workspaces, store, workspace_identity.identify)
        startup = store.reader()
        try:
            approvals = Approvals(
                p.WorkspaceApproval(
                    workspace=a.workspace, approved_at=a.approved_at, approved_by=a.approved_by
                )
                for a in startup.ops.approvals()
            )
            credentials = AgentCredentials(
                (c.agent, c.token_digest, c.created_at) for c in startup.ops.credentials()
            )
        finally:
            store.close_reader(startup)
        parts = cls(daemon, store, approvals, credentials)
        for reader in parts.readers:
            stack.callback(store.close_reader, reader)
        return parts

    def _semantic(self) -> bool:
        return self.store.index_status() is not None

    async def _index_ids(self) -> np.ndarray:
        return await anyio.to_thread.run_sync(self.store.index_ids)

    async def _report(self, who: Principal) -> p.StatusReport:
        daemon = self._daemon
        parts = StatusParts(
            version=__version__,
            started_at=daemon.started_at,
            socket=lambda: str(daemon.socket.path),
            data_dir=str(daemon.settings.data_path),
            state=lambda: daemon.state,
            model=self.model,
            actors=[self.writer, self.evaluation, self.embedding, self.search],
            keeper=self.keeper,
            connections=lambda: list(self.server.connections.values()),
            latency=self.search.latency_percentiles,
            index=self.store.index_status,
            counts=lambda: self.aside.read(lambda r: r.records.counts()),
            settled=self.readiness.settled.now,
            database=self.store.database,
            spool=lambda: anyio.to_thread.run_sync(default_spool().status),
            admin_token_problem=lambda: self.admin_token_problem,
        )
        return await build_report(parts, who)


# Waiting for a shared database that does not answer: the first retry after this long,
# doubling up to the cap (a fleet of laptops must not hammer a database that restarts).
STORE_RETRY_FIRST_S = 0.5
STORE_RETRY_MAX_S = 30.0


async def _open_store_when_reachable(s: Settings, data_dir: Path, beside: Executor) -> Store:
    """The store, once its server answers: a daemon started while the team database is
    down waits (saying so in its log and systemd status) instead of exiting, so a machine
    that boots before the network does not need a person to start it again."""
    delay = STORE_RETRY_FIRST_S
    while True:
        try:
            return await anyio.to_thread.run_sync(_open_store, s, data_dir, beside)
        except StoreUnreachable as exc:
            log.warning("%s; trying again in %.1f s", exc, delay)
            # The start limit of a notify unit would kill a daemon that waits: extend it.
            systemd.notify(
                f"EXTEND_TIMEOUT_USEC={int((delay + 10) * 1e6)}\nSTATUS=waiting for {exc}"
            )
        await anyio.sleep(delay)
        delay = min(delay * 2, STORE_RETRY_MAX_S)


def _open_store(s: Settings, data_dir: Path, beside: Executor) -> Store:
    """The engine the settings name: a shared PostgreSQL, else the embedded SQLite, whose
    readers run the semantic channel in ``beside``'s threads."""
    if s.database_url:
        # Imported here: psycopg is loaded only by daemons that use team memory.
        from .store.postgres import PgStore

        return PgStore(
            s.database_url,
            connections=s.database_connection_limit,
            prepare=s.database_prepare,
        )
    return SqliteStore(data_dir, durability=s.durability, beside=beside)
