"""What both engines' retrieval reads the same way: visibility under the reader contract,
the newest records, session neighbours and samples. The channels themselves (lexical,
semantic) are each engine's own."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..port import Filter
from .db import Db
from .filters import marks, where

__all__ = ["LEXICAL_BUDGET", "SharedRetrieval", "bm25_idf"]

# Records one lexical search scores, about, on either engine (each engine's ``lexical_plan``
# says how): bm25 costs a microsecond or two a record, so this bounds a lexical search to a
# few milliseconds however large the store grows. Past it, a search scores only its rarer
# words (a word in thousands of records says little about which one is meant); 4,000 and
# 2,000 ranked LoCoMo alike (recall@10 0.804 and 0.803, 0.783 with all conversations in one
# workspace), 1,000 a little worse (0.802, 0.781).
LEXICAL_BUDGET = 2_000


def bm25_idf(total: float, n: float) -> float:
    """bm25's idf (FTS5's formula, floored at a millionth) of a word in ``n`` of ``total``
    records. Both are often estimates (sampled statistics, a window's share) that can cross:
    a word counted in more records than the total is as common as a word can be, not an
    error (a log of a negative number raised ValueError mid-search)."""
    return max(math.log((max(total - n, 0.0) + 0.5) / (n + 0.5)), 1e-6)


# Neighbours of each record in its session, nearest first on each side: up to ? before and
# ? after, ordered by (ts, rowid) so turns stored in one second keep their capture order.
_NEIGHBOURS_SQL = """
SELECT c.rowid, c.workspace, c.kind,
  (SELECT {joined} FROM (SELECT n.rowid FROM records n
     WHERE n.workspace = c.workspace AND n.kind = c.kind AND n.session = c.session
       AND (n.ts, n.rowid) < (c.ts, c.rowid) ORDER BY n.ts DESC, n.rowid DESC LIMIT ?) b),
  (SELECT {joined} FROM (SELECT n.rowid FROM records n
     WHERE n.workspace = c.workspace AND n.kind = c.kind AND n.session = c.session
       AND (n.ts, n.rowid) > (c.ts, c.rowid) ORDER BY n.ts, n.rowid LIMIT ?) a)
FROM records c WHERE c.rowid IN ({marks}) AND c.session IS NOT NULL
"""


def _ids(joined: str | None) -> list[int]:
    return [int(x) for x in joined.split(",")] if joined else []


class SharedRetrieval:
    """The engine-neutral part of :class:`~recalld.store.port.RetrievalReads`."""

    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def visible(self, rowids: Sequence[int], f: Filter) -> set[int]:
        if not rowids:
            return set()
        clause, params = where(self._conn, f)
        # One row, not one a rowid: SQLite hands the GIL back and forth at every row it
        # steps, and under load each hand-back waits its turn for the GIL and a core (a
        # search stepped ~150 rows, 100 of them here, and spent more time waiting than
        # running).
        (allowed,) = self._conn.execute(
            f"SELECT {self._conn.joined('r.rowid')} FROM {self._conn.by_rowid('r')}"
            f" WHERE r.rowid IN ({marks(rowids)}) AND {clause}",
            (*rowids, *params),
        ).fetchone()
        return set(_ids(allowed))

    def texts(self, rowids: Sequence[int]) -> dict[int, str]:
        if not rowids:
            return {}
        return {
            int(rowid): str(text)
            for rowid, text in self._conn.execute(
                f"SELECT rowid, text FROM records WHERE rowid IN ({marks(rowids)})", tuple(rowids)
            )
        }

    def newest(self, f: Filter, limit: int) -> list[int]:
        clause, params = where(self._conn, f)
        return [
            row[0]
            for row in self._conn.execute(
                f"SELECT r.rowid FROM records r WHERE {clause} ORDER BY r.ts DESC, r.rowid DESC"
                " LIMIT ?",
                (*params, limit),
            )
        ]

    def neighbours(
        self, rowids: Sequence[int], span: int
    ) -> list[tuple[int, str, str, list[int], list[int]]]:
        if not rowids:
            return []
        sql = _NEIGHBOURS_SQL.format(joined=self._conn.joined("rowid"), marks=marks(rowids))
        return [
            (rowid, workspace, kind, _ids(before), _ids(after))
            for rowid, workspace, kind, before, after in self._conn.execute(
                sql, (span, span, *rowids)
            ).fetchall()
        ]

    def session_sample(self, workspace: str, kind: str, limit: int) -> list[tuple[str, str]]:
        rows = self._conn.execute(
            "SELECT session, text FROM records WHERE workspace = ? AND kind = ?"
            " AND session IS NOT NULL AND tombstoned_at IS NULL"
            " ORDER BY ts DESC, rowid DESC LIMIT ?",
            (workspace, kind, limit),
        ).fetchall()
        return [(s, t) for s, t in reversed(rows)]
