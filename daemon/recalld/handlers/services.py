"""What a handler may use: a small, explicit set of services, never the daemon itself.

The app builds one :class:`Services` from its parts and hands it to the edge, which passes it
to every handler. A handler reads through ``read`` (a search worker's reader), writes through
``write`` (the pipeline: ingest, vectors, the writer) and asks the rest for what it names.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import numpy as np
from recall_client import protocol as p

from ..config import Settings
from ..domain.approvals import Approvals
from ..domain.credentials import AgentCredentials
from ..domain.principal import Principal
from ..pipeline.intake import RequestJob
from ..pipeline.model import Model
from ..pipeline.writer import WriteJob
from ..retrieval.context_reader import SessionLog
from ..retrieval.fusion import PendingVector
from ..retrieval.memory_reader import MemoryReader
from ..store.port import IndexFigures, Reader

__all__ = ["Services"]

T = TypeVar("T")
R = TypeVar("R")


class ReadOn(Protocol):
    """Run ``fn`` on a store reader (somewhere: a search worker, a reader aside) and return
    what it returns."""

    def __call__(self, fn: Callable[[Reader], T], /) -> Awaitable[T]: ...


class WriteOn(Protocol):
    """Ingest, embed and write ``job``; its result once committed (Intake.write)."""

    def __call__(self, job: RequestJob[R], /) -> Awaitable[R]: ...


class WriteNow(Protocol):
    """``job`` queued without a wait, ``done`` called once committed; False when something
    would have to wait (Intake.write_now)."""

    def __call__(self, job: RequestJob[R], done: Callable[[WriteJob[R]], None], /) -> bool: ...


@dataclass(frozen=True, slots=True)
class Services:
    # The current settings (SIGHUP may replace them).
    settings: Callable[[], Settings]
    # Run a read on a search worker: busy when too many wait.
    read: ReadOn
    # Run a read on a reader of its own in a worker thread: a rare admin request (export,
    # doctor) must not take a search worker away from agents.
    read_aside: ReadOn
    # memory_search on a search worker (in its search process where the store has them).
    search_memories: Callable[
        [Principal, p.MemorySearch, PendingVector | None], Awaitable[p.MemorySearchResult]
    ]
    # Ingest, embed and write a client's request; the result once committed.
    write: WriteOn
    # The same without waiting, when nothing has to (Intake.write_now): False when it must.
    write_now: WriteNow
    # Queue a job of the daemon's own (a health probe) for the writer.
    submit: Callable[[WriteJob[Any]], Awaitable[None]]
    # The query's vector in the model's priority lane; None when no model is up.
    embed_query: Callable[[str], Awaitable[np.ndarray | None]]
    # Whether semantic search is up (a model loaded and the vector index open).
    semantic: Callable[[], bool]
    model: Model
    memory: MemoryReader
    approvals: Approvals
    credentials: AgentCredentials
    # The status report as a principal may see it.
    report: Callable[[Principal], Awaitable[p.StatusReport]]
    # Wait (at most so many seconds) for the model to have loaded (or failed).
    wait_warm: Callable[[float], Awaitable[None]]
    # Wait (at most so many seconds) for the pipeline to have settled; whether it did.
    wait_settled: Callable[[float], Awaitable[bool]]
    # Have the embedding actor look at its backlog now.
    wake_embedding: Callable[[], None]
    # The ids the vector index holds, and what status shows of it.
    index_ids: Callable[[], Awaitable[np.ndarray]]
    index_status: Callable[[], IndexFigures | None]
    # What each session's context hooks were given (context_block dedupes against it).
    injected: SessionLog = field(default_factory=SessionLog)

    def visibility(self, chosen: p.Visibility | None) -> p.Visibility:
        """A write's visibility: the one it names, else the configured default."""
        return chosen if chosen is not None else self.settings().visibility

    @asynccontextmanager
    async def query_vector(self, text: str | None) -> AsyncIterator[PendingVector | None]:
        """The one way a read gets its query's vector: the model embeds ``text`` in its
        priority lane while the read, started in the ``with`` block, runs its lexical side;
        the read waits for the vector only where it needs it. None without ``text`` or when
        semantic search is not up. An error of the block is raised as itself, not inside
        an ExceptionGroup, whatever the embedding task did."""
        if text is None or not self.semantic():
            yield None
            return
        into = PendingVector()
        failed: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.embed_into, text, into, name="query embedding")
            try:
                yield into
            except Exception as exc:
                failed = exc
        if failed is not None:
            raise failed

    async def embed_into(self, query: str, into: PendingVector) -> None:
        """The query's vector handed to a search that waits for it (None without a model)."""
        vec = None
        try:
            vec = await self.embed_query(query)
        finally:
            into.set(vec)  # also when cancelled: a search worker may be waiting
