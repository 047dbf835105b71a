"""work_search (seed 001): the caller's work episodes under the reader contract.

The contract, one :class:`~recalld.store.port.Filter` that the lexical and the semantic channel
share (so fusion can never see more than lexical alone): episodes of the caller's workspace
and uid; of the calling agent only, unless ``any_caller`` (which needs ``admin:workspace``);
never tombstoned, never expired; trust at or above ``min_trust``; ``eligible`` only, or
``eligible`` and ``pending`` with ``include_pending``.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from recall_client import protocol as p

from ..domain.principal import Principal
from ..store.port import EpisodeRow, Filter, Reader
from .fusion import CHANNEL_DEPTH, QueryVector, retrieve, vector_of
from .terms import query_terms

__all__ = ["SEMANTIC_MIN_COSINE", "search", "shape"]

# A semantic-only candidate (no lexical match) must be at least this similar to the query:
# the cosine channel ranks every visible episode, and a list padded with unrelated ones
# would bury the paraphrase it is there to find.
SEMANTIC_MIN_COSINE = 0.3

_CONCISE_DROP = frozenset(
    {"vault", "caller", "channel", "episode_type", "duration_ms", "result_size"}
)
_ALWAYS = frozenset({"id", "ts", "status", "eligibility", "trust"})


def _contract(who: Principal, req: p.WorkSearch, now: float) -> Filter:
    return Filter(
        kind="episode",
        now=now,
        workspace=who.workspace,
        uid=who.uid,
        agent=None if req.any_caller else who.agent,
        min_trust=req.min_trust,
        eligibility=("eligible", "pending") if req.include_pending else ("eligible",),
        session=req.session_id,
        since=req.since,
        until=req.until,
        tool=req.tool,
    )


def search(
    reader: Reader,
    who: Principal,
    req: p.WorkSearch,
    qvec: QueryVector,
    response_format: Literal["concise", "detailed"],
) -> p.WorkSearchResult:
    """One work_search on a search worker; without a query, the newest episodes."""
    where = _contract(who, req, time.time())
    semantic_used = False
    if req.query is None:
        rowids = reader.search.newest(where, req.k)
    else:
        semantic = qvec is not None and reader.search.has_vectors()
        candidates = retrieve(
            reader,
            query_terms(req.query),
            qvec if semantic else None,
            where,
            limit=2 * CHANNEL_DEPTH,
        )
        # Used only if a vector came: without one the search was lexical after all.
        semantic_used = semantic and vector_of(qvec) is not None
        rowids = [
            c.rowid
            for c in candidates
            if c.lexical_rank is not None or (c.cosine or 0.0) >= SEMANTIC_MIN_COSINE
        ][: req.k]
    rows = reader.episodes.rows(rowids)
    results = [shape(_fields(rows[rowid]), response_format) for rowid in rowids if rowid in rows]
    floor = p.WorkFloor(
        min_trust=req.min_trust,
        include_pending=req.include_pending,
        semantic_used=semantic_used,
    )
    return p.WorkSearchResult(
        available=True,
        message=_message(who, req, len(results)),
        floor=floor,
        results=results,
        response_format=response_format,
    )


def _fields(row: EpisodeRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "ts": row.ts,
        "vault": row.workspace,
        "session_id": row.session,
        "caller": row.agent,
        "channel": row.channel,
        "episode_type": row.episode_type,
        "task_result": row.task_result,
        "verdict_at": row.verdict_at,
        "tool": row.tool,
        "status": row.status,
        "error_code": row.error_code,
        "duration_ms": row.duration_ms,
        "result_size": row.result_size,
        "summary": row.text,
        "tags": row.tags,
        "trust": row.trust,
        "eligibility": row.eligibility,
        "blocked": row.blocked,
        "prev_id": row.prev_id,
    }


def shape(values: dict[str, Any], response_format: str) -> p.WorkEpisode:
    """One result in the requested format: detailed sends every field (null included);
    concise leaves out vault, caller, channel, episode_type, duration_ms, result_size and
    whatever is null or empty, keeping trust, eligibility and a true blocked flag."""
    if response_format == "concise":
        values = {k: v for k, v in values.items() if k in _ALWAYS or _high_signal(k, v)}
    return p.WorkEpisode(**values)


def _high_signal(key: str, value: Any) -> bool:
    # Identity checks: a task_result of 0.0 is a verdict, not an empty field.
    empty = value is None or value is False or value == "" or value == []
    return key not in _CONCISE_DROP and not empty


def _message(who: Principal, req: p.WorkSearch, n: int) -> str:
    if n:
        return (
            f"{n} episode{'s' if n != 1 else ''}, best match first."
            if req.query
            else (f"{n} episode{'s' if n != 1 else ''}, newest first.")
        )
    whose = "any agent" if req.any_caller else f"agent {who.agent!r}"
    which = "eligible or pending" if req.include_pending else "eligible"
    hint = "" if req.include_pending else " include_pending: true adds episodes not yet evaluated."
    return (
        f"No episodes matched. Searched {which} episodes of {whose} in {who.workspace}"
        f" with trust >= {req.min_trust:g}.{hint}"
    )
