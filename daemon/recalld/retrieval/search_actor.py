"""The search actor: a few workers, each with its own reader, answering reads in turn.

Reads queue on one bounded stream; each worker owns a read connection and does all of a
read's store work in one thread hop. A full queue answers ``busy`` (retryable) instead of
letting latency grow without bound.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..actor import ActorBase, ActorState
from ..errors import RecallError
from ..store.port import Reader, Store

__all__ = ["SearchActor"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class _ReadJob:
    fn: Callable[[Reader], Any]
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None


class SearchActor(ActorBase):
    name = "search"

    def __init__(self, store: Store, *, workers: int, queue_size: int) -> None:
        self._store = store
        self._workers = workers
        send, receive = anyio.create_memory_object_stream[_ReadJob](queue_size)
        self._send: MemoryObjectSendStream[_ReadJob] = send
        self._receive: MemoryObjectReceiveStream[_ReadJob] = receive
        super().__init__(receive)
        self.latencies_ms: deque[float] = deque(maxlen=2000)

    def latency_percentiles(self) -> tuple[float | None, float | None, float | None]:
        """(p50, p90, p99) of the recent reads, in milliseconds."""
        data = sorted(self.latencies_ms)
        if not data:
            return None, None, None

        def pick(q: float) -> float:
            return round(data[min(len(data) - 1, int(q * len(data)))], 3)

        return pick(0.5), pick(0.9), pick(0.99)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        readers = [self._store.reader() for _ in range(self._workers)]
        try:
            async with self._receive, anyio.create_task_group() as tg:
                for i, reader in enumerate(readers):
                    tg.start_soon(
                        self._worker, reader, self._receive.clone(), name=f"search worker {i}"
                    )
                self.state = ActorState.RUNNING
                task_status.started()
        finally:
            for reader in readers:
                self._store.close_reader(reader)
            self.state = ActorState.STOPPED

    async def close(self) -> None:
        await self._send.aclose()

    async def read(self, fn: Callable[[Reader], T]) -> T:
        """Run ``fn(reader)`` in a worker's thread on its reader.

        Raises:
            RecallError: ``busy`` when the queue is full, ``unavailable`` when shutting
                down; whatever ``fn`` raises as a RecallError; ``internal`` for anything else.
        """
        started = time.perf_counter()
        job = _ReadJob(fn)
        try:
            self._send.send_nowait(job)
        except anyio.WouldBlock:
            raise RecallError(
                "busy", "too many searches queued; retry shortly", retryable=True
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RecallError("unavailable", "recalld is shutting down", retryable=True) from None
        await job.done.wait()
        if job.error is not None:
            raise job.error
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        return job.result  # type: ignore[no-any-return]

    async def _worker(self, reader: Reader, jobs: MemoryObjectReceiveStream[_ReadJob]) -> None:
        limiter = anyio.CapacityLimiter(1)
        async with jobs:
            async for job in jobs:
                try:
                    job.result = await anyio.to_thread.run_sync(job.fn, reader, limiter=limiter)
                    self.stats.processed += 1
                except RecallError as exc:
                    job.error = exc
                except Exception as exc:
                    self.stats.failed(1, f"{type(exc).__name__}: {exc}")
                    log.exception("search failed")
                    job.error = RecallError("internal", f"search failed: {type(exc).__name__}")
                finally:
                    job.done.set()
