"""Candidates for retrieval: FTS5 bm25 (bounded), FAISS neighbours, session runs, samples.

The lexical channel is bounded: FTS5 computes bm25 for every record an OR query matches, so
a query with a common word would read a large part of a big store (30 ms at 100k records,
hundreds at 1M). :func:`lexical_plan` keeps the records one search scores to about
``LEXICAL_BUDGET``: exact while the terms' document frequencies add up to the budget; past
it, the rarest terms that fit (a word in thousands of records says little about which one
is meant, and bm25 gives it little weight anyway; the semantic channel still sees the whole
query); when no rare term matches anything, all terms over the most recent records that hold
any of them.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..port import Filter
from ..sql.candidates import LEXICAL_BUDGET, SharedRetrieval
from ..sql.filters import marks
from .schema import SqliteDb
from .vector_index import VectorIndex

__all__ = ["RetrievalReads", "fts_query", "lexical_plan"]

DF_TTL_S = 60.0
DF_CACHE_SIZE = 20_000


def fts_query(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each term quoted (so no query syntax leaks in), OR-ed."""
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


@dataclass(frozen=True, slots=True)
class LexicalPlan:
    """What the lexical channel matches: ``match`` over records with rowid >= ``min_rowid``."""

    match: str
    min_rowid: int | None = None


def lexical_plan(
    conn: sqlite3.Connection, terms: Sequence[str], budget: int = LEXICAL_BUDGET
) -> LexicalPlan | None:
    """Bound the records one lexical search scores to about ``budget`` (module docstring)."""
    match = fts_query(terms)
    if match is None:
        return None
    db = conn.execute("PRAGMA database_list").fetchone()[2]
    df = sorted((_doc_frequency(conn, db, t, budget), i, t) for i, t in enumerate(terms))
    if sum(n for n, _, _ in df) <= budget:
        return LexicalPlan(match)
    kept: list[tuple[int, str]] = []
    total = 0
    for n, i, t in df:
        if total + n > budget:
            break
        kept.append((i, t))
        total += n
    if total:
        kept.sort()
        return LexicalPlan(fts_query([t for _, t in kept]) or match)
    row = conn.execute(
        "SELECT rowid FROM records_fts WHERE records_fts MATCH ? ORDER BY rowid DESC"
        " LIMIT 1 OFFSET ?",
        (match, budget - 1),
    ).fetchone()
    return LexicalPlan(match, min_rowid=row[0] if row else None)


def _doc_frequency(conn: sqlite3.Connection, db: str, term: str, cap: int) -> int:
    """Records holding ``term``, counted up to ``cap`` + 1 (past the cap only "more" matters).

    Cached per database for a minute: it steers the plan, it never scores, so a count a
    few records behind changes nothing that matters.
    """
    key = (db, term, cap)
    now = time.monotonic()
    hit = _df_cache.get(key)
    if hit is not None and now - hit[0] < DF_TTL_S:
        return hit[1]
    n = int(
        conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM records_fts WHERE records_fts MATCH ? LIMIT ?)",
            (fts_query([term]), cap + 1),
        ).fetchone()[0]
    )
    if len(_df_cache) >= DF_CACHE_SIZE:
        _df_cache.clear()
    _df_cache[key] = (now, n)
    return n


# (database, term, cap) -> (when counted, records holding it up to cap + 1). Shared by the
# workers' threads; an entry is replaced whole, and a lost race only counts twice.
_df_cache: dict[tuple[str, str, int], tuple[float, int]] = {}


class RetrievalReads(SharedRetrieval):
    """The channels' candidates, on one read connection (and the FAISS index, once open)."""

    def __init__(self, conn: SqliteDb, index: Callable[[], VectorIndex | None]) -> None:
        super().__init__(conn)
        self._conn: SqliteDb = conn
        self._index = index

    def database_id(self) -> str:
        return str(self._conn.execute("PRAGMA database_list").fetchone()[2])

    def lexical(self, terms: Sequence[str], f: Filter, depth: int) -> list[tuple[int, float]]:
        plan = lexical_plan(self._conn, terms)
        if plan is None:
            return []
        # FTS5 scores and sorts the plan's records by itself; the reader contract is checked
        # only on the best of them, a chunk at a time. Joining records into the scoring
        # query instead paid a row lookup and the contract for every scored record: half
        # again the cost of bm25 itself.
        ranked = self._conn.execute(
            "SELECT rowid, bm25(records_fts) FROM records_fts"
            " WHERE records_fts MATCH ? AND rowid >= ? ORDER BY bm25(records_fts)",
            (plan.match, plan.min_rowid or 0),
        )
        out: list[tuple[int, float]] = []
        chunk = depth
        try:
            while len(out) < depth and (rows := ranked.fetchmany(chunk)):
                allowed = self.visible([rowid for rowid, _ in rows], f)
                # FTS5's bm25() is lower-is-better
                out += [(rowid, -bm25) for rowid, bm25 in rows if rowid in allowed]
                chunk *= 2
        finally:
            ranked.close()
        return out[:depth]

    def semantic(self, qvec: np.ndarray, f: Filter, depth: int) -> list[tuple[int, float]]:
        # FAISS knows nothing of workspaces or tombstones: over-fetch, keep what the same
        # visibility filter as the lexical channel allows, and widen until enough survive.
        index = self._index()
        if index is None:
            return []
        k = depth * 4
        while True:
            ids, scores = index.search_sync(qvec, k)
            if not len(ids):
                return []
            id_list = [int(i) for i in ids]
            allowed = self.visible(id_list, f)
            kept = [(i, float(s)) for i, s in zip(id_list, scores, strict=True) if i in allowed]
            if len(kept) >= depth or k >= index.ntotal:
                return kept[:depth]
            k = min(index.ntotal, k * 4)

    def has_vectors(self) -> bool:
        return self._index() is not None

    def matching(self, term: str, rowids: Sequence[int]) -> set[int]:
        if not rowids:
            return set()
        return {
            row[0]
            for row in self._conn.execute(
                "SELECT rowid FROM records_fts WHERE records_fts MATCH ?"
                f" AND rowid IN ({marks(rowids)})",
                (fts_query([term]), *rowids),
            )
        }
