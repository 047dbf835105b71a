"""Team memory: PostgreSQL (with pgvector) as the store many daemons share.

Each daemon keeps its socket, model, ingest stage and writer; what it commits lands in the
shared database, which every other daemon reads at once (text search at COMMIT, vectors
too: the HNSW index is a table index, not a local cache). The statements are the shared
SQL of ``store.sql``; this package adds the engine: connections (``db``), the schema with
row-level security (``schema``), bm25 over tsvector (``textsearch``), and the candidates
(``retrieval``).

What SQLite's single writer gave for free, many writers must earn:

- **Acknowledged = committed.** A batch is one transaction; a connection lost before its
  COMMIT returned fails every job of the batch ``unavailable`` (a COMMIT whose answer was
  lost may have committed: the client's retry with its idempotency key finds it).
- **Once means once.** Dedup and idempotency are unique indexes. When another daemon
  commits the same row first, this job's insert fails; its savepoint is rolled back and the
  job runs again, and now finds the committed row (a duplicate, or a replay).
- **Decisions hold.** A fact's supersession and an episode's chain are decided under an
  advisory lock on their subject or session, taken in the transaction that stores them.
  A deadlock between two daemons' batches rolls one back whole; it is run again.
- **A daemon's share of the server is bounded.** Many laptops share one server's
  ``max_connections``, so a daemon opens at most ``connections`` (the writer's one and its
  readers'); a reader asked for while all are out waits for one, then answers ``busy``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import psycopg.errors

from ...errors import RecallError
from ..port import (
    BatchJob,
    DatabaseFigures,
    IndexFigures,
    Reader,
    StorageFailure,
    StoreUnreachable,
)
from ..sql.sides import SqlReader, SqlWriteTx
from .db import LOST, ConnectionState, PgDb, connect
from .retrieval import PgRetrieval
from .schema import MIGRATIONS, SEARCH_SETTINGS, VECTOR_DIM, schema_version

__all__ = ["PgReader", "PgStore"]

log = logging.getLogger(__name__)

# A job that keeps meeting another daemon's uniqueness (or a batch that keeps deadlocking)
# is run this many times before it gives up and says so.
JOB_ATTEMPTS = 4
BATCH_ATTEMPTS = 4
_BATCH_CONFLICTS = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)

# A reader of the shared SQL on a PostgreSQL connection.
PgReader = SqlReader[PgDb]

# How long a read waits for one of the daemon's connections before it answers busy.
READER_WAIT_S = 10.0


class PgLessons:
    """:class:`~recalld.store.sql.experiences.NearLessons` in SQL: the HNSW index holds
    this transaction's own vectors already, so nothing waits aside."""

    def __init__(self, db: PgDb, store: PgStore) -> None:
        self._db = db
        self._store = store

    def near(self, vec: np.ndarray, threshold: float) -> dict[int, tuple[str | None, float]]:
        model = self._store.model
        if model is None:
            return {}
        v = self._db.vector(vec)
        return {
            int(rowid): (None, float(sim))
            for rowid, sim in self._db.execute(
                "SELECT v.rowid, 1 - (v.vec <=> ?) FROM vectors v JOIN records r"
                " ON r.rowid = v.rowid WHERE v.model = ? AND r.kind = 'lesson'"
                " AND r.tombstoned_at IS NULL ORDER BY v.vec <=> ? LIMIT 16",
                (v, model, v),
            )
            if sim >= threshold
        }

    def written(self, rowid: int, record_id: str, vec: np.ndarray) -> None:
        """In the index already (see the class docstring)."""


def _reader(db: PgDb, store: PgStore) -> PgReader:
    return SqlReader(db, PgRetrieval(db, store.location, lambda: store.model))


