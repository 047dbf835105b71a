"""The evaluation actor: decides what a committed record may become.

Capture already redacted and trust-scored each text before its COMMIT (that must happen
before anything is written). Evaluation is what may wait: it settles records captured as
``pending`` into ``eligible`` or ``ineligible`` by the policy below, then hands every new
record on to the embedding actor.

Policy for a pending record:
- an episode: :func:`recalld.episodes.settle` (blocked when unsafe; ineligible below the
  trust floor; eligible on a success status or a known verdict; otherwise it waits for
  work_result);
- any other kind: trust below the floor (0.3) -> ineligible (high-risk text is never served
  by default), otherwise eligible.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..handlers import episodes
from .writer import WriteJob
from ..ingest.trust import DEFAULT_TRUST_FLOOR

__all__ = ["EvaluationActor"]

log = logging.getLogger(__name__)


class _SettlePending(WriteJob):
    __slots__ = ("limit",)
    background = True

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def apply(self, conn: sqlite3.Connection, now: float) -> int:
        rows = conn.execute(
            f"{_SETTLEABLE} ORDER BY r.rowid LIMIT ?", (*episodes.SETTLEABLE_PARAMS, self.limit)
        ).fetchall()
        for rowid, kind, trust, blocked, status, task_result in rows:
            if kind == "episode":
                verdict = episodes.settle(trust, bool(blocked), status, task_result)
                assert verdict is not None, "SETTLEABLE_SQL let through an unsettleable episode"
            else:
                verdict = "eligible" if trust >= DEFAULT_TRUST_FLOOR else "ineligible"
            conn.execute(
                "UPDATE records SET eligibility = ?, updated_at = ? WHERE rowid = ?",
                (verdict, now, rowid),
            )
        return len(rows)


@dataclass(slots=True)
class _Stats:
    processed: int = 0
    errors: int = 0
    last_error: str | None = None


class EvaluationActor:
    name = "evaluation"

    def __init__(
        self,
        nudges: MemoryObjectReceiveStream[list[int]],
        downstream: MemoryObjectSendStream[list[int]],
        reader: sqlite3.Connection,
        submit: Callable[[WriteJob], Any],
        *,
        batch: int = 512,
    ) -> None:
        self._nudges = nudges
        self._downstream = downstream
        self._reader = reader
        self._submit = submit
        self._batch = batch
        self.stats = _Stats()
        self.state = "starting"

    def queue_depth(self) -> tuple[int, int]:
        s = self._nudges.statistics()
        return s.current_buffer_used, int(s.max_buffer_size)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._nudges, self._downstream:
            self.state = "running"
            task_status.started()
            # A start-up pass: whatever a crash left pending or unembedded.
            await self._settle()
            await self._forward([0])
            async for rowids in self._nudges:
                await self._settle()
                self.stats.processed += len(rowids)
                await self._forward(rowids)
            self.state = "stopped"

    async def _settle(self) -> None:
        while await anyio.to_thread.run_sync(_has_pending, self._reader):
            job = _SettlePending(self._batch)
            await self._submit(job)
            try:
                settled = await job.wait()
            except Exception as exc:
                self.stats.errors += 1
                self.stats.last_error = str(exc)
                log.warning("evaluation could not settle pending records: %s", exc)
                return
            if not settled:
                return

    async def _forward(self, rowids: list[int]) -> None:
        # The embedding actor reads its backlog from SQLite; this is only a wake-up, and one
        # already queued covers this one.
        try:
            self._downstream.send_nowait(rowids)
        except (anyio.WouldBlock, anyio.BrokenResourceError):
            pass  # already awake, or stopping


# Pending records the policy can settle now (episodes waiting for a verdict are skipped).
_SETTLEABLE = (
    "SELECT r.rowid, r.kind, r.trust, e.blocked, e.status, e.task_result FROM records r"
    " LEFT JOIN episodes e ON e.rowid = r.rowid WHERE r.eligibility = 'pending'"
    f" AND r.tombstoned_at IS NULL AND {episodes.SETTLEABLE_SQL}"
)


def _has_pending(conn: sqlite3.Connection) -> bool:
    return conn.execute(f"{_SETTLEABLE} LIMIT 1", episodes.SETTLEABLE_PARAMS).fetchone() is not None
