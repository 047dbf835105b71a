"""Candidates for retrieval in PostgreSQL: bm25 over tsvector, pgvector's HNSW, and the
shared reads (visibility, neighbours, samples).

Vector search runs in the database, not in a local cache: a vector one daemon commits is
in the HNSW index for every other daemon at that COMMIT, and row-level security filters the
neighbours like every other read, so no change feed has to keep caches in step and no
daemon ever holds another person's private vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import numpy as np

from ..port import Filter
from ..sql.candidates import SharedRetrieval
from ..sql.filters import marks, where
from .db import PgDb, psycopg_sql
from .textsearch import TSQUERY_ONE, lexical

__all__ = ["PgRetrieval"]


# One term as a tsquery, in the shared SQL's placeholders (PgDb translates them).
_ONE_TERM = TSQUERY_ONE.replace("%s", "?")


class PgRetrieval(SharedRetrieval):
    # Both channels are statements on the one connection: side by side they would only wait
    # for each other (and a reconnect must not race a second thread).
    beside: Executor | None = None

    def __init__(self, conn: PgDb, database_id: str, model: Callable[[], str | None]) -> None:
        super().__init__(conn)
        self._pg = conn
        self._database_id = database_id
        self._model = model

    def database_id(self) -> str:
        return self._database_id

    def lexical(self, terms: Sequence[str], f: Filter, depth: int) -> list[tuple[int, float]]:
        if not terms:
            return []
        clause, params = where(self._pg, f)
        # Through PgDb.run: a dropped connection is reopened, or the search says unavailable.
        condition = psycopg_sql(clause)
        return self._pg.run(lambda conn: lexical(conn, terms, condition, params, depth))

    def semantic(self, qvec: np.ndarray, f: Filter, depth: int) -> list[tuple[int, float]]:
        model = self._model()
        if model is None:
            return []
        clause, params = where(self._pg, f)
        vec = self._pg.vector(qvec)
        return [
            (int(rowid), float(score))
            for rowid, score in self._pg.execute(
                "SELECT r.rowid, 1 - (v.vec <=> ?) FROM vectors v JOIN records r"
                f" ON r.rowid = v.rowid WHERE v.model = ? AND {clause}"
                " ORDER BY v.vec <=> ? LIMIT ?",
                (vec, model, *params, vec, depth),
            )
        ]

    def has_vectors(self) -> bool:
        return self._model() is not None

    def matching(self, term: str, rowids: Sequence[int]) -> set[int]:
        if not rowids:
            return set()
        return {
            int(row[0])
            for row in self._pg.execute(
                f"SELECT rowid FROM records WHERE rowid IN ({marks(rowids)})"
                f" AND tsv @@ {_ONE_TERM}",
                (*rowids, term),
            )
        }
