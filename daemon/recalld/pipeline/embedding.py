"""The embedding actor, and the index keeper: the one owner of changes to the vector index.

The actor embeds every record that has no vector yet, in micro-batches, in the pauses
between client writes; the writer stores the vectors, and the keeper puts them in the index.
The keeper is the only task that changes the index: what the embedding actor and write jobs
wrote, and what forgetting took out, reaches it as :class:`~recalld.pipeline.writer.IndexChange`
after the COMMIT, in commit order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import numpy as np
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream

from ..actor import ActorBase, ActorState
from ..errors import RecallError
from ..store.port import Reader, Store, WriteTx
from .model import Model
from .writer import IndexChange, WriteJob

__all__ = ["WRITE_PAUSE_S", "WRITE_YIELD_MAX_S", "EmbeddingActor", "IndexKeeper"]

log = logging.getLogger(__name__)

# A pause in client writes this long lets a background batch go; one goes at least this often.
WRITE_PAUSE_S = 0.05
WRITE_YIELD_MAX_S = 1.0


class _StoreVectors(WriteJob[list[int]]):
    """Write vectors for records that still exist, and mark them embedded."""

    __slots__ = ("model", "rows", "vecs")
    background = True

    def __init__(self, model: str, rows: list[int], vecs: np.ndarray) -> None:
        super().__init__()
        self.model = model
        self.rows = rows
        self.vecs = vecs

    def apply(self, tx: WriteTx, now: float) -> list[int]:
        stored = tx.records.store_vectors(
            self.model,
            list(zip(self.rows, self.vecs, strict=True)),
        )
        keep = set(stored)
        self.index_adds = [
            (rowid, vec) for rowid, vec in zip(self.rows, self.vecs, strict=True) if rowid in keep
        ]
        return stored


class IndexKeeper(ActorBase):
    """Applies committed index changes, one at a time, in a worker thread."""

    name = "index keeper"

    def __init__(self, store: Store, changes: MemoryObjectReceiveStream[IndexChange]) -> None:
        super().__init__(changes)
        self._store = store
        self._changes = changes

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._changes:
            self.state = ActorState.RUNNING
            task_status.started()
            async for change in self._changes:
                self.idle = False
                try:
                    await anyio.to_thread.run_sync(self._apply, change)
                    self.stats.processed += len(change.add_ids) if change.add_ids is not None else 0
                    self.stats.batch(1)
                except Exception as exc:  # the store keeps every vector: a restart rebuilds
                    self.stats.failed(1, f"{type(exc).__name__}: {exc}")
                    log.exception("applying a change to the vector index failed")
                finally:
                    change.applied.set()
                self.idle = self._changes.statistics().current_buffer_used == 0
                self.on_change()
            self.state = ActorState.STOPPED

    def _apply(self, change: IndexChange) -> None:
        if change.add_ids is not None and change.add_vecs is not None:
            self._store.vectors_added(change.add_ids, change.add_vecs)
        if change.remove_ids is not None:
            self._store.vectors_removed(change.remove_ids)


class EmbeddingActor(ActorBase):
    """Embeds every record that has no vector yet, in micro-batches."""

    name = "embedding"

    def __init__(
        self,
        model: Model,
        nudges: MemoryObjectReceiveStream[list[int]],
        reader: Reader,
        submit: Callable[[WriteJob[Any]], Awaitable[None]],
        *,
        batch: int,
        last_client_write: Callable[[], float],
        next_client_write: Callable[[], Awaitable[None]],
    ) -> None:
        super().__init__(nudges)
        self._model = model
        self._last_client_write = last_client_write
        self._next_client_write = next_client_write
        # Set once the model has loaded and the index is open; until then nothing embeds.
        self.ready = False
        self._nudges = nudges
        self._reader = reader
        self._submit = submit
        self._batch = batch
        self._read_limiter = anyio.CapacityLimiter(1)
        self.backlog = 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._nudges:
            self.state = ActorState.WAITING_FOR_MODEL
            task_status.started()
            async for _ in self._nudges:
                # Coalesce: the backlog query below sees every waiting record anyway.
                while True:
                    try:
                        self._nudges.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                if not self.ready:
                    continue
                self.idle = False
                self.state = ActorState.RUNNING
                await self._drain_backlog()
                self.idle = self._nudges.statistics().current_buffer_used == 0
                self.on_change()
            self.state = ActorState.STOPPED

    async def _drain_backlog(self) -> None:
        after = 0
        while True:
            try:
                rows = await anyio.to_thread.run_sync(
                    self._reader.records.unembedded, after, self._batch, limiter=self._read_limiter
                )
            except RecallError as exc:
                # A shared database away (restarting): the next nudge looks again.
                self.stats.failed(0, exc.message)
                return
            if not rows:
                self.backlog = 0
                return
            after = rows[-1][0]
            await self._let_writes_pass()
            try:
                vecs = await self._model.embed_batch([text for _, text in rows])
            except Exception as exc:  # a model error must not kill the actor
                self.stats.failed(len(rows), f"{type(exc).__name__}: {exc}")
                log.exception("embedding a batch of %d failed", len(rows))
                continue
            job = _StoreVectors(self._model.name, [rowid for rowid, _ in rows], vecs)
            try:
                await self._submit(job)
                stored: list[int] = await job.wait()
            except Exception as exc:
                self.stats.failed(len(rows), str(exc))
                # The writer is failing (disk full?): stop; the next nudge retries.
                return
            self.stats.processed += len(stored)
            self.stats.batch(len(stored))

    async def _let_writes_pass(self) -> None:
        """Wait for a pause in client writes, at most WRITE_YIELD_MAX_S.

        A batch takes the model (both cores of a small machine) for a fraction of a second;
        during a burst of captures that would slow every acknowledgement, and the records are
        searchable by their words already. So the backlog is embedded in the pauses, and
        at least one batch per WRITE_YIELD_MAX_S, so meaning never falls behind for good.
        """
        with anyio.move_on_after(WRITE_YIELD_MAX_S):
            while True:
                quiet_for = anyio.current_time() - self._last_client_write()
                if quiet_for >= WRITE_PAUSE_S:
                    return
                with anyio.move_on_after(WRITE_PAUSE_S - quiet_for):
                    await self._next_client_write()
