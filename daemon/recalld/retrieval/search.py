"""The search actor: lexical (FTS5 bm25) and semantic (FAISS) channels, fused.

Searches queue on one bounded stream served by a few workers; each worker owns a read-only
SQLite connection and does all of a search's database work in one thread hop. A full queue
answers ``busy`` (retryable) instead of letting latency grow without bound.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import numpy as np
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from recall_client import protocol as p

from . import session_context
from ..pipeline.writer import Principal
from ..pipeline.embedding import Model
from ..errors import RecallError
from ..store.sqlite_schema import open_reader
from ..store.vector_index import VectorIndex

if TYPE_CHECKING:
    from .memory_reader import MemoryReader

__all__ = [
    "Candidate",
    "ReadJob",
    "SearchActor",
    "fts_query",
    "lexical_plan",
    "make_snippet",
    "query_terms",
    "retrieve",
]

log = logging.getLogger(__name__)

# Rank-based scores (memory_search's keyword mode ranks by term coverage with these).
RRF_K = 60
# Candidates each channel contributes to fusion: deep enough that fusion and context can
# reorder, bounded so a common word cannot make one search read the whole table.
CHANNEL_DEPTH = 100
# Share of the lexical channel in fusion (the semantic one has the rest). Lexical leads: a
# small general-purpose embedding model is the weaker ranker on the specific nouns, names
# and events people search their memory for, so meaning extends and reorders what the words
# found rather than outvoting them.
LEXICAL_WEIGHT = 0.7
# Records the lexical channel scores per search, about (see lexical_plan): bm25 costs about
# a microsecond a record plus the visibility check, so this bounds a lexical search to a few
# milliseconds however large the store grows.
LEXICAL_BUDGET = 4_000
DF_TTL_S = 60.0
DF_CACHE_SIZE = 20_000

_STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)
_TOKEN = re.compile(r"\w+", re.UNICODE)


def query_terms(query: str) -> list[str]:
    """The words of a query that carry meaning: stop words dropped, order kept, deduped."""
    words = [w.lower() for w in _TOKEN.findall(query)]
    content = [w for w in words if w not in _STOP]
    return list(dict.fromkeys(content or words))


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


def lexical_plan(conn: sqlite3.Connection, terms: Sequence[str],
                 budget: int = LEXICAL_BUDGET) -> LexicalPlan | None:
    """Bound the records one lexical search scores to about ``budget``.

    FTS5 computes bm25 for every record an OR query matches, so a query with a common word
    reads a large part of a big store (30 ms at 100k records, hundreds at 1M). Exact while
    the terms' document frequencies add up to the budget. Past it, the rarest terms that fit
    are kept and the common ones dropped: a word in thousands of records says little about
    which one is meant, and bm25 gives it little weight anyway (the semantic channel still
    sees the whole query). When no rare term matches anything, all terms are matched, over
    the most recent records that hold any of them, about ``budget`` of them.
    """
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
        " LIMIT 1 OFFSET ?", (match, budget - 1),
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
    n = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM records_fts WHERE records_fts MATCH ? LIMIT ?)",
        (fts_query([term]), cap + 1),
    ).fetchone()[0]
    if len(_df_cache) >= DF_CACHE_SIZE:
        _df_cache.clear()
    _df_cache[key] = (now, n)
    return n


# (database, term, cap) -> (when counted, records holding it up to cap + 1). Shared by the
# workers' threads; an entry is replaced whole, and a lost race only counts twice.
_df_cache: dict[tuple[str, str, int], tuple[float, int]] = {}


def make_snippet(text: str, terms: Sequence[str], width: int = 200) -> str:
    """A window of ``text`` around the first query term it contains."""
    if len(text) <= width:
        return text
    lowered = text.lower()
    positions = [i for t in terms if (i := lowered.find(t)) >= 0]
    centre = min(positions) if positions else 0
    start = max(0, min(centre - width // 3, len(text) - width))
    end = start + width
    return ("…" if start else "") + text[start:end].strip() + ("…" if end < len(text) else "")


@dataclass(slots=True)
class SearchJob:
    principal: Principal
    req: p.MemorySearch
    qvec: np.ndarray | None
    done: anyio.Event = field(default_factory=anyio.Event)
    result: p.MemorySearchResult | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class ReadJob:
    """Any other read (work_search, ...): ``fn(conn)`` run on a worker's connection."""

    fn: Callable[[sqlite3.Connection], Any]
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None


T = TypeVar("T")


@dataclass(slots=True)
class _Stats:
    processed: int = 0
    errors: int = 0
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=2000))


