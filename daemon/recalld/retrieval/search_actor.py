"""The search actor: a few workers, each with its own reader, answering reads in turn.

Reads queue on one bounded stream; each worker owns a read connection and does all of a
read's store work in one thread hop. A full queue answers ``busy`` (retryable) instead of
letting latency grow without bound. A free worker takes the next read by turns between the
connections that asked (:class:`_Turns`), not by arrival alone.

memory_search, the read agents make most, is most of the daemon's Python under load, and
threads share one GIL with the event loop. On a store that can give a process readers of its
own (the embedded one), each worker also owns a search process (:mod:`.search_child`) and
runs memory_search there: the worker's thread only relays what the process asks of the
daemon (the query's vector, the vector index's neighbours, both without the GIL). The thread
is always there behind it: while the process starts (at the worker's first memory_search),
and when it dies or hangs (it is killed, the search, a read, runs again in the thread, and
another process starts a few seconds later).
"""

from __future__ import annotations

import itertools
import logging
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import anyio
import numpy as np
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from recall_client import protocol as p

from ..actor import ActorBase, ActorState
from ..asker import ASKER
from ..domain import git_process
from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import ProcessReaders, Reader, Store
from . import search_child as child
from .fusion import PendingVector, QueryVector
from .memory_reader import MemoryReader

__all__ = ["SearchActor"]

log = logging.getLogger(__name__)

T = TypeVar("T")


# A search process that says nothing for this long is hung: killed, its search answered
# unavailable. Far above any search (tens of ms), and above the query vector's wait.
PROCESS_SILENCE_S = 60.0
# How long a stopping daemon waits for a search process to end before it kills it.
PROCESS_STOP_S = 2.0
# After a search process was lost (or could not start), the worker's thread searches this
# long before another is started: a process that dies at every search cannot make the
# daemon start interpreters back to back.
RESTART_AFTER_S = 5.0


@dataclass(slots=True)
class _MemorySearch:
    """memory_search, run in the worker's search process if it has one, else in its thread."""

    who: Principal
    req: p.MemorySearch
    qvec: QueryVector

    def run(self, reader: Reader, memory: MemoryReader) -> p.MemorySearchResult:
        return memory.search(reader, self.who, self.req, self.qvec)


@dataclass(slots=True)
class _ReadJob:
    fn: Callable[[Reader], Any] | _MemorySearch
    # The connection that asked (ASKER), and the job's place in arrival order.
    asker: int = 0
    seq: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None


class _Turns:
    """The reads waiting for a worker, by asker. A free worker takes the oldest read of the
    asker with the fewest reads running: a connection that pipelines many reads (each may
    have search_workers running) cannot make another connection's one read wait behind all
    of its own. First come, first served among equals. Linear in the askers waiting, which
    max_connections bounds."""

    def __init__(self) -> None:
        self._waiting: dict[int, deque[_ReadJob]] = {}
        self._running: dict[int, int] = {}

    def put(self, job: _ReadJob) -> None:
        self._waiting.setdefault(job.asker, deque()).append(job)

    def take(self) -> _ReadJob:
        asker = min(self._waiting, key=lambda a: (self._running.get(a, 0), self._waiting[a][0].seq))
        waiting = self._waiting[asker]
        job = waiting.popleft()
        if not waiting:
            del self._waiting[asker]
        self._running[asker] = self._running.get(asker, 0) + 1
        return job

    def done(self, job: _ReadJob) -> None:
        left = self._running[job.asker] - 1
        if left:
            self._running[job.asker] = left
        else:
            del self._running[job.asker]


class _ProcessLost(Exception):
    """The search process died, closed its pipe or went silent."""


@dataclass(slots=True)
class _Process:
    proc: subprocess.Popen[bytes]
    pipe: Connection


@dataclass(slots=True)
class _Slot:
    """A worker's search process: up, starting, or not before ``start_after``."""

    process: _Process | None = None
    starting: bool = False
    start_after: float = 0.0
    # The worker has stopped: a process that comes up now is stopped at once.
    closed: bool = False


