"""Candidates for retrieval: FTS5 bm25 (bounded), FAISS neighbours, session runs, samples.

The lexical channel is bounded: FTS5 computes bm25 for every record an OR query matches, so
a query with a common word would read a large part of a big store (30 ms at 100k records,
hundreds at 1M). :func:`lexical_plan` keeps the records one search scores to about
``LEXICAL_BUDGET``: exact while the terms' document frequencies add up to the budget; past
it, the rarest terms that fit (a word in thousands of records says little about which one
is meant, and bm25 gives it little weight anyway; the semantic channel still sees the whole
query); when no rare term matches anything, all terms over the most recent records that hold
any of them. That last case is not scored by FTS5's bm25: bm25 counts each term's records
over the whole index first (20 ms for three common words at 1M records, whatever the window),
so there each record scores the idf of the terms it holds, each term's idf estimated from its
share of the window (bm25 of a record holding each term once, at the average length).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from ..port import Filter, VectorSearch
from ..sql.candidates import LEXICAL_BUDGET, SharedRetrieval, bm25_idf
from ..sql.filters import marks, where
from .schema import SqliteDb

__all__ = ["SqliteRetrieval", "fts_query", "lexical_plan"]

DF_TTL_S = 60.0
DF_CACHE_SIZE = 20_000
# A graph search widened to this many neighbours still short of visible ones means the filter
# lets few records through (one small workspace in a large store): a wider walk of the graph
# costs more than scanning those records' own vectors, if there are at most SUBSET_SCAN_MAX.
GRAPH_WIDEN_MAX = 4_096
SUBSET_SCAN_MAX = 50_000


def fts_query(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each term quoted (so no query syntax leaks in), OR-ed."""
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


@dataclass(frozen=True, slots=True)
class LexicalPlan:
    """What the lexical channel scores: bm25 of ``match``; or, when every term is common
    (``min_rowid`` set), ``terms`` over the records with rowid >= ``min_rowid`` by their
    idf in that window (module docstring)."""

    match: str
    min_rowid: int | None = None
    terms: tuple[str, ...] = ()


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
    if row is None:  # the counts were a minute old: fewer hold the terms now
        return LexicalPlan(match)
    return LexicalPlan(match, min_rowid=row[0], terms=tuple(terms))


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


def _fetched(cursor: sqlite3.Cursor, first: int) -> Iterable[list[tuple[int, float]]]:
    """A ranked query's rows in chunks that double, so few are fetched when most are seen."""
    size = first
    while rows := cursor.fetchmany(size):
        yield rows
        size *= 2


def _chunks(
    rowids: np.ndarray, scores: np.ndarray, first: int
) -> Iterable[list[tuple[int, float]]]:
    """Ranked arrays as (rowid, score) chunks that double: only what is seen becomes Python."""
    start, size = 0, first
    while start < len(rowids):
        part = slice(start, start + size)
        yield list(zip(rowids[part].tolist(), scores[part].tolist(), strict=True))
        start, size = start + size, size * 2


