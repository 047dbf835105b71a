"""The writer: the one actor that changes the store. Group commits, acknowledgement after COMMIT.

Every change goes through here as a :class:`WriteJob`: client writes (built by handlers from
ingested requests), and the evaluation and embedding actors' results alike. The actor takes
one job, then whatever else is already queued (up to ``capture_batch``), has the store apply
them all in one transaction on a worker thread (one thread hop per batch, not one per
statement), and only after the COMMIT wakes each job's waiter. A job that fails is rolled back
alone without failing its batch; a failed COMMIT (disk full, I/O error) fails every job of the
batch as ``unavailable``.

After the COMMIT the writer hands on what the jobs left: new rows nudge the evaluation actor
(it works from the store's backlog, so a dropped nudge only delays it); vectors written and
rows forgotten go to the index keeper, the one owner of changes to the vector index.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import anyio
import numpy as np
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..actor import ActorBase, ActorState
from ..errors import RecallError
from ..store.port import StorageFailure, Store, WriteTx

__all__ = ["IndexChange", "WriteJob", "WriterActor"]

log = logging.getLogger(__name__)

# Covariant: a job of a narrower result is a job of a wider one (a reply, Any).
R_co = TypeVar("R_co", covariant=True)

# How long a write's acknowledgement waits for its vectors to reach the index (the keeper
# applies a change in well under a millisecond; this only bounds a stalled one).
INDEX_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class IndexChange:
    """Committed vectors to add to the vector index, or rows to take out of it."""

    add_ids: np.ndarray | None = None
    add_vecs: np.ndarray | None = None
    remove_ids: np.ndarray | None = None
    # Set by the index keeper once the change is in the index (or failed to get there).
    applied: anyio.Event = field(default_factory=anyio.Event)


class WriteJob(Generic[R_co]):
    """One unit of work for the writer, ``R_co`` its result. Subclasses implement :meth:`apply`.

    ``apply`` runs on the writer thread inside the batch's transaction and may only use the
    transaction it is given. It returns the job's result or raises :class:`RecallError`.
    """

    __slots__ = (
        "_indexed",
        "_waiter",
        "done",
        "error",
        "index_adds",
        "index_removals",
        "new_rowids",
        "on_done",
        "result",
    )

    # Work the daemon does for itself (vectors, settling), not a client's request.
    background = False

    def __init__(self) -> None:
        # apply()'s, once it has run (None until then).
        self.result: R_co | None = None
        self.error: BaseException | None = None
        # Rows this job wrote that the downstream actors must look at.
        self.new_rowids: list[int] = []
        # Vectors it wrote and rows it forgot, for the index keeper once committed.
        self.index_adds: list[tuple[int, np.ndarray]] = []
        self.index_removals: list[int] = []
        self._indexed: anyio.Event | None = None
        # Committed (or failed); called then, on the event loop, instead of a waiter waking
        # (see Intake.write_now): it must not raise, nor wait.
        self.done = False
        self.on_done: Callable[[WriteJob[R_co]], None] | None = None
        # Made by the first wait() that has to wait: most jobs of a burst are answered by
        # on_done, and an anyio.Event costs microseconds to make.
        self._waiter: anyio.Event | None = None

    def apply(self, tx: WriteTx, now: float) -> R_co:
        raise NotImplementedError

    def rolled_back(self) -> None:
        """The job's savepoint (or its batch) was rolled back: it left nothing."""
        self.new_rowids.clear()
        self.index_adds.clear()
        self.index_removals.clear()

    def finish(self) -> None:
        """Committed (or failed): wake the waiter, or call on_done."""
        self.done = True
        if self._waiter is not None:
            self._waiter.set()
        if self.on_done is not None:
            self.on_done(self)

    async def wait(self) -> R_co:
        """Wait for the COMMIT, and for the vectors the job wrote to be in the index (what is
        acknowledged is searchable by meaning at once). Raises the job's error, if any."""
        if not self.done:
            if self._waiter is None:
                self._waiter = anyio.Event()
            await self._waiter.wait()
        if self.error is not None:
            raise self.error
        if self._indexed is not None:
            with anyio.move_on_after(INDEX_WAIT_S):
                await self._indexed.wait()
        return self.value()

    def value(self) -> R_co:
        """The result of a job done without an error (apply() returned it)."""
        assert self.done and self.error is None, "a job's value once it is done, not failed"
        return cast(R_co, self.result)