class SearchActor:
    name = "search"

    def __init__(
        self, data_dir: Path, model: Model, *, workers: int, queue_size: int, memory: MemoryReader,
    ) -> None:
        self._data_dir = data_dir
        self._model = model
        # memory_search's shaping (reader contract, scoring, cortex, drift); see memory_search.
        self.memory = memory
        self.index: VectorIndex | None = None
        self._workers = workers
        send, receive = anyio.create_memory_object_stream[SearchJob | ReadJob](queue_size)
        self._send: MemoryObjectSendStream[SearchJob | ReadJob] = send
        self._receive: MemoryObjectReceiveStream[SearchJob | ReadJob] = receive
        self.stats = _Stats()
        self.state = "starting"

    def queue_depth(self) -> tuple[int, int]:
        s = self._receive.statistics()
        return s.current_buffer_used, int(s.max_buffer_size)

    def latency_percentiles(self) -> dict[str, float | None]:
        data = sorted(self.stats.latencies_ms)
        if not data:
            return {"p50": None, "p90": None, "p99": None}
        pick = lambda q: round(data[min(len(data) - 1, int(q * len(data)))], 3)  # noqa: E731
        return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        conns = [open_reader(self._data_dir) for _ in range(self._workers)]
        try:
            async with self._receive, anyio.create_task_group() as tg:
                for i, conn in enumerate(conns):
                    tg.start_soon(self._worker, conn, self._receive.clone(), name=f"search worker {i}")
                self.state = "running"
                task_status.started()
        finally:
            for conn in conns:
                conn.close()
            self.state = "stopped"

    async def close(self) -> None:
        await self._send.aclose()

    async def search(self, principal: Principal, req: p.MemorySearch) -> p.MemorySearchResult:
        """Run one memory search.

        Raises:
            RecallError: ``busy`` when the queue is full, ``unavailable`` when shutting down.
        """
        started = time.perf_counter()
        qvec = None
        if self.memory.wants_vector(req):
            qvec = await self._model.embed_query(req.query)
        job = SearchJob(principal, req, qvec)
        self._enqueue(job)
        await job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        took = (time.perf_counter() - started) * 1000
        job.result.took_ms = round(took, 3)
        self.stats.latencies_ms.append(took)
        return job.result

    async def run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a search worker's thread on its read-only connection.

        Reads share the searches' bounded queue and latency figures.

        Raises:
            RecallError: ``busy``/``unavailable`` as :meth:`search`; whatever ``fn`` raises
                as a RecallError; ``internal`` for anything else.
        """
        started = time.perf_counter()
        job = ReadJob(fn)
        self._enqueue(job)
        await job.done.wait()
        if job.error is not None:
            raise job.error
        self.stats.latencies_ms.append((time.perf_counter() - started) * 1000)
        return job.result  # type: ignore[no-any-return]

    def _enqueue(self, job: SearchJob | ReadJob) -> None:
        try:
            self._send.send_nowait(job)
        except anyio.WouldBlock:
            raise RecallError("busy", "too many searches queued; retry shortly", retryable=True) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RecallError("unavailable", "recalld is shutting down", retryable=True) from None

    async def _worker(
        self, conn: sqlite3.Connection, jobs: MemoryObjectReceiveStream[SearchJob | ReadJob]
    ) -> None:
        limiter = anyio.CapacityLimiter(1)
        async with jobs:
            async for job in jobs:
                try:
                    if isinstance(job, ReadJob):
                        job.result = await anyio.to_thread.run_sync(job.fn, conn, limiter=limiter)
                    else:
                        job.result = await anyio.to_thread.run_sync(
                            self._search_sync, conn, job, limiter=limiter
                        )
                    self.stats.processed += 1
                except RecallError as exc:
                    job.error = exc
                except Exception as exc:
                    self.stats.errors += 1
                    log.exception("search failed")
                    job.error = RecallError("internal", f"search failed: {type(exc).__name__}")
                finally:
                    job.done.set()

    # ------------------------------------------------------------------ worker thread

    def _search_sync(self, conn: sqlite3.Connection, job: SearchJob) -> p.MemorySearchResult:
        return self.memory.search(conn, self.index, job.principal, job.req, job.qvec)


@dataclass(slots=True)
class Candidate:
    """One record found by retrieval, with what each channel said of it."""

    rowid: int
    score: float  # fused, in 0..1; higher is better
    lexical_rank: int | None = None  # 0-based rank in the bm25 channel
    semantic_rank: int | None = None  # 0-based rank in the cosine channel
    cosine: float | None = None


def retrieve(
    conn: sqlite3.Connection,
    terms: Sequence[str],
    qvec: np.ndarray | None,
    index: VectorIndex | None,
    visible: str,
    params: Sequence[Any],
    *,
    limit: int,
    lexical_weight: float = LEXICAL_WEIGHT,
    context_window: int = session_context.CONTEXT_WINDOW,
    context_weight: float = session_context.CONTEXT_WEIGHT,
) -> list[Candidate]:
    """Candidates for a query, best first: the lexical and (when ``qvec`` is given) the
    semantic channel, each restricted by the same SQL visibility clause, fused, then scored
    in the context of each record's session.

    ``visible`` is a SQL condition over ``records r`` with ``params`` for its placeholders;
    every caller (memory, episode, experience search) passes its own reader contract here,
    so no channel can see more than another, and context never surfaces a record it hides.

    Fusion is a weighted sum of min-max normalised channel scores (see :func:`fuse`);
    ``context_window=0`` turns the session context off (see :mod:`.session_context`).
    """
    plan = lexical_plan(conn, terms)
    match = plan.match if plan is not None else None
    lexical: list[tuple[int, float]] = []
    if plan is not None:
        lexical = [
            (rowid, -bm25)  # FTS5's bm25() is lower-is-better
            for rowid, bm25 in conn.execute(
                "SELECT r.rowid, bm25(records_fts) FROM records_fts f"
                " JOIN records r ON r.rowid = f.rowid"
                f" WHERE records_fts MATCH ? AND f.rowid >= ? AND {visible}"
                " ORDER BY bm25(records_fts) LIMIT ?",
                (plan.match, plan.min_rowid or 0, *params, CHANNEL_DEPTH),
            )
        ]
    semantic: list[tuple[int, float]] = []
    if qvec is not None and index is not None:
        semantic = _semantic(conn, index, qvec, visible, params)
    # Weights are shared among the channels that ran: a channel that ran and found nothing
    # keeps its share, so meaning alone (no word of the query anywhere) cannot score full.
    ran = [(lexical, lexical_weight)] if match is not None else []
    if qvec is not None and index is not None:
        ran.append((semantic, 1.0 - lexical_weight))
    scores = fuse(ran)
    found = scores
    scores = session_context.rescore(conn, scores, limit=limit, window=context_window,
                                     weight=context_weight)
    # Neighbours came from the session, not from a channel: keep only those the caller's
    # visibility clause allows, like every other candidate.
    if added := [rowid for rowid in scores if rowid not in found]:
        allowed = visible_rowids(conn, added, visible, params)
        scores = {rowid: s for rowid, s in scores.items() if rowid in found or rowid in allowed}
    lexical_rank = {rowid: i for i, (rowid, _) in enumerate(lexical)}
    semantic_rank = {rowid: (i, cos) for i, (rowid, cos) in enumerate(semantic)}
    out = []
    for rowid, score in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]:
        sem = semantic_rank.get(rowid)
        out.append(Candidate(
            rowid=rowid, score=score, lexical_rank=lexical_rank.get(rowid),
            semantic_rank=sem[0] if sem else None, cosine=sem[1] if sem else None,
        ))
    return out


def fuse(
    channels: Sequence[tuple[Sequence[tuple[int, float]], float]], depth: int = CHANNEL_DEPTH
) -> dict[int, float]:
    """Weighted sum of each channel's scores, each scaled to 0..1 between its floor and top.

    Normalising per query puts bm25 (unbounded) and cosine (model-dependent range) on one
    0..1 scale while keeping how far apart the candidates are, which RRF throws away: a
    record far ahead in one channel stays ahead. The weights of the channels given are
    renormalised to sum to 1, so a lexical-only search scores like bm25 alone.
    """
    total = sum(w for _, w in channels)
    live = [(chan, w) for chan, w in channels if chan and w > 0]
    out: dict[int, float] = {}
    for chan, w in live:
        hi = max(s for _, s in chan)
        # A channel cut at its depth has the rest of the store below its weakest candidate:
        # that is its floor. A shorter one returned all it found; its floor is "unrelated", 0.
        lo = min(s for _, s in chan) if len(chan) >= depth else min(0.0, *(s for _, s in chan))
        span = hi - lo
        for rowid, s in chan:
            norm = (s - lo) / span if span > 0 else 1.0
            out[rowid] = out.get(rowid, 0.0) + w / total * norm
    return out


def _semantic(
    conn: sqlite3.Connection,
    index: VectorIndex,
    qvec: np.ndarray,
    visible: str,
    params: Sequence[Any],
) -> list[tuple[int, float]]:
    # FAISS knows nothing of workspaces or tombstones: over-fetch, keep what the same
    # visibility filter as the lexical channel allows, and widen until enough survive.
    want = CHANNEL_DEPTH
    k = want * 4
    while True:
        ids, scores = index.search_sync(qvec, k)
        if not len(ids):
            return []
        id_list = [int(i) for i in ids]
        allowed = visible_rowids(conn, id_list, visible, params)
        kept = [(i, float(s)) for i, s in zip(id_list, scores) if i in allowed]
        if len(kept) >= want or k >= index.ntotal:
            return kept[:want]
        k = min(index.ntotal, k * 4)


def visible_rowids(
    conn: sqlite3.Connection, rowids: Sequence[int], visible: str, params: Sequence[Any]
) -> set[int]:
    """Those of ``rowids`` the visibility clause ``visible`` (over ``records r``) allows."""
    return {
        row[0]
        for row in conn.execute(
            f"SELECT r.rowid FROM records r WHERE r.rowid IN ({','.join('?' * len(rowids))})"
            f" AND {visible}",
            (*rowids, *params),
        )
    }
