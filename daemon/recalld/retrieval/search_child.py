"""A search process: memory_search apart from the daemon's GIL, on a reader of its own.

The daemon (:mod:`.search_actor`) starts it with one end of a pipe and sends it one search at
a time. While a search runs it asks the daemon, on the same pipe, for what only the daemon
holds: the query's vector (the model may still be embedding it), the nearest stored vectors
(the daemon's vector index, searched there without the GIL) and reads of git repositories
(the daemon's one pool of git readers). Everything else (both channels' SQL, fusion, the
ranker, scoring, the hits) is memory_reader's own code on this process's read-only
connection.

The pipe speaks the tagged Structs below, one union each way ending a search's exchange:
the daemon sends :class:`Start` once, then :class:`Search`, answers each ask (:class:`AskNear`
with :class:`Near`, :class:`AskVector` with :class:`Vector`, a git read with its answer) until
the process sends :class:`Done` or :class:`Failed`, and :class:`Stop` to end it. They travel
pickled: a git read carries the function it runs, and the start the store's recipe.
"""

from __future__ import annotations

import ctypes
import logging
import signal
from multiprocessing.connection import Connection
from typing import Any

import msgspec
import numpy as np
from recall_client import protocol as p

from ..domain import git_process
from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import ProcessReaders, Reader, VectorSearch
from .fusion import PendingVector, QueryVector
from .memory_reader import MemoryReader, MemorySearchConfig

__all__ = [
    "ENTRY",
    "AskNear",
    "AskVector",
    "Asked",
    "Done",
    "Failed",
    "IndexFacts",
    "Near",
    "Search",
    "Start",
    "Stop",
    "Vector",
    "main",
    "serve",
]

log = logging.getLogger(__name__)


class IndexFacts(msgspec.Struct, frozen=True):
    """The daemon's vector index as a search starts (its size is updated at each ask)."""

    model: str
    graph: bool
    ntotal: int


# ------------------------------------------------------------------ the daemon's messages


class Start(msgspec.Struct, frozen=True, tag="start"):
    """The first message: how to open the reader and how to search."""

    readers: ProcessReaders
    config: MemorySearchConfig


class Search(msgspec.Struct, frozen=True, tag="search"):
    """One memory_search to run."""

    who: Principal
    req: p.MemorySearch
    # None: the daemon's vector index is not open (no semantic channel).
    index: IndexFacts | None
    # The query's vector when the daemon had it; else ``pending``: ask for it (AskVector)
    # when the lexical channel is done.
    vector: np.ndarray[Any, Any] | None
    pending: bool


class Near(msgspec.Struct, frozen=True, tag="near"):
    """The answer to :class:`AskNear`: the neighbours, and the index's size now."""

    ids: np.ndarray[Any, Any]
    scores: np.ndarray[Any, Any]
    ntotal: int


class Vector(msgspec.Struct, frozen=True, tag="vector"):
    """The answer to :class:`AskVector`: the query's vector, or None (none could be made)."""

    vector: np.ndarray[Any, Any] | None


class Stop(msgspec.Struct, frozen=True, tag="stop"):
    """End the process."""


# ------------------------------------------------------------------ the process's messages


class AskNear(msgspec.Struct, frozen=True, tag="ask_near"):
    """The ``k`` stored vectors nearest ``vector``, from the daemon's index."""

    vector: np.ndarray[Any, Any]
    k: int


class AskVector(msgspec.Struct, frozen=True, tag="ask_vector"):
    """The query's vector, once the lexical channel has run."""


class Done(msgspec.Struct, frozen=True, tag="done"):
    """The search's answer."""

    result: p.MemorySearchResult


class Failed(msgspec.Struct, frozen=True, tag="failed"):
    """The search's error, as the RecallError the daemon raises for it."""

    code: p.ErrorCode
    message: str
    retryable: bool


# What a search process sends while a search runs.
Asked = AskNear | AskVector | git_process.Read | Done | Failed

_PR_SET_PDEATHSIG = 1


class _AskedIndex:
    """The daemon's vector index, asked over the pipe (a :class:`VectorSearch`)."""

    def __init__(self, pipe: Connection) -> None:
        self._pipe = pipe
        self.facts: IndexFacts | None = None
        self.ntotal = 0

    @property
    def graph(self) -> bool:
        return self.facts is not None and self.facts.graph

    @property
    def model(self) -> str:
        return self.facts.model if self.facts is not None else ""

    def open(self) -> VectorSearch | None:
        return self if self.facts is not None else None

    def search_sync(self, vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._pipe.send(AskNear(vec, k))
        near: Near = self._pipe.recv()
        self.ntotal = near.ntotal
        return near.ids, near.scores


class _AskedVector(PendingVector):
    """The query's vector, asked of the daemon the first time the search waits for it."""

    def __init__(self, pipe: Connection) -> None:
        super().__init__()
        self._pipe = pipe
        self._asked = False

    def wait(self) -> np.ndarray | None:
        if not self._asked:
            self._asked = True
            self._pipe.send(AskVector())
            answered: Vector = self._pipe.recv()
            self.set(answered.vector)
        return super().wait()


def _die_with_the_daemon() -> None:
    """Linux kills this process when the daemon dies, even by kill -9 (no orphan holds the
    database open); and a terminal's Ctrl-C is the daemon's to handle. The signal comes when
    the thread that started this process ends: the daemon starts it from its main thread."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the pipe's end (EOF) still ends this process


# What the daemon runs (``python -c ENTRY FD``): FD is this process's end of the pipe.
ENTRY = "import sys; from recalld.retrieval.search_child import main; main(int(sys.argv[1]))"


def main(fd: int) -> None:
    """Answer searches from the pipe on ``fd`` until the daemon closes it (or sends
    :class:`Stop`). The first message, :class:`Start`, says how to open the reader and how
    to search."""
    _die_with_the_daemon()
    logging.basicConfig(level=logging.WARNING, format="recalld search process: %(message)s")
    pipe = Connection(fd)
    # Repositories are read by the daemon's git readers (one pool, one list set aside).
    git_process.use(git_process.Relayed(pipe))
    try:
        start: Start = pipe.recv()
    except EOFError:
        return
    serve(pipe, start.readers, start.config)


def serve(pipe: Connection, readers: ProcessReaders, config: MemorySearchConfig) -> None:
    """Answer searches from ``pipe`` until the daemon closes it (or sends :class:`Stop`)."""
    memory = MemoryReader(config)
    index = _AskedIndex(pipe)
    reader = readers.open(index.open)
    try:
        while True:
            try:
                job = pipe.recv()
            except EOFError:
                return
            if isinstance(job, Stop):
                return
            pipe.send(_run(memory, reader, index, job, pipe))
    finally:
        readers.close(reader)


def _run(
    memory: MemoryReader, reader: Reader, index: _AskedIndex, job: Search, pipe: Connection
) -> Done | Failed:
    index.facts = job.index
    index.ntotal = job.index.ntotal if job.index is not None else 0
    qvec: QueryVector = job.vector
    if qvec is None and job.pending:
        qvec = _AskedVector(pipe)
    try:
        return Done(memory.search(reader, job.who, job.req, qvec))
    except RecallError as exc:
        return Failed(exc.code, exc.message, exc.retryable)
    except Exception as exc:
        log.exception("search failed")
        return Failed("internal", f"search failed: {type(exc).__name__}", False)
