"""Readers of the embedded store: one read-only connection each, for the daemon's workers and
for a search process (which must not load FAISS: it asks the daemon for neighbours)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from ..port import Reader, VectorSearch
from ..sql.sides import SqlReader
from .retrieval import SqliteRetrieval
from .schema import SqliteDb, open_reader

__all__ = ["SqliteProcessReaders", "SqliteReader", "reader_on"]

# A reader of the shared SQL on a SQLite connection.
SqliteReader = SqlReader[SqliteDb]


def reader_on(
    conn: SqliteDb,
    vectors: Callable[[], VectorSearch | None],
    beside: Executor | None = None,
) -> SqliteReader:
    """A reader on ``conn`` whose semantic channel searches ``vectors`` (in ``beside``'s
    threads while the lexical channel runs, when given)."""
    return SqlReader(conn, SqliteRetrieval(conn, vectors, beside))


@dataclass(frozen=True, slots=True)
class SqliteProcessReaders:
    """Readers of the database in ``data_dir`` for a search process: read-only connections
    of its own (WAL lets them read beside the writer), vectors asked of the daemon's index."""

    data_dir: Path

    def open(self, vectors: Callable[[], VectorSearch | None]) -> SqliteReader:
        return reader_on(open_reader(self.data_dir), vectors)

    def close(self, reader: Reader) -> None:
        assert isinstance(reader, SqlReader), "a reader of another store"
        reader.db.close()
