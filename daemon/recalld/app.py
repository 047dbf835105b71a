"""The daemon: one root task group holding the actors, the listener and the background work.

Start-up, downstream first: embedding, evaluation, capture (the writer), search; then the
listener binds and READY is reported; then the model loads in the background. Shutdown runs
the other way: stop accepting, let in-flight requests finish (under a deadline), stop the
background actors (their work lives in SQLite and resumes next start), let the writer commit
what is queued, snapshot the index.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import stat
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import msgspec
from anyio.abc import SocketListener, TaskStatus
from recall_client import __version__, paths
from recall_client import protocol as p

from . import systemd
from .handlers.workspaces import Approvals
from .pipeline.writer import CaptureActor, Principal, WriteJob
from .config import RELOADABLE, Settings
from .handlers.agents import AgentCredentials
from .pipeline.embedding import EmbeddingActor, Model
from .errors import RecallError
from .pipeline.evaluation import EvaluationActor
from .domain.scopes import ensure_admin_token
from .handlers.ops import HealthProbe
from .retrieval.memory_reader import MemoryReader, MemorySearchConfig
from .retrieval.search import SearchActor
from .edge.server import Server
from .store.sqlite_schema import open_reader, open_writer
from .store.vector_index import VectorIndex

__all__ = ["Daemon", "SocketInUse"]

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 120.0
# The stop stays inside the unit's TimeoutStopSec=30 even when every step runs to its bound:
# the drain (settings.drain_timeout_s, 10 s), the writer's queued batches, the snapshot.
WRITER_TIMEOUT = 5.0
SAVE_TIMEOUT = 10.0
# Waiting for room in a full writer queue longer than this answers busy instead.
SUBMIT_TIMEOUT = 5.0


class SocketInUse(RuntimeError):
    """Another daemon already answers on the socket."""


class Daemon:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.version = __version__
        self.state = "starting"
        self.started_at = time.time()
        self._started_mono = time.monotonic()
        self.model = Model(settings.embedder, settings.model_path, settings.embed_backend)
        self.index: VectorIndex | None = None
        self.server = Server(self)
        self.socket_path = settings.socket_path
        self.data_dir = settings.data_path
        self._stop = anyio.Event()
        # Presented in a hello, it grants admin:workspace (see recalld.scopes).
        self.admin_token_path = paths.admin_token_path()
        self.admin_token: str | None = None
        # Set once the model has loaded (or failed) and the vector index is open.
        self.warm = anyio.Event()
        self._readers: list[sqlite3.Connection] = []
        self.approvals = Approvals()
        self.credentials = AgentCredentials()
        # The socket file this process created (None when systemd passed the socket).
        self._own_socket: tuple[int, int] | None = None

    # ------------------------------------------------------------------ running

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
        s = self.settings
        writer = open_writer(self.data_dir, durability=s.durability)
        self.admin_token = ensure_admin_token(self.admin_token_path)
        self.approvals.load(writer)
        self.credentials.load(writer)
        jobs_send, jobs_recv = anyio.create_memory_object_stream[WriteJob](s.queue_size)
        eval_send, eval_recv = anyio.create_memory_object_stream[list[int]](256)
        embed_send, embed_recv = anyio.create_memory_object_stream[list[int]](256)
        self._jobs = jobs_send
        self.capture = CaptureActor(writer, jobs_recv, eval_send, batch=s.capture_batch)
        # Every sender of the writer's queue is a named clone, closed at shutdown, so the
        # writer's loop ends by itself once all of them are closed and its queue is empty.
        self._eval_submit = jobs_send.clone()
        self.evaluation = EvaluationActor(
            eval_recv, embed_send, self._reader(), self._eval_submit.send
        )
        self._embed_submit = jobs_send.clone()
        self.embedding = EmbeddingActor(
            self.model, embed_recv, self._reader(), self._embed_submit.send,
            batch=s.embed_batch, last_client_write=lambda: self.capture.last_client_write,
        )
        self._wake_embedding = embed_send.clone()
        self.search = SearchActor(
            self.data_dir, self.model, workers=s.search_workers, queue_size=s.queue_size,
            memory=MemoryReader(MemorySearchConfig(
                mode=s.search_mode, bm25=s.bm25, rerank=s.rerank,
                rerank_model_path=s.rerank_model_path,
            )),
        )

        async with AsyncExitStack() as stack:
            stack.callback(writer.close)
            stack.callback(self._close_readers)
            root = await stack.enter_async_context(anyio.create_task_group())
            background = anyio.CancelScope()

            async def run_background(*, task_status: TaskStatus[None]) -> None:
                with background:
                    async with anyio.create_task_group() as bg:
                        self._background = bg
                        await bg.start(self.embedding.run, name="embedding actor")
                        await bg.start(self.evaluation.run, name="evaluation actor")
                        task_status.started()

            writer_done = anyio.Event()

            async def run_writer(*, task_status: TaskStatus[None]) -> None:
                try:
                    await self.capture.run(task_status=task_status)
                finally:
                    writer_done.set()

            await root.start(run_background, name="background actors")
            await root.start(run_writer, name="capture actor")
            await root.start(self.search.run, name="search actor")

            listener = await self._listen(listener_socket)
            accepting = anyio.CancelScope()

            async def accept(*, task_status: TaskStatus[None]) -> None:
                async with anyio.create_task_group() as conn_tg:
                    self._connections = conn_tg.cancel_scope
                    with accepting:
                        task_status.started()
                        await listener.serve(self.server.handle, task_group=conn_tg)
                    # No longer accepting; open connections finish until cancelled below.

            await root.start(accept, name="listener")
            self.state = "running"
            systemd.notify(f"READY=1\nSTATUS=accepting on {self.socket_path}; model loading\nMAINPID={os.getpid()}")
            log.info("recalld %s accepting on %s (pid %d)", self.version, self.socket_path, os.getpid())
            task_status.started()

            # Background work is cancelled first at shutdown; all of it resumes from SQLite.
            self._background.start_soon(self._load_model, name="model loader")
            self._background.start_soon(self._snapshot_periodically, name="index snapshotter")
            watchdog = systemd.watchdog_interval()
            if watchdog is not None:
                self._background.start_soon(self._watchdog, watchdog, name="watchdog")

            await self._stop.wait()

            # ---- shutdown: the head of the pipeline closes first
            self.state = "stopping"
            accepting.cancel()
            await listener.aclose()
            self._remove_socket()
            systemd.notify("STOPPING=1\nSTATUS=draining in-flight requests")
            log.info("stopping: no new connections; draining %d in-flight requests",
                     self.server.inflight())
            with anyio.move_on_after(self.settings.drain_timeout_s) as drain:
                await self.server.wait_idle()
            if drain.cancelled_caught:
                log.warning("drain deadline (%.0fs) passed with %d requests in flight; "
                            "closing their connections", self.settings.drain_timeout_s,
                            self.server.inflight())
            self._connections.cancel()
            background.cancel()
            # The writer commits what is queued (the open batches), then its loop ends.
            for sender in (jobs_send, self._eval_submit, self._embed_submit):
                await sender.aclose()
            await self._wake_embedding.aclose()
            with anyio.move_on_after(WRITER_TIMEOUT):
                await writer_done.wait()
            await self.search.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(SAVE_TIMEOUT):
                if self.index is not None:
                    try:
                        await self.index.snapshot()
                    except Exception as exc:
                        # Disk full or the like: SQLite holds every vector, so this costs only
                        # a rebuild at the next start; it must not turn a clean stop into a crash.
                        log.error("index snapshot failed (%s); the index will be rebuilt from "
                                  "SQLite at the next start", exc)
            root.cancel_scope.cancel()
        self.state = "stopped"
        log.info("recalld stopped")

    async def _listen(self, passed: socket.socket | None) -> SocketListener:
        if passed is not None:
            name = passed.getsockname()
            log.info("using the socket passed by systemd (%s)", name or "unnamed")
            if isinstance(name, str) and name:
                self.socket_path = Path(name)
            return await SocketListener.from_socket(passed)
        path = self.socket_path
        # Raises InsecureDirectory for a directory another user could swap the socket in.
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
        self._own_socket = (st.st_dev, st.st_ino)
        return listener

    def _remove_socket(self) -> None:
        """Unlink the socket this process created, so a client's next attempt fails at once
        (and recall-mcp may start a new daemon); never one systemd or another daemon owns."""
        if self._own_socket is None:
            return
        try:
            st = self.socket_path.lstat()
            if (st.st_dev, st.st_ino) == self._own_socket:
                self.socket_path.unlink()
        except OSError:
            pass

    async def _load_model(self) -> None:
        try:
            await self._warm_up()
        finally:
            self.warm.set()

    async def _warm_up(self) -> None:
        systemd.notify("STATUS=accepting; loading the embedding model")
        await self.model.load()
        if self.model.embedder is None:
            systemd.notify(f"STATUS=accepting; lexical search only ({self.model.reason})")
            return
        index = VectorIndex(self.data_dir, self.model.embedder.dim, self.model.name)
        reader = self._reader()
        await anyio.to_thread.run_sync(index.open, reader)
        self.index = index
        self.search.index = index
        self.embedding.index = index
        self.wake_embedding()
        systemd.notify(f"STATUS=ready; {index.ntotal} vectors indexed")

    async def _watchdog(self, interval: float) -> None:
        """Ping systemd's watchdog while the daemon is healthy: the event loop runs this
        task, and the writer commits a probe in time. A stuck writer stops the pings, so
        systemd restarts the daemon (Restart=on-failure) instead of it hanging silently."""
        while True:
            probe = HealthProbe()
            healthy = False
            with anyio.move_on_after(interval) as late:
                try:
                    await self.submit(probe)
                    await probe.wait()
                    healthy = True
                except RecallError as exc:
                    log.warning("watchdog: writer probe failed: %s", exc.message)
            if healthy:
                systemd.notify("WATCHDOG=1")
            elif late.cancelled_caught:
                log.warning("watchdog: the writer did not commit a probe within %.1fs", interval)
            await anyio.sleep(interval)

    async def _snapshot_periodically(self) -> None:
        while True:
            await anyio.sleep(SNAPSHOT_EVERY)
            if self.index is not None:
                try:
                    await self.index.snapshot()
                except Exception:
                    log.exception("index snapshot failed")

    # ------------------------------------------------------------------ services

    async def submit(self, job: WriteJob) -> None:
        """Queue a job for the writer; ``busy`` if the queue stays full, ``unavailable`` when stopping."""
        try:
            self._jobs.send_nowait(job)
            return
        except anyio.WouldBlock:
            pass
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RecallError("unavailable", "recalld is shutting down", retryable=True) from None
        with anyio.move_on_after(SUBMIT_TIMEOUT):
            try:
                await self._jobs.send(job)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise RecallError("unavailable", "recalld is shutting down", retryable=True) from None
            return
        raise RecallError("busy", "the write queue is full; retry shortly", retryable=True)

    def wake_embedding(self) -> None:
        """Have the embedding actor look at its backlog now."""
        try:
            self._wake_embedding.send_nowait([0])
        except (anyio.WouldBlock, anyio.ClosedResourceError):
            pass  # already awake, or stopping

    async def status_report(self, who: Principal) -> p.StatusReport:
        from .handlers.status import build_report

        return await build_report(self, who)

    def _reader(self) -> sqlite3.Connection:
        conn = open_reader(self.data_dir)
        self._readers.append(conn)
        return conn

    def _close_readers(self) -> None:
        for conn in self._readers:
            conn.close()

    @property
    def uptime_s(self) -> float:
        return time.monotonic() - self._started_mono


async def _answers(path: Path) -> bool:
    try:
        with anyio.fail_after(1):
            stream = await anyio.connect_unix(path)
    except (OSError, TimeoutError):
        return False
    await stream.aclose()
    return True
