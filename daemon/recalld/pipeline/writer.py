"""The capture actor: the one writer. Group commits, acknowledgement after COMMIT.

Every change to the database goes through here as a :class:`WriteJob`: client captures, and
the evaluation and embedding actors' results alike. The actor takes one job, then whatever
else is already queued (up to ``capture_batch``), applies them all in one transaction on a
worker thread (one thread hop per batch, not one per statement), commits, and only then wakes
each job's waiter. A job that fails is rolled back to its own savepoint without failing its
batch; a failed COMMIT (disk full, I/O error) fails every job of the batch as ``unavailable``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import RecallError

__all__ = ["CaptureActor", "Principal", "WriteJob", "content_hash", "new_id"]

log = logging.getLogger(__name__)

_B32 = "0123456789abcdefghjkmnpqrstvwxyz"


def new_id(prefix: str) -> str:
    """A sortable id: 48 bits of milliseconds then 40 random bits, Crockford base32."""
    value = (int(time.time() * 1000) << 40) | int.from_bytes(os.urandom(5), "big")
    chars = []
    for _ in range(18):
        chars.append(_B32[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def content_hash(kind: str, text: str) -> bytes:
    normalised = " ".join(text.split()).casefold()
    return hashlib.blake2b(f"{kind}\0{normalised}".encode(), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: the hello's agent and workspace, the peer's uid/pid."""

    agent: str
    workspace: str
    uid: int
    pid: int
    client: str = ""
    model: str | None = None
    # What this connection may do (see recalld.scopes); the hello decides.
    scopes: frozenset[str] = frozenset()
    # The hello's session, else one made for the connection.
    session: str = ""


class WriteJob:
    """One unit of work for the writer. Subclasses implement :meth:`apply`.

    ``apply`` runs on the writer thread inside the batch's transaction and must only touch
    the connection it is given. It returns the job's result or raises :class:`RecallError`.
    """

    __slots__ = ("_done", "error", "new_rowids", "result")

    # Work the daemon does for itself (vectors, settling), not a client's request.
    background = False

    def __init__(self) -> None:
        self._done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        # Rows this job created that the downstream actors must look at.
        self.new_rowids: list[int] = []

    def apply(self, conn: sqlite3.Connection, now: float) -> Any:
        raise NotImplementedError

    async def wait(self) -> Any:
        """Wait for the COMMIT. Raises the job's error, if it had one."""
        await self._done.wait()
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(slots=True)
class _Stats:
    processed: int = 0
    errors: int = 0
    batches: int = 0
    last_batch: int = 0
    commit_failures: int = 0
    last_error: str | None = None


class CaptureActor:
    """Owns the writer connection and applies :class:`WriteJob` batches."""

    name = "capture"

    def __init__(
        self,
        conn: sqlite3.Connection,
        jobs: MemoryObjectReceiveStream[WriteJob],
        downstream: MemoryObjectSendStream[list[int]],
        *,
        batch: int,
    ) -> None:
        self._conn = conn
        self._jobs = jobs
        self._downstream = downstream
        self._batch = batch
        # One thread at a time may use the connection; batches are serialised anyway.
        self._limiter = anyio.CapacityLimiter(1)
        self.stats = _Stats()
        self.state = "starting"
        # When the last batch holding a client's write committed (anyio clock); background
        # work waits for a pause in the writes (see EmbeddingActor).
        self.last_client_write = -1e9

    def queue_depth(self) -> tuple[int, int]:
        s = self._jobs.statistics()
        return s.current_buffer_used, int(s.max_buffer_size)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._jobs, self._downstream:
            self.state = "running"
            task_status.started()
            async for first in self._jobs:
                jobs = [first]
                while len(jobs) < self._batch:
                    try:
                        jobs.append(self._jobs.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                await self._commit(jobs)
            self.state = "stopped"

    async def _commit(self, jobs: list[WriteJob]) -> None:
        now = time.time()
        try:
            # Shielded: once a batch is on the writer thread it finishes and wakes its
            # waiters even during shutdown; the thread cannot be cancelled midway anyway.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(
                    _apply_batch, self._conn, jobs, now, limiter=self._limiter
                )
        except sqlite3.Error as exc:
            # The whole batch rolled back: nothing of it is in the database.
            self.stats.commit_failures += 1
            self.stats.errors += len(jobs)
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            log.error("group commit of %d jobs failed: %s", len(jobs), exc)
            failure = RecallError(
                "unavailable", f"the database could not commit ({exc}); nothing was written",
                retryable=True,
            )
            for job in jobs:
                job.error = failure
                job.new_rowids.clear()
        self.stats.batches += 1
        self.stats.last_batch = len(jobs)
        if not all(job.background for job in jobs):
            self.last_client_write = anyio.current_time()
        new_rowids: list[int] = []
        for job in jobs:
            if job.error is None:
                self.stats.processed += 1
                new_rowids.extend(job.new_rowids)
            elif not isinstance(job.error, RecallError) or job.error.code == "internal":
                self.stats.errors += 1
            job._done.set()
        if new_rowids:
            # Never block the writer on a slow downstream: it works from the database's
            # backlog (eligibility 'pending', embed_state 0), so a dropped nudge only
            # delays it until the next one.
            try:
                self._downstream.send_nowait(new_rowids)
            except (anyio.WouldBlock, anyio.BrokenResourceError):
                pass  # or stopping: the backlog is picked up at the next start


def _apply_batch(conn: sqlite3.Connection, jobs: list[WriteJob], now: float) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for job in jobs:
            conn.execute("SAVEPOINT job")
            try:
                job.result = job.apply(conn, now)
            except RecallError as exc:
                job.error = exc
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                if _is_storage_failure(exc):
                    raise
                log.exception("write job %s failed", type(job).__name__)
                job.error = RecallError("internal", f"write failed: {exc}")
            except Exception as exc:  # a bug in one job must not fail its batch
                log.exception("write job %s failed", type(job).__name__)
                job.error = RecallError("internal", f"write failed: {type(exc).__name__}")
            if job.error is not None:
                job.new_rowids.clear()
                conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _is_storage_failure(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    return code & 0xFF in {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY,
                    sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB,
                    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}

