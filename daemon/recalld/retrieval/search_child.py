"""A search process: memory_search apart from the daemon's GIL, on a reader of its own.

The daemon (:mod:`.search_processes`) starts it with one end of a pipe and sends it one
search at a time. While a search runs it asks the daemon, on the same pipe, for what only the
daemon holds: the query's vector (the model may still be embedding it) and the nearest
stored vectors (the daemon's vector index, searched there without the GIL). Everything else
(both channels' SQL, fusion, the ranker, scoring, the hits) is memory_reader's own code on
this process's read-only connection.
"""

from __future__ import annotations

import ctypes
import logging
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np
from recall_client import protocol as p

from ..domain import git_process
from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import ProcessReaders, Reader, VectorSearch
from .fusion import PendingVector, QueryVector
from .memory_reader import MemoryReader, MemorySearchConfig

__all__ = [
    "DONE",
    "ENTRY",
    "FAILED",
    "GIT",
    "NEAR",
    "VECTOR",
    "IndexFacts",
    "SearchJob",
    "main",
    "serve",
]

log = logging.getLogger(__name__)

# What a search process sends while a search runs, and the daemon's answer to each:
NEAR = "near"  # (NEAR, vector, k) -> (ids, scores, the index's size now)
VECTOR = "vector"  # (VECTOR,) -> the query's vector, or None
GIT = "git"  # (GIT, key, fn, args) -> git_process.answer's reply: a read of a repository
# and what ends the search: (DONE, result) or (FAILED, code, message, retryable).
DONE = "done"
FAILED = "failed"

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class IndexFacts:
    """The daemon's vector index as a search starts (its size is updated at each ask)."""

    model: str
    graph: bool
    ntotal: int


@dataclass(frozen=True, slots=True)
class SearchJob:
    who: Principal
    req: p.MemorySearch
    # None: the daemon's vector index is not open (no semantic channel).
    index: IndexFacts | None
    # The query's vector when the daemon had it; else ``pending``: ask for it (VECTOR) when
    # the lexical channel is done.
    vector: np.ndarray | None
    pending: bool


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
        self._pipe.send((NEAR, vec, k))
        ids, scores, self.ntotal = self._pipe.recv()
        return ids, scores


class _AskedVector(PendingVector):
    """The query's vector, asked of the daemon the first time the search waits for it."""

    def __init__(self, pipe: Connection) -> None:
        super().__init__()
        self._pipe = pipe
        self._asked = False

    def wait(self) -> np.ndarray | None:
        if not self._asked:
            self._asked = True
            self._pipe.send((VECTOR,))
            self.set(self._pipe.recv())
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
    """Answer searches from the pipe on ``fd`` until the daemon closes it (or sends None).
    The first message says how to open the reader and how to search."""
    _die_with_the_daemon()
    logging.basicConfig(level=logging.WARNING, format="recalld search process: %(message)s")
    pipe = Connection(fd)
    # Repositories are read by the daemon's git readers (one pool, one list set aside).
    git_process.use(git_process.Relayed(pipe, GIT))
    try:
        readers, config = pipe.recv()
    except EOFError:
        return
    serve(pipe, readers, config)


def serve(pipe: Connection, readers: ProcessReaders, config: MemorySearchConfig) -> None:
    """Answer searches from ``pipe`` until the daemon closes it (or sends None)."""
    memory = MemoryReader(config)
    index = _AskedIndex(pipe)
    reader = readers.open(index.open)
    try:
        while True:
            try:
                job = pipe.recv()
            except EOFError:
                return
            if job is None:
                return
            pipe.send(_run(memory, reader, index, job, pipe))
    finally:
        readers.close(reader)


def _run(
    memory: MemoryReader, reader: Reader, index: _AskedIndex, job: SearchJob, pipe: Connection
) -> tuple[object, ...]:
    index.facts = job.index
    index.ntotal = job.index.ntotal if job.index is not None else 0
    qvec: QueryVector = job.vector
    if qvec is None and job.pending:
        qvec = _AskedVector(pipe)
    try:
        return (DONE, memory.search(reader, job.who, job.req, qvec))
    except RecallError as exc:
        return (FAILED, exc.code, exc.message, exc.retryable)
    except Exception as exc:
        log.exception("search failed")
        return (FAILED, "internal", f"search failed: {type(exc).__name__}", False)
