"""SqliteStore: the embedded engine's writer, its readers and its vector index (the
package's docstring says how they fit)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path

import numpy as np

from ...errors import RecallError
from ..port import BatchJob, DatabaseFigures, IndexFigures, Reader, StorageFailure
from ..sql.sides import SqlReader, SqlWriteTx
from .lessons import FaissLessons, Unindexed
from .readers import SqliteProcessReaders, SqliteReader, reader_on
from .retrieval import SqliteRetrieval
from .schema import DB_NAME, SqliteDb, open_reader, open_writer
from .vector_index import VectorIndex, latest_change

__all__ = ["SqliteStore"]

log = logging.getLogger(__name__)

# SQLite's primary result codes that mean the database itself is failing, not one job.
_STORAGE_FAILURES = frozenset(
    {
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    }
)


def _fails_the_batch(exc: Exception) -> bool:
    """The database itself is failing (disk full, I/O), not one job."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _STORAGE_FAILURES


def _job_failure(job: BatchJob, exc: Exception) -> RecallError:
    """What a job that raised ``exc`` answers."""
    if isinstance(exc, RecallError):
        return exc
    log.error("write job %s failed", type(job).__name__, exc_info=exc)
    if isinstance(exc, sqlite3.DatabaseError):
        return RecallError("internal", f"write failed: {exc}")
    # A bug in one job must not fail its batch.
    return RecallError("internal", f"write failed: {type(exc).__name__}")


def _reset(jobs: Sequence[BatchJob]) -> None:
    for job in jobs:
        job.rolled_back()
        job.result = None
        job.error = None


class SqliteStore:
    def __init__(
        self, data_dir: Path, *, durability: str = "full", beside: Executor | None = None
    ) -> None:
        self.data_dir = data_dir
        # Where its readers run the semantic channel beside the lexical one (None: after).
        self._beside = beside
        self._writer = open_writer(data_dir, durability=durability)
        self.unindexed = Unindexed()
        self._index: VectorIndex | None = None
        self._tx = SqlWriteTx(
            self._writer,
            SqliteRetrieval(self._writer, self.index),
            FaissLessons(self.index, self.unindexed),
        )

    def index(self) -> VectorIndex | None:
        return self._index

    # ------------------------------------------------------------------ readers

    def reader(self) -> SqliteReader:
        return reader_on(open_reader(self.data_dir), self.index, self._beside)

    def close_reader(self, reader: Reader) -> None:
        assert isinstance(reader, SqlReader), "a reader of another store"
        reader.db.close()

    def process_readers(self) -> SqliteProcessReaders:
        return SqliteProcessReaders(self.data_dir)

    def vector_search(self) -> VectorIndex | None:
        return self._index

    # ------------------------------------------------------------------ writes

    def apply_batch(self, jobs: Sequence[BatchJob], now: float) -> None:
        conn = self._writer
        batch = self.unindexed.mark()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not self._back_to_back(conn, jobs, now):
                    # A job failed after it wrote: start again, each job in a savepoint.
                    conn.execute("ROLLBACK")
                    self.unindexed.rollback(batch)
                    _reset(jobs)
                    conn.execute("BEGIN IMMEDIATE")
                    for job in jobs:
                        self._apply(conn, job, now)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self.unindexed.rollback(batch)
            for job in jobs:
                job.rolled_back()
            raise StorageFailure(f"{type(exc).__name__}: {exc}") from exc
        self.unindexed.committed()

    def _back_to_back(self, conn: SqliteDb, jobs: Sequence[BatchJob], now: float) -> bool:
        """Apply ``jobs`` with no savepoint; False when one failed after it wrote (the
        transaction then holds part of it).

        While any savepoint is open, FTS5 writes its pending terms out at every insert into
        it: a savepoint per job (or one around them all) costs a capture more than its own
        insert. A job that fails before it wrote anything (a request refused, a record not
        found: most failures) leaves nothing to roll back, so it costs the others nothing.
        """
        for job in jobs:
            changes, mark = conn.total_changes, self.unindexed.mark()
            try:
                job.result = job.apply(self._tx, now)
            except Exception as exc:
                if _fails_the_batch(exc):
                    raise
                if conn.total_changes != changes or self.unindexed.mark() != mark:
                    return False
                job.error = _job_failure(job, exc)
                job.rolled_back()
        return True

    def _apply(self, conn: SqliteDb, job: BatchJob, now: float) -> None:
        """Apply one job in a savepoint of its own: its failure rolls back only itself."""
        mark = self.unindexed.mark()
        conn.execute("SAVEPOINT job")
        try:
            job.result = job.apply(self._tx, now)
        except Exception as exc:
            if _fails_the_batch(exc):
                raise
            job.error = _job_failure(job, exc)
            conn.execute("ROLLBACK TO job")
            self.unindexed.rollback(mark)
            job.rolled_back()
        conn.execute("RELEASE job")

    # ------------------------------------------------------------------ vectors

    def open_vectors(self, model: str, dim: int) -> None:
        index = VectorIndex(self.data_dir, dim, model)
        conn = open_reader(self.data_dir)
        try:
            index.open(conn)
        finally:
            conn.close()
        self._index = index

    def vectors_added(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        if self._index is not None and len(ids):
            self._index.add_sync(ids, vecs)
        self.unindexed.discard([int(i) for i in ids])

    def vectors_removed(self, ids: np.ndarray) -> None:
        if self._index is not None and len(ids):
            self._index.remove_sync(ids)

    def index_ids(self) -> np.ndarray:
        return self._index.ids_sync() if self._index is not None else np.empty(0, dtype=np.int64)

    def index_status(self) -> IndexFigures | None:
        index = self._index
        if index is None:
            return None
        return IndexFigures(
            type=index.kind,
            size=index.ntotal,
            dim=index.dim,
            model=index.model,
            rebuilt_reason=index.rebuilt_reason,
        )

    def snapshot(self) -> None:
        if self._index is not None:
            conn = open_reader(self.data_dir)
            try:
                latest = latest_change(conn)
            finally:
                conn.close()
            self._index.snapshot_sync(latest)

    def database(self) -> DatabaseFigures:
        return DatabaseFigures(engine="sqlite", location=str(self.data_dir / DB_NAME))

    def close(self) -> None:
        self._writer.close()
