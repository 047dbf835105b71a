"""One connection as the SQL both engines share sees it.

The statements under ``store.sql`` are written once, in the SQL that SQLite (3.39+) and
PostgreSQL (15+) both speak: ``?`` placeholders, ``ON CONFLICT``, ``RETURNING``,
``IS NOT DISTINCT FROM``. What the engines do differently goes through the few methods here:
how a new record reaches the full-text index, how a vector is passed and read back, where
JSON arrays are unnested, how concurrent writers are kept apart, and what the doctor can ask
of the engine itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["Cursor", "Db"]


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Db(Protocol):
    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...
    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> Any: ...

    def insert_record(self, sql: str, parameters: Sequence[Any], text: str) -> int:
        """Run ``sql``, an INSERT of one row into ``records`` (no RETURNING), with its
        ``text`` put in the full-text index; the new row's rowid."""
        ...

    def insert_record_if_free(self, sql: str, parameters: Sequence[Any], text: str) -> int | None:
        """As :meth:`insert_record` for an INSERT that ends in ``ON CONFLICT DO NOTHING``:
        None when a unique key it names is taken (in a shared database, maybe by a row this
        role cannot see), and nothing is written."""
        ...

    def merge_text_index(self, pages: int) -> bool:
        """Merge the full-text index's segments a step (about ``pages`` pages written);
        whether there was anything to merge."""
        ...

    def vector(self, vec: np.ndarray) -> Any:
        """``vec`` (float32, normalised) as a parameter for ``vectors.vec``."""
        ...

    def vector_of(self, value: Any) -> np.ndarray:
        """A ``vectors.vec`` value read back, as float32."""
        ...

    def json_values(self, column: str) -> str:
        """A FROM item listing the elements of the JSON array in ``column`` as ``value``."""
        ...

    def joined(self, column: str) -> str:
        """An aggregate joining ``column`` of a group with commas."""
        ...

    def by_rowid(self, alias: str) -> str:
        """``records`` as ``alias``, for a statement that names its rows by rowid: those
        lookups are always the cheapest way in, whatever else the statement asks."""
        ...

    def owner(self, table: str) -> str:
        """An expression for who owns a row of ``table``: its database role, or NULL where
        the database is one user's."""
        ...

    def owned(self, table: str) -> str:
        """A condition true for the rows of ``table`` (named so in the statement) that this
        connection's own: all of them where the database is one user's."""
        ...

    def lock(self, *key: str) -> None:
        """Keep other writers off ``key`` until this transaction ends: what a write reads
        before it decides (a subject's current facts, a session's last episode) stays true
        until it commits. A no-op where there is one writer."""
        ...

    def integrity(self) -> list[str]:
        """What the engine's own check finds wrong (empty when nothing is)."""
        ...

    def schema(self) -> tuple[int, int]:
        """(the schema version stored, the version this recalld expects)."""
        ...
