"""The embedded engine: SQLite (WAL, FTS5) as the source of truth, FAISS as its vector cache.

One writer connection, used by the writer actor's thread for group commits; one read
connection per reader (search workers, the evaluation and embedding actors). FAISS is a cache
of the vectors table: opened (loaded or rebuilt) once the model is known, changed only through
:meth:`SqliteStore.vectors_added` / :meth:`SqliteStore.vectors_removed`, snapshotted to disk.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from recall_client import protocol as p

from ...errors import RecallError
from ..port import BatchJob, Reader, StorageFailure
from ..sql.sides import SqlReader, SqlWriteTx
from .lessons import FaissLessons, Unindexed
from .retrieval import RetrievalReads
from .schema import DB_NAME, SqliteDb, open_reader, open_writer
from .vector_index import VectorIndex

__all__ = ["DB_NAME", "SqliteReader", "SqliteStore"]

# A reader of the shared SQL on a SQLite connection.
SqliteReader = SqlReader[SqliteDb]

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


def _reader(conn: SqliteDb, store: SqliteStore) -> SqliteReader:
    return SqlReader(conn, RetrievalReads(conn, store.index))


class SqliteStore:
    def __init__(self, data_dir: Path, *, durability: str = "full") -> None:
        self.data_dir = data_dir
        self._writer = open_writer(data_dir, durability=durability)
        self.unindexed = Unindexed()
        self._index: VectorIndex | None = None
        self._tx = SqlWriteTx(
            self._writer,
            RetrievalReads(self._writer, self.index),
            FaissLessons(self.index, self.unindexed),
        )

    def index(self) -> VectorIndex | None:
        return self._index

    # ------------------------------------------------------------------ readers

    def reader(self) -> SqliteReader:
        return _reader(open_reader(self.data_dir), self)

    def close_reader(self, reader: Reader) -> None:
        assert isinstance(reader, SqlReader), "a reader of another store"
        reader.db.close()

    # ------------------------------------------------------------------ writes

    def apply_batch(self, jobs: Sequence[BatchJob], now: float) -> None:
        conn = self._writer
        batch = self.unindexed.mark()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
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

    def _apply(self, conn: SqliteDb, job: BatchJob, now: float) -> None:
        mark = self.unindexed.mark()
        conn.execute("SAVEPOINT job")
        try:
            job.result = job.apply(self._tx, now)
        except RecallError as exc:
            job.error = exc
        except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            if code is not None and code & 0xFF in _STORAGE_FAILURES:
                raise
            log.exception("write job %s failed", type(job).__name__)
            job.error = RecallError("internal", f"write failed: {exc}")
        except Exception as exc:  # a bug in one job must not fail its batch
            log.exception("write job %s failed", type(job).__name__)
            job.error = RecallError("internal", f"write failed: {type(exc).__name__}")
        if job.error is not None:
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

    def index_status(self) -> p.IndexStatus | None:
        index = self._index
        if index is None:
            return None
        return p.IndexStatus(
            type=index.kind,
            size=index.ntotal,
            dim=index.dim,
            model=index.model,
            rebuilt_reason=index.rebuilt_reason,
        )

    def snapshot(self) -> None:
        if self._index is not None:
            self._index.snapshot_sync()

    def database(self) -> p.DatabaseStatus:
        return p.DatabaseStatus(engine="sqlite", location=str(self.data_dir / DB_NAME))

    def close(self) -> None:
        self._writer.close()