class PgStore:
    """The storage port on a shared PostgreSQL."""

    def __init__(self, url: str, *, connections: int, prepare: bool = True) -> None:
        """Open the writer's connection (of at most ``connections``); ``prepare``: let
        psycopg prepare the readers' statements that repeat (off behind a pooler that does
        not keep prepared statements; the writer never prepares).

        Raises:
            StoreUnreachable: the server does not answer.
            RuntimeError: the database's schema is not the one this recalld needs.
        """
        if connections < 2:
            raise ValueError("a store needs its writer's connection and a reader's")
        self.url = url
        self.state = ConnectionState(url)
        self.location = self.state.url
        self.model: str | None = None
        self._size = 0
        self._size_lock = threading.Lock()
        self._open = lambda: connect(url, autocommit=True, prepare=prepare)
        self.connections_max = connections
        # The readers' share (the writer holds one for good); idle ones are kept open for
        # the next read aside (status, export), so a busy page does not connect each time.
        self._reader_slots = threading.BoundedSemaphore(connections - 1)
        self._idle: list[PgDb] = []
        self._readers_lock = threading.Lock()
        self._readers_open = 0
        # The writer never prepares: it pipelines its statements and rolls back to
        # savepoints, and psycopg answers a ROLLBACK's result by forgetting what it
        # prepared and queueing a DEALLOCATE ALL while named statements may still be in
        # flight in the pipeline; a later Bind of one of them then failed with SQLSTATE
        # 26000 ("prepared statement does not exist") under concurrent team writers.
        # The pipeline already saves the writer its round trips.
        self._writer = PgDb(
            lambda: connect(url, autocommit=True, prepare=False), self.state, reconnect=False
        )
        try:
            self._check(self._writer.conn)
        except RecallError as exc:
            # The only RecallError here is the connection's: the server cannot be reached.
            raise StoreUnreachable(f"database {self.location}: {exc.message}") from exc
        (role,) = self._writer.execute("SELECT current_user").fetchone()
        self.role = str(role)
        self._tx = SqlWriteTx(
            self._writer,
            PgRetrieval(self._writer, self.location, lambda: self.model),
            PgLessons(self._writer, self),
        )

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        version = schema_version(conn)
        if version != len(MIGRATIONS):
            raise RuntimeError(
                f"database {self.location} is at schema version {version}, this recalld"
                f" needs {len(MIGRATIONS)}: run `recallctl db init --url ...` as its owner"
            )
        # The use_token key is the owner's: every daemon of one person accepts the tokens
        # any of them handed out.
        conn.execute(
            "INSERT INTO daemon_keys (name, key) VALUES ('use_token', %s) ON CONFLICT DO NOTHING",
            (os.urandom(32),),
        )
        name, value = "hnsw.ef_search", SEARCH_SETTINGS["hnsw.ef_search"]
        row = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
        if row is None or row[0] != value:
            log.warning(
                "database %s has %s = %s, not %s: vector searches miss neighbours; run"
                " `recallctl db init --url ...` as its owner",
                self.location,
                name,
                None if row is None else row[0],
                value,
            )

    # ------------------------------------------------------------------ readers

    def reader(self) -> PgReader:
        """A reader on one of the daemon's connections (an idle one, else a new one).

        Raises:
            RecallError: ``busy`` (retryable) when all of them stay in use for
                :data:`READER_WAIT_S`.
        """
        if not self._reader_slots.acquire(timeout=READER_WAIT_S):
            raise RecallError(
                "busy",
                f"all {self.connections_max} connections of this daemon to the database are"
                " in use; retry shortly",
                retryable=True,
            )
        with self._readers_lock:
            db = self._idle.pop() if self._idle else None
            if db is None:
                self._readers_open += 1
        if db is None:
            db = PgDb(self._open, self.state, reconnect=True)
        return _reader(db, self)

    def close_reader(self, reader: Reader) -> None:
        assert isinstance(reader, SqlReader), "a reader of another store"
        with self._readers_lock:
            self._idle.append(reader.db)
        self._reader_slots.release()

    def process_readers(self) -> None:
        # A process of its own would need its own connections and the role's credentials:
        # team searches run in the daemon's threads, most of their work in the server.
        return None

    def vector_search(self) -> None:
        return None  # pgvector searches in the server

    def connections_open(self) -> int:
        """Connections this daemon holds now: the writer's and every reader's, idle or not."""
        with self._readers_lock:
            return 1 + self._readers_open

    # ------------------------------------------------------------------ writes

    def apply_batch(self, jobs: Sequence[BatchJob], now: float) -> None:
        for attempt in range(1, BATCH_ATTEMPTS + 1):
            try:
                self._batch(jobs, now)
                self.state.saw(None)
                return
            except _BATCH_CONFLICTS as exc:
                _reset(jobs)
                log.info("batch conflicted with another daemon's (%s); attempt %d", exc, attempt)
                failure: BaseException = exc
            except (*LOST, RecallError) as exc:
                # The connection is gone (or could not be opened): nothing of the batch is
                # stored, or its COMMIT's answer was lost; either way it is not acknowledged.
                _reset(jobs)
                if isinstance(exc, LOST):
                    self.state.saw(exc)
                raise StorageFailure(f"database unreachable: {exc}") from exc
            except psycopg.Error as exc:
                _reset(jobs)
                raise StorageFailure(f"{type(exc).__name__}: {exc}") from exc
        raise StorageFailure(f"gave up after {BATCH_ATTEMPTS} conflicting attempts: {failure}")

    def _batch(self, jobs: Sequence[BatchJob], now: float) -> None:
        db = self._writer
        try:
            # One pipeline for the transaction: a statement whose answer no one reads (an
            # insert of a child row, a savepoint, a lock) costs no round trip of its own.
            with db.pipelined():
                db.execute("BEGIN")
                start = 0
                while start < len(jobs):
                    start = self._run(db, jobs, start, now)
                db.execute("COMMIT")
        except BaseException:
            db.abandon()
            raise

    def _run(self, db: PgDb, jobs: Sequence[BatchJob], start: int, now: float) -> int:
        """Apply ``jobs[start:]`` back to back under one savepoint; returns where the next
        run starts (the end, or just past the first job that failed).

        Not a savepoint per job: most batches hold no failing job. When one fails (or
        meets another daemon's row), the run rolls back to its savepoint and the jobs since
        then are applied again, each in a savepoint of its own (:meth:`_apply`), the
        failing one last. In the pipeline a statement's error is raised where a later
        result is read, by the same job or one after it, at the latest by the sync after the
        last job: the jobs applied again cover the one whose statement failed.
        """
        db.execute("SAVEPOINT run")
        for i in range(start, len(jobs)):
            try:
                jobs[i].result = jobs[i].apply(self._tx, now)
                if i == len(jobs) - 1:
                    db.sync()
            except (*_BATCH_CONFLICTS, *LOST):
                raise
            except Exception:
                break
        else:
            db.execute("RELEASE SAVEPOINT run")
            return len(jobs)
        db.recover()
        db.execute("ROLLBACK TO SAVEPOINT run")
        db.execute("RELEASE SAVEPOINT run")
        for job in jobs[start : i + 1]:
            job.rolled_back()
        for job in jobs[start : i + 1]:
            self._apply(db, job, now)
        return i + 1

    def _apply(self, db: PgDb, job: BatchJob, now: float) -> None:
        """Apply one job in a savepoint of its own: its failure rolls back only itself."""
        for _ in range(JOB_ATTEMPTS):
            db.execute("SAVEPOINT job")
            try:
                job.result = job.apply(self._tx, now)
                db.sync()  # its statements' errors are its own
            except psycopg.errors.UniqueViolation:
                # Another daemon committed the same record (or key) first: run the job again
                # and it finds it.
                db.recover()
                db.execute("ROLLBACK TO SAVEPOINT job")
                db.execute("RELEASE SAVEPOINT job")
                job.rolled_back()
                continue
            except RecallError as exc:
                job.error = exc
            except (*_BATCH_CONFLICTS, *LOST):
                raise
            except psycopg.errors.InsufficientPrivilege as exc:
                job.error = RecallError("forbidden", f"the database refused the write: {exc}")
            except psycopg.Error as exc:
                log.exception("write job %s failed", type(job).__name__)
                job.error = RecallError("internal", f"write failed: {exc.sqlstate}")
            except Exception as exc:  # a bug in one job must not fail its batch
                log.exception("write job %s failed", type(job).__name__)
                job.error = RecallError("internal", f"write failed: {type(exc).__name__}")
            if job.error is not None:
                db.recover()
                db.execute("ROLLBACK TO SAVEPOINT job")
                job.rolled_back()
            db.execute("RELEASE SAVEPOINT job")
            return
        job.error = RecallError(
            "busy", "the write kept conflicting with other daemons' writes", retryable=True
        )

    # ------------------------------------------------------------------ vectors

    def open_vectors(self, model: str, dim: int) -> None:
        if dim != VECTOR_DIM:
            raise RuntimeError(
                f"the shared database holds {VECTOR_DIM}-dimensional vectors; the model"
                f" {model} makes {dim}"
            )
        self.model = model
        self.snapshot()

    def vectors_added(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        # Committed vectors are in the HNSW index already; only the count moves.
        with self._size_lock:
            self._size += len(ids)

    def vectors_removed(self, ids: np.ndarray) -> None:
        with self._size_lock:
            self._size = max(0, self._size - len(ids))

    def index_ids(self) -> np.ndarray:
        if self.model is None:
            return np.empty(0, dtype=np.int64)
        reader = self.reader()
        try:
            rows = reader.db.execute(
                "SELECT v.rowid FROM vectors v JOIN records r ON r.rowid = v.rowid"
                " WHERE v.model = ? AND r.tombstoned_at IS NULL ORDER BY v.rowid",
                (self.model,),
            ).fetchall()
        finally:
            self.close_reader(reader)
        return np.array([r[0] for r in rows], dtype=np.int64)

    def index_status(self) -> IndexFigures | None:
        if self.model is None:
            return None
        return IndexFigures(type="pgvector-hnsw", size=self._size, dim=VECTOR_DIM, model=self.model)

    def snapshot(self) -> None:
        """Nothing to persist (the index is the database's); the vectors this daemon can see
        are counted again, so status follows what other daemons wrote."""
        if self.model is None:
            return
        reader = self.reader()
        try:
            # Records marked embedded, not vector rows: counting those would run the vectors
            # policy once per row; the doctor compares the two exactly.
            (size,) = reader.db.execute(
                "SELECT count(*) FROM records WHERE embed_state = 1 AND tombstoned_at IS NULL"
            ).fetchone()
        except RecallError:
            return
        finally:
            self.close_reader(reader)
        with self._size_lock:
            self._size = int(size)

    def database(self) -> DatabaseFigures:
        s = self.state
        return DatabaseFigures(
            engine="postgresql",
            location=self.location,
            answers=s.ok,
            since=s.since,
            error=s.error,
            role=self.role,
            connections=self.connections_open(),
            connections_max=self.connections_max,
        )

    def close(self) -> None:
        self._writer.close()
        with self._readers_lock:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()


def _reset(jobs: Sequence[BatchJob]) -> None:
    for job in jobs:
        job.rolled_back()
        job.result = None
        job.error = None
