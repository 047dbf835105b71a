"""The daemon: one root task group holding the actors, the listener and the background work.

Start-up, downstream first: embedding, evaluation, capture (the writer), search; then the
listener binds and READY is reported; then the model loads in the background. Shutdown runs
the other way: stop accepting, let in-flight requests finish (under a deadline), stop the
background actors (their work lives in SQLite and resumes next start), drain the writer,
snapshot the index.
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
from anyio.abc import SocketListener, TaskStatus
from recall_client import __version__, paths
from recall_client import protocol as p

from . import systemd
from .capture import CaptureActor, WriteJob
from .embedding import EmbeddingActor, Model
from .config import Settings
from .errors import RecallError
from .evaluation import EvaluationActor
from .scopes import ensure_admin_token
from .search import SearchActor
from .server import Server
from .store import open_reader, open_writer
from .vector_index import VectorIndex

__all__ = ["Daemon", "SocketInUse"]

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 10.0
SNAPSHOT_EVERY = 120.0
SAVE_TIMEOUT = 20.0
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

    # ------------------------------------------------------------------ running

    def request_stop(self) -> None:
        self._stop.set()

    async def run(
        self,
        *,
        listener_socket: socket.socket | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        s = self.settings
        writer = open_writer(self.data_dir, durability=s.durability)
        self.admin_token = ensure_admin_token(self.admin_token_path)
        jobs_send, jobs_recv = anyio.create_memory_object_stream[WriteJob](s.queue_size)
        eval_send, eval_recv = anyio.create_memory_object_stream[list[int]](256)
        embed_send, embed_recv = anyio.create_memory_object_stream[list[int]](256)
        self._jobs = jobs_send
        self.capture = CaptureActor(writer, jobs_recv, eval_send, batch=s.capture_batch)
        self.evaluation = EvaluationActor(
            eval_recv, embed_send, self._reader(), jobs_send.clone().send
        )
        self._embed_submit = jobs_send.clone()
        self.embedding = EmbeddingActor(
            self.model, embed_recv, self._reader(), self._embed_submit.send,
            batch=s.embed_batch,
        )
        self._wake_embedding = embed_send.clone()
        self.search = SearchActor(
            self.data_dir, self.model, workers=s.search_workers, queue_size=s.queue_size
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

            await root.start(run_background, name="background actors")
            await root.start(self.capture.run, name="capture actor")
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

            await self._stop.wait()

            # ---- shutdown: the head of the pipeline closes first
            self.state = "stopping"
            systemd.notify("STOPPING=1\nSTATUS=draining")
            log.info("stopping: no new connections; draining in-flight requests")
            accepting.cancel()
            await listener.aclose()
            with anyio.move_on_after(DRAIN_TIMEOUT):
                while self._busy():
                    await anyio.sleep(0.05)
            self._connections.cancel()
            background.cancel()
            await jobs_send.aclose()
            await self._embed_submit.aclose()
            await self._wake_embedding.aclose()
            await self.search.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(SAVE_TIMEOUT):
                if self.index is not None:
                    await self.index.snapshot()
            root.cancel_scope.cancel()
        self.state = "stopped"
        log.info("recalld stopped")

    def _busy(self) -> bool:
        depth, _ = self.capture.queue_depth()
        return depth > 0 or self.server.inflight() > 0

    async def _listen(self, passed: socket.socket | None) -> SocketListener:
        if passed is not None:
            log.info("using the socket passed by systemd")
            return await SocketListener.from_socket(passed)
        path = self.socket_path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.parent.stat().st_uid == os.getuid():
            path.parent.chmod(0o700)
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
        return listener

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
        try:
            self._wake_embedding.send_nowait([0])
        except (anyio.WouldBlock, anyio.ClosedResourceError):
            pass  # already awake, or stopping
        systemd.notify(f"STATUS=ready; {index.ntotal} vectors indexed")

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

    async def status_report(self) -> p.StatusReport:
        from .status import build_report

        return await build_report(self)

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
