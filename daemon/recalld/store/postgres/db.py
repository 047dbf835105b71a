"""PostgreSQL connections as the shared SQL sees them (:class:`~recalld.store.sql.db.Db`).

psycopg 3, synchronous: the storage port runs on worker threads (the writer's, each search
worker's), as it does for SQLite, so each of those owns one connection and no event loop
is involved. Statements are written once with ``?`` placeholders; here they become
psycopg's ``%s`` (cached per statement text, so a hot statement costs a dict look-up), and
psycopg prepares the ones that repeat.

A reader's connection is in autocommit: every statement is its own snapshot, nothing holds
a transaction open between searches, and a connection the server dropped (a restart) is
opened again and the statement retried once; when that fails too, the caller gets
``unavailable``, retryable. The writer's connection runs explicit transactions and never
retries on its own: the store decides (see :class:`~recalld.store.postgres.PgStore`).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np
import psycopg
import psycopg.errors
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo

from ...errors import RecallError
from ..sql.db import Cursor
from .schema import MIGRATIONS, VECTOR_DIM

__all__ = ["ConnectionState", "PgDb", "PgVector", "connect", "psycopg_sql", "redacted_url"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# A connection attempt gives up after this long: a daemon whose database is gone answers
# "unavailable" quickly instead of holding its callers.
CONNECT_TIMEOUT_S = 3


class PgVector:
    """A vector parameter (pgvector's binary format: dims, unused, float32 big-endian)."""

    __slots__ = ("vec",)

    def __init__(self, vec: np.ndarray) -> None:
        self.vec = vec


class _VectorDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        vec: np.ndarray = obj.vec
        return struct.pack(">HH", len(vec), 0) + bytes(vec.astype(">f4", copy=False).data)


@lru_cache(maxsize=4096)
def psycopg_sql(sql: str) -> str:
    """The shared SQL's ``?`` placeholders as psycopg's (a literal ``%`` doubled first)."""
    return sql.replace("%", "%%").replace("?", "%s")


def redacted_url(url: str) -> str:
    """``url`` without its password, for logs and status."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.pop("password", None)
    host = str(info.get("host") or "localhost")
    port = info.get("port") or 5432
    user, dbname = info.get("user") or "", info.get("dbname") or ""
    if host.startswith("/"):  # a unix socket directory
        return f"postgresql://{user}@/{dbname}?host={host}&port={port}"
    return f"postgresql://{user}@{host}:{port}/{dbname}"


def connect(url: str, *, autocommit: bool, prepare: bool = True) -> psycopg.Connection[Any]:
    """A connection with the vector type registered; ``prepare``: psycopg prepares a
    statement on the server once it repeats (off behind a pooler in transaction mode that
    does not keep prepared statements: the next transaction may run on another server
    connection).

    Nothing is set for the session: behind such a pooler a ``SET`` stays on whichever server
    connection ran it. The search settings (``hnsw.*``) are the database's own, made by
    ``recallctl db init`` (:func:`~recalld.store.postgres.schema.init_database`), so every
    session has them, pooled or not.
    """
    conn = psycopg.connect(
        url,
        autocommit=autocommit,
        connect_timeout=CONNECT_TIMEOUT_S,
        application_name="recalld",
    )
    if not prepare:
        conn.prepare_threshold = None
    info = TypeInfo.fetch(conn, "vector")
    if info is None:
        conn.close()
        raise RecallError(
            "unavailable",
            "the database has no pgvector extension; run `recallctl db init` as its owner",
        )
    dumper = type("VectorDumper", (_VectorDumper,), {"oid": info.oid})
    conn.adapters.register_dumper(PgVector, dumper)
    return conn


class ConnectionState:
    """What the daemon last saw of its database (status shows it; shared by connections)."""

    def __init__(self, url: str) -> None:
        self.url = redacted_url(url)
        self._lock = threading.Lock()
        self.ok = True
        self.error: str | None = None
        self.since = time.time()

    def saw(self, error: BaseException | None) -> None:
        with self._lock:
            ok = error is None
            if ok != self.ok:
                self.since = time.time()
                if ok:
                    log.info("database %s reachable again", self.url)
                else:
                    log.error("database %s unreachable: %s", self.url, error)
            self.ok, self.error = ok, None if error is None else _message(error)


def _message(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


# Errors that mean the connection (or the server) is gone, not that a statement was wrong.
LOST = (psycopg.OperationalError, psycopg.InterfaceError)


class PgDb:
    """One connection; :class:`~recalld.store.sql.db.Db` for the shared SQL."""

    def __init__(
        self,
        open_conn: Callable[[], psycopg.Connection[Any]],
        state: ConnectionState,
        *,
        reconnect: bool,
    ) -> None:
        self._open = open_conn
        self._state = state
        self._reconnect = reconnect
        self._conn: psycopg.Connection[Any] | None = None
        self._pipeline: tuple[psycopg.Connection[Any], psycopg.Pipeline] | None = None
        try:
            self._conn = open_conn()
        except LOST as exc:
            # Stay up: the first statement tries again (and says unavailable meanwhile).
            state.saw(exc)
        else:
            state.saw(None)

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.reopen()
        assert self._conn is not None
        return self._conn

    def reopen(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        try:
            self._conn = self._open()
        except LOST as exc:
            self._state.saw(exc)
            raise _unavailable(exc) from exc
        self._state.saw(None)

    def run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``work`` on the connection, under its rule for a lost one (module docstring)."""
        try:
            return work(self.conn)
        except LOST as exc:
            if not self._reconnect:
                self._state.saw(exc)
                raise
        # A reader in autocommit: the work ran in no transaction, so running it again on a
        # new connection is what the caller asked for.
        self.reopen()
        try:
            return work(self.conn)
        except LOST as exc:
            self._state.saw(exc)
            raise _unavailable(exc) from exc

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        statement = psycopg_sql(sql)
        if self._pipeline is not None:
            # The pipeline's own connection: a new one would run outside its transaction.
            conn, pipeline = self._pipeline
            return _Queued(conn.execute(statement, parameters), pipeline)
        return self.run(lambda conn: conn.execute(statement, parameters))

    @contextmanager
    def pipelined(self) -> Iterator[None]:
        """Statements sent without waiting for their answers (psycopg's pipeline mode), so
        a write costs a round trip only where its caller reads a result, and at
        :meth:`sync`. An error of a statement is raised where a later one's result is read,
        or at :meth:`sync`: the writer syncs after each job, so it stays that job's error.
        Not for a reader (whose lost connection is retried statement by statement)."""
        assert not self._reconnect, "pipelines are the writer's"
        conn = self.conn
        with conn.pipeline() as pipeline:
            self._pipeline = (conn, pipeline)
            try:
                yield
            finally:
                self._pipeline = None

    def sync(self) -> None:
        """Wait for every statement sent so far (raising the first one's error)."""
        if self._pipeline is not None:
            self._pipeline[1].sync()

    def recover(self) -> None:
        """After a statement's error: end the pipeline's aborted state (the server skips
        every statement after an error until a sync) so the caller can roll back to its
        savepoint. The skipped statements' results say only that; a lost connection raises.
        """
        try:
            self.sync()
        except psycopg.errors.PipelineAborted:
            pass

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> None:
        rows = list(seq_of_parameters)
        if rows:
            statement = psycopg_sql(sql)
            with self.conn.cursor() as cur:
                cur.executemany(statement, rows)

    def abandon(self) -> None:
        """End a failed transaction: ROLLBACK while the connection lives (a dead one is
        opened again by the next statement)."""
        c = self._conn
        if c is None or c.closed or c.broken:
            return
        try:
            c.execute("ROLLBACK")
        except LOST:
            pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    # ------------------------------------------------------------------ the engine's part

    def insert_record(self, sql: str, parameters: Sequence[Any], text: str) -> int:
        """The insert; its tsvector is a generated column, computed by the insert itself."""
        rowid = self.insert_record_if_free(sql, parameters, text)
        assert rowid is not None, "an INSERT of one row"
        return rowid

    def insert_record_if_free(self, sql: str, parameters: Sequence[Any], text: str) -> int | None:
        row = self.execute(sql + " RETURNING rowid", parameters).fetchone()
        return None if row is None else int(row[0])

    def merge_text_index(self, pages: int) -> bool:
        """Nothing to merge: the tsvector's GIN index keeps itself."""
        return False

    def vector(self, vec: np.ndarray) -> PgVector:
        if len(vec) != VECTOR_DIM:
            raise RecallError(
                "unavailable",
                f"this database holds {VECTOR_DIM}-dimensional vectors, not {len(vec)}",
            )
        return PgVector(vec)

    def vector_of(self, value: Any) -> np.ndarray:
        # pgvector's text form: "[0.1,0.2,...]".
        return np.array(str(value)[1:-1].split(","), dtype=np.float32)

    def json_values(self, column: str) -> str:
        return f"jsonb_array_elements_text(({column})::jsonb) AS j(value)"

    def joined(self, column: str) -> str:
        return f"string_agg(({column})::text, ',')"

    def by_rowid(self, alias: str) -> str:
        return f"records {alias}"  # PostgreSQL's planner has statistics

    def owner(self, table: str) -> str:
        return f"{table}.owner"

    def owned(self, table: str) -> str:
        return f"{table}.owner = current_user"

    def lock(self, *key: str) -> None:
        self.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", ("\x1f".join(key),))

    def integrity(self) -> list[str]:
        # PostgreSQL guards its own pages (checksums, WAL); amcheck is the operator's tool.
        # What recalld can check is that its tables are there and readable.
        self.execute("SELECT count(*) FROM records WHERE rowid < 0").fetchone()
        return []

    def schema(self) -> tuple[int, int]:
        (version,) = self.execute(
            "SELECT coalesce(max(version), 0) FROM schema_migrations"
        ).fetchone()
        return int(version), len(MIGRATIONS)


class _Queued:
    """A statement's cursor in a pipeline: its rows are fetched when read, and its row
    count (which the server sends with its answer) waits for that answer."""

    __slots__ = ("_cursor", "_pipeline")

    def __init__(self, cursor: psycopg.Cursor[Any], pipeline: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    @property
    def rowcount(self) -> int:
        self._pipeline.sync()
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)


def _unavailable(exc: BaseException) -> RecallError:
    return RecallError(
        "unavailable",
        f"the database is unreachable ({_message(exc)}); try again",
        retryable=True,
    )