class SqliteRetrieval(SharedRetrieval):
    """The channels' candidates, on one read connection (and the FAISS index, once open)."""

    def __init__(
        self,
        conn: SqliteDb,
        index: Callable[[], VectorSearch | None],
        beside: Executor | None = None,
    ) -> None:
        super().__init__(conn)
        self._conn: SqliteDb = conn
        self._index = index
        # FAISS searches without the connection (which is serialized: threadsafety 3), and
        # only the visibility check of its neighbours waits for it.
        self.beside = beside

    def database_id(self) -> str:
        return str(self._conn.execute("PRAGMA database_list").fetchone()[2])

    def lexical(self, terms: Sequence[str], f: Filter, depth: int) -> list[tuple[int, float]]:
        plan = lexical_plan(self._conn, terms)
        if plan is None:
            return []
        if plan.min_rowid is not None:
            rowids, scores = self._window_idf(plan, plan.min_rowid)
            return self._best_visible(_chunks(rowids, scores, depth), f, depth)
        # FTS5 scores and sorts the plan's records by itself; the reader contract is checked
        # only on the best of them, a chunk at a time. Joining records into the scoring
        # query instead paid a row lookup and the contract for every scored record: half
        # again the cost of bm25 itself.
        ranked = self._conn.execute(
            "SELECT rowid, -bm25(records_fts) FROM records_fts"  # bm25() is lower-is-better
            " WHERE records_fts MATCH ? ORDER BY bm25(records_fts)",
            (plan.match,),
        )
        try:
            return self._best_visible(_fetched(ranked, depth), f, depth)
        finally:
            ranked.close()

    def _best_visible(
        self, chunks: Iterable[list[tuple[int, float]]], f: Filter, depth: int
    ) -> list[tuple[int, float]]:
        """The first ``depth`` of ranked chunks (growing ones) that ``f`` lets through."""
        out: list[tuple[int, float]] = []
        for rows in chunks:
            allowed = self.visible([rowid for rowid, _ in rows], f)
            out += [(rowid, score) for rowid, score in rows if rowid in allowed]
            if len(out) >= depth:
                break
        return out[:depth]

    def _window_idf(self, plan: LexicalPlan, low: int) -> tuple[np.ndarray, np.ndarray]:
        """The records from rowid ``low`` on that hold a term, best first (rowids, scores):
        each scores the idf of the terms it holds, a term's records in the whole index
        estimated from its share of the window (FTS5's idf formula); newer first among equals.

        Each term's rowids come back as one string that NumPy parses, and NumPy sums and
        sorts: thousands of rows a term, and as Python tuples and a dict they held the GIL
        for milliseconds (most of a search's time under load).
        """
        top = self._conn.execute("SELECT max(rowid) FROM records").fetchone()[0] or low
        total, window = top, max(1, top - low + 1)  # rowids stand in for record counts
        held: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for term in plan.terms:
            (listed,) = self._conn.execute(
                "SELECT group_concat(rowid) FROM records_fts WHERE records_fts MATCH ?"
                " AND rowid >= ?",
                (fts_query([term]), low),
            ).fetchone()
            if not listed:
                continue
            rowids = np.fromstring(listed, dtype=np.int64, sep=",")
            held.append(rowids)
            weights.append(np.full(len(rowids), bm25_idf(total, len(rowids) * total / window)))
        if not held:
            return np.empty(0, dtype=np.int64), np.empty(0)
        # Summed in term order, as FTS5 would add the terms' parts.
        rowids, at = np.unique(np.concatenate(held), return_inverse=True)
        scores = np.bincount(at, weights=np.concatenate(weights))
        best = np.lexsort((-rowids, -scores))
        return rowids[best], scores[best]

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
            if index.graph and k >= GRAPH_WIDEN_MAX:
                scanned = self._scan_visible(qvec, f, depth, index.model)
                return kept[:depth] if scanned is None else scanned
            k = min(index.ntotal, k * 4)

    def _scan_visible(
        self, qvec: np.ndarray, f: Filter, depth: int, model: str
    ) -> list[tuple[int, float]] | None:
        """The ``depth`` nearest of the vectors ``f`` lets through, exactly; None if there
        are more than SUBSET_SCAN_MAX of them."""
        clause, params = where(self._conn, f)
        rows = self._conn.execute(
            "SELECT v.rowid, v.vec FROM records r JOIN vectors v ON v.rowid = r.rowid"
            f" WHERE {clause} AND v.model = ? LIMIT ?",
            (*params, model, SUBSET_SCAN_MAX + 1),
        ).fetchall()
        if len(rows) > SUBSET_SCAN_MAX:
            return None
        rows = [(rowid, blob) for rowid, blob in rows if len(blob) == qvec.size * 4]
        if not rows:
            return []
        vecs = np.frombuffer(b"".join(blob for _, blob in rows), dtype=np.float32)
        scores = vecs.reshape(len(rows), qvec.size) @ qvec.astype(np.float32, copy=False)
        best = np.argsort(-scores, kind="stable")[:depth]
        return [(int(rows[i][0]), float(scores[i])) for i in best]

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