class WriterActor(ActorBase):
    """Owns the store's write side and applies :class:`WriteJob` batches."""

    name = "writer"

    def __init__(
        self,
        store: Store,
        jobs: MemoryObjectReceiveStream[WriteJob[Any]],
        downstream: MemoryObjectSendStream[list[int]],
        index_changes: MemoryObjectSendStream[IndexChange],
        *,
        batch: int,
    ) -> None:
        super().__init__(jobs)
        self._store = store
        self._jobs = jobs
        self._downstream = downstream
        # The index keeper's queue: the writer is its one sender, so the keeper ends after
        # the writer has handed on its last batch.
        self._index_changes = index_changes
        self._batch = batch
        # One thread at a time may use the writer connection; batches are serialised anyway.
        self._limiter = anyio.CapacityLimiter(1)
        # When the last batch holding a client's write committed (anyio clock), and an event
        # set (and replaced) at each: background work waits for a pause in the writes.
        self.last_client_write = -1e9
        self._wrote = anyio.Event()

    async def next_client_write(self) -> None:
        """Return when the next batch holding a client's write has committed."""
        await self._wrote.wait()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._jobs, self._downstream, self._index_changes:
            self.state = ActorState.RUNNING
            task_status.started()
            async for first in self._jobs:
                self.idle = False
                jobs = [first]
                while len(jobs) < self._batch:
                    try:
                        jobs.append(self._jobs.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                await self._commit(jobs)
                self.idle = self._jobs.statistics().current_buffer_used == 0
                self.on_change()
            self.state = ActorState.STOPPED

    async def _commit(self, jobs: list[WriteJob[Any]]) -> None:
        now = time.time()
        try:
            # Shielded: once a batch is on the writer thread it finishes and wakes its
            # waiters even during shutdown; the thread cannot be cancelled midway anyway.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(
                    self._store.apply_batch, jobs, now, limiter=self._limiter
                )
        except StorageFailure as exc:
            # The whole batch rolled back: nothing of it is stored.
            self.stats.commit_failures += 1
            self.stats.failed(len(jobs), str(exc))
            log.error("group commit of %d jobs failed: %s", len(jobs), exc)
            failure = RecallError(
                "unavailable",
                f"the database could not commit ({exc}); nothing was written",
                retryable=True,
            )
            for job in jobs:
                job.error = failure
        self.stats.batch(len(jobs))
        if not all(job.background for job in jobs):
            self.last_client_write = anyio.current_time()
            self._wrote.set()
            self._wrote = anyio.Event()
        new_rowids: list[int] = []
        adds: list[tuple[int, np.ndarray]] = []
        removals: list[int] = []
        for job in jobs:
            if job.error is None:
                self.stats.processed += 1
                new_rowids.extend(job.new_rowids)
                adds.extend(job.index_adds)
                removals.extend(job.index_removals)
            elif not isinstance(job.error, RecallError) or job.error.code == "internal":
                self.stats.failed(1, str(job.error))
        if adds or removals:
            change = IndexChange(
                add_ids=np.array([rowid for rowid, _ in adds], dtype=np.int64) if adds else None,
                add_vecs=np.stack([vec for _, vec in adds]) if adds else None,
                remove_ids=np.array(removals, dtype=np.int64) if removals else None,
            )
            # Committed already: the index must follow even if the caller has gone away.
            with anyio.CancelScope(shield=True):
                await self._index_changes.send(change)
            for job in jobs:
                if job.error is None and job.index_adds:
                    job._indexed = change.applied
        for job in jobs:
            job.finish()
        if new_rowids:
            # Never block the writer on a slow downstream: it works from the store's
            # backlog (eligibility 'pending', embed_state 0), so a dropped nudge only
            # delays it until the next one.
            try:
                self._downstream.send_nowait(new_rowids)
            except (anyio.WouldBlock, anyio.BrokenResourceError):
                pass  # or stopping: the backlog is picked up at the next start


class WriteQueue:
    """The writer's bounded queue, as its senders see it: a full queue slows them, and one
    that stays full answers ``busy`` (retryable)."""

    def __init__(self, send: MemoryObjectSendStream[WriteJob[Any]], timeout: float) -> None:
        self._send = send
        self._timeout = timeout

    def submit_nowait(self, job: WriteJob[Any]) -> bool:
        """Queue ``job`` if there is room; False when the queue is full.

        Raises:
            RecallError: ``unavailable`` when stopping.
        """
        try:
            self._send.send_nowait(job)
        except anyio.WouldBlock:
            return False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RecallError("unavailable", "recalld is shutting down", retryable=True) from None
        return True

    async def submit(self, job: WriteJob[Any]) -> None:
        """Queue ``job``; ``busy`` if the queue stays full, ``unavailable`` when stopping."""
        if self.submit_nowait(job):
            return
        with anyio.move_on_after(self._timeout):
            try:
                await self._send.send(job)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise RecallError(
                    "unavailable", "recalld is shutting down", retryable=True
                ) from None
            return
        raise RecallError("busy", "the write queue is full; retry shortly", retryable=True)

    async def aclose(self) -> None:
        await self._send.aclose()
