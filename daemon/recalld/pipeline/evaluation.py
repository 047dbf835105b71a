"""The evaluation actor: decides what a committed record may become.

The ingest stage already redacted and trust-scored each text before its write (that must
happen before anything is stored). Evaluation is what may wait: it settles records captured
``pending`` by the policy (:func:`recalld.domain.policy.settle_episode` for episodes, the
trust floor for the rest), then wakes the embedding actor.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..actor import ActorBase, ActorState
from ..domain.policy import eligibility, settle_episode
from ..errors import RecallError
from ..store.port import Reader, WriteTx
from .writer import WriteJob

__all__ = ["EvaluationActor", "settle"]

log = logging.getLogger(__name__)


def settle(
    kind: str, trust: float, blocked: bool, status: str | None, task_result: float | None
) -> str:
    """The eligibility a settleable pending record gets (the store offers only those)."""
    if kind == "episode":
        verdict = settle_episode(trust, blocked, status or "", task_result)
        assert verdict is not None, "the store offered an episode that cannot settle yet"
        return verdict
    return eligibility(trust, False)


class _SettlePending(WriteJob[int]):
    __slots__ = ("limit",)
    background = True

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def apply(self, tx: WriteTx, now: float) -> int:
        return tx.records.settle_pending(self.limit, now, settle)


class EvaluationActor(ActorBase):
    name = "evaluation"

    def __init__(
        self,
        nudges: MemoryObjectReceiveStream[list[int]],
        downstream: MemoryObjectSendStream[list[int]],
        reader: Reader,
        submit: Callable[[WriteJob[Any]], Awaitable[None]],
        *,
        batch: int = 512,
    ) -> None:
        super().__init__(nudges, idle=False)
        self._nudges = nudges
        self._downstream = downstream
        self._reader = reader
        self._submit = submit
        self._batch = batch

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._nudges, self._downstream:
            self.state = ActorState.RUNNING
            task_status.started()
            # A start-up pass: whatever a crash left pending or unembedded.
            await self._settle()
            self._forward([0])
            self.idle = True
            self.on_change()
            async for rowids in self._nudges:
                self.idle = False
                await self._settle()
                self.stats.processed += len(rowids)
                self.stats.batch(len(rowids))
                self._forward(rowids)
                self.idle = self._nudges.statistics().current_buffer_used == 0
                self.on_change()
            self.state = ActorState.STOPPED

    async def _settle(self) -> None:
        while await self._has_pending():
            job = _SettlePending(self._batch)
            try:
                await self._submit(job)
                settled = await job.wait()
            except Exception as exc:  # the writer is failing or stopping: the next nudge retries
                self.stats.failed(1, str(exc))
                log.warning("evaluation could not settle pending records: %s", exc)
                return
            if not settled:
                return

    async def _has_pending(self) -> bool:
        try:
            return await anyio.to_thread.run_sync(self._reader.records.has_pending)
        except RecallError as exc:
            # A shared database away (restarting): the next nudge looks again.
            self.stats.failed(0, exc.message)
            return False

    def _forward(self, rowids: list[int]) -> None:
        # The embedding actor reads its backlog from the store; this is only a wake-up, and
        # one already queued covers this one.
        try:
            self._downstream.send_nowait(rowids)
        except (anyio.WouldBlock, anyio.BrokenResourceError):
            pass  # already awake, or stopping