class SearchActor(ActorBase):
    name = "search"

    def __init__(
        self,
        store: Store,
        memory: MemoryReader,
        *,
        workers: int,
        queue_size: int,
        processes: bool = True,
    ) -> None:
        self._store = store
        self._memory = memory
        self._workers = workers
        # How search processes open their readers; None: memory_search runs in the threads.
        self._recipe: ProcessReaders | None = store.process_readers() if processes else None
        # The stream carries one ticket a read (its bound is the queue's); the reads
        # themselves wait in their turns, which the worker a ticket wakes takes from.
        send, receive = anyio.create_memory_object_stream[None](queue_size)
        self._send: MemoryObjectSendStream[None] = send
        self._receive: MemoryObjectReceiveStream[None] = receive
        self._turns = _Turns()
        self._arrivals = itertools.count()
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
                        self._worker, reader, self._receive.clone(), tg, name=f"search worker {i}"
                    )
                self.state = ActorState.RUNNING
                task_status.started()
        finally:
            for reader in readers:
                self._store.close_reader(reader)
            self.state = ActorState.STOPPED

    async def start(self, stops: AsyncExitStack, tg: TaskGroup) -> None:
        """Run in ``tg``; its stop on ``stops``: the queue closed, so each worker ends once
        the reads queued before are answered."""
        await tg.start(self.run, name="search actor")
        stops.push_async_callback(self.close)

    async def close(self) -> None:
        await self._send.aclose()

    async def read(self, fn: Callable[[Reader], T]) -> T:
        """Run ``fn(reader)`` in a worker's thread on its reader.

        Raises:
            RecallError: ``busy`` when the queue is full, ``unavailable`` when shutting
                down; whatever ``fn`` raises as a RecallError; ``internal`` for anything else.
        """
        result: T = await self._queued(_ReadJob(fn))
        return result

    async def memory_search(
        self, who: Principal, req: p.MemorySearch, qvec: QueryVector
    ) -> p.MemorySearchResult:
        """memory_search on a worker: in its search process, else its thread. Raises as
        :meth:`read`, and ``unavailable`` (retryable) when the search process died."""
        result: p.MemorySearchResult = await self._queued(_ReadJob(_MemorySearch(who, req, qvec)))
        return result

    async def _queued(self, job: _ReadJob) -> Any:
        started = time.perf_counter()
        job.asker, job.seq = ASKER.get(), next(self._arrivals)
        try:
            self._send.send_nowait(None)
        except anyio.WouldBlock:
            raise RecallError(
                "busy", "too many searches queued; retry shortly", retryable=True
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RecallError("unavailable", "recalld is shutting down", retryable=True) from None
        self._turns.put(job)
        await job.done.wait()
        if job.error is not None:
            raise job.error
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        return job.result

    async def _worker(
        self, reader: Reader, tickets: MemoryObjectReceiveStream[None], tg: TaskGroup
    ) -> None:
        limiter = anyio.CapacityLimiter(1)
        slot = _Slot()
        try:
            async with tickets:
                async for _ in tickets:
                    job = self._turns.take()
                    try:
                        job.result = await self._answer(job.fn, reader, slot, limiter, tg)
                        self.stats.processed += 1
                    except RecallError as exc:
                        job.error = exc
                    except Exception as exc:
                        self.stats.failed(1, f"{type(exc).__name__}: {exc}")
                        log.exception("search failed")
                        job.error = RecallError("internal", f"search failed: {type(exc).__name__}")
                    finally:
                        self._turns.done(job)
                        job.done.set()
        finally:
            slot.closed = True
            if slot.process is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(_stop_process, slot.process, PROCESS_STOP_S)

    # ------------------------------------------------------------------ search processes

    async def _answer(
        self,
        fn: Callable[[Reader], Any] | _MemorySearch,
        reader: Reader,
        slot: _Slot,
        limiter: anyio.CapacityLimiter,
        tg: TaskGroup,
    ) -> Any:
        if not isinstance(fn, _MemorySearch):
            return await anyio.to_thread.run_sync(fn, reader, limiter=limiter)
        if slot.process is not None:
            try:
                return await anyio.to_thread.run_sync(
                    self._relay, slot.process, fn, limiter=limiter
                )
            except _ProcessLost as exc:
                # A search only reads: the worker's thread runs it again, below.
                self.stats.failed(0, f"search process lost: {exc}")
                log.warning("search process lost (%s): starting another", exc)
                lost, slot.process = slot.process, None
                slot.start_after = time.monotonic() + RESTART_AFTER_S
                await anyio.to_thread.run_sync(_stop_process, lost, 0.0)
        if self._recipe is not None and not slot.starting and time.monotonic() >= slot.start_after:
            # Until its process is up (a fraction of a second), the worker's thread searches.
            slot.starting = True
            tg.start_soon(self._start_into, slot, self._recipe, name="search process start")
        return await anyio.to_thread.run_sync(fn.run, reader, self._memory, limiter=limiter)

    async def _start_into(self, slot: _Slot, recipe: ProcessReaders) -> None:
        try:
            # On the event loop's thread, never a worker thread: Linux sends a process its
            # parent-death signal when the *thread* that started it ends, and anyio ends a
            # worker thread idle for 10 s. Starting one is a vfork and exec, a millisecond.
            process = self._start_process(recipe)
        except Exception as exc:  # no interpreter to start, no fds left: threads it is, a while
            log.warning("could not start a search process: %s: %s", type(exc).__name__, exc)
            slot.start_after = time.monotonic() + RESTART_AFTER_S
            return
        finally:
            slot.starting = False
        if slot.closed:  # the worker stopped meanwhile
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_stop_process, process, PROCESS_STOP_S)
            return
        slot.process = process
        log.info("search process %d started", process.proc.pid)

    def _start_process(self, recipe: ProcessReaders) -> _Process:
        """A new search process: this interpreter, started afresh (forking a process with
        threads is unsafe), one end of a socket pair its only way to the daemon."""
        ours, theirs = socket.socketpair()
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-c", child.ENTRY, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        pipe = Connection(ours.detach())
        pipe.send(child.Start(recipe, self._memory.config))
        return _Process(proc, pipe)

    def _relay(self, process: _Process, job: _MemorySearch) -> p.MemorySearchResult:
        """Send ``job`` to the search process and answer what it asks until it is done (in
        the worker's thread: the pipe's waits and the index's search release the GIL)."""
        index = self._store.vector_search()
        qvec = job.qvec
        if isinstance(qvec, PendingVector) and qvec.came():
            qvec = qvec.wait()
        pipe = process.pipe
        try:
            pipe.send(
                child.Search(
                    who=job.who,
                    req=job.req,
                    index=None
                    if index is None
                    else child.IndexFacts(index.model, index.graph, index.ntotal),
                    vector=qvec if isinstance(qvec, np.ndarray) else None,
                    pending=isinstance(qvec, PendingVector),
                )
            )
            while True:
                if not pipe.poll(PROCESS_SILENCE_S):
                    raise _ProcessLost(f"silent for {PROCESS_SILENCE_S:.0f} s")
                asked: child.Asked = pipe.recv()
                match asked:
                    case child.AskNear(vector, k):
                        if index is None:
                            pipe.send(child.Near(np.empty(0, np.int64), np.empty(0, np.float32), 0))
                        else:
                            ids, scores = index.search_sync(vector, k)
                            pipe.send(child.Near(ids, scores, index.ntotal))
                    case child.AskVector():
                        waited = qvec.wait() if isinstance(qvec, PendingVector) else None
                        pipe.send(child.Vector(waited))
                    case git_process.Read():
                        pipe.send(git_process.answer(asked))
                    case child.Done(result):
                        return result
                    case child.Failed(code, message, retryable):
                        raise RecallError(code, message, retryable=retryable)
                    case _:
                        raise _ProcessLost(f"it sent a {type(asked).__name__}")
        except (EOFError, OSError) as exc:
            raise _ProcessLost(f"{type(exc).__name__}: {exc}") from exc


def _stop_process(process: _Process, grace: float) -> None:
    """Ask the search process to end, then kill it if it has not within ``grace`` seconds."""
    try:
        process.pipe.send(child.Stop())
    except OSError:
        pass  # already gone
    try:
        process.proc.wait(grace)
    except subprocess.TimeoutExpired:
        process.proc.kill()
        process.proc.wait()
    process.pipe.close()
