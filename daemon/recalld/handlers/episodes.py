"""Work episodes (seed 001): what agents actually did, and the reader contract over them.

An episode is a ``records`` row of kind ``episode`` (ts, workspace = vault, agent = caller,
session = session_id, text = summary, tags, trust, eligibility, expiry, tombstone) plus an
``episodes`` row with what only an episode has (channel, episode_type, tool, status,
error_code, duration_ms, result_size, task_result, verdict_at, blocked, prev_id, and the
files it touched, which a session's roll-up into an experience lists).

Capture redacts secrets from every free-text field and scores trust before the COMMIT, links
the episode to the previous one of its session (``prev_id``), and stores it ``pending``.

Evaluation policy (the evaluation actor applies :func:`settle` to each pending episode):

1. blocked: trust scoring found content that tries to take over its reader -> ``blocked``;
2. trust below the hard floor (0.1) -> ``ineligible``. Between 0.1 and the readers' default
   floor (``min_trust`` 0.3) an episode is eligible but hidden unless a reader lowers
   ``min_trust``: the reader's floor is a choice, the evaluator's is not;
3. a success status (ok, success, ...) or a known verdict (task_result) -> ``eligible``;
4. otherwise (a failed, timed-out or denied step with no verdict yet) it stays ``pending``
   until ``work_result`` judges the episode or its session: a failure is worth remembering
   once it is known how the task ended.

``blocked`` and ``ineligible`` are final; a later verdict does not reopen them.

Reader contract of ``work_search`` (one SQL clause, :func:`_visible`, used by the lexical
and the semantic channel alike, so fusion can never see more than lexical alone): episodes
of the caller's workspace and uid; of the calling agent only, unless ``any_caller`` and the
``admin:workspace`` scope; never tombstoned, never expired; trust at or above ``min_trust``;
``eligible`` only, or ``eligible`` and ``pending`` with ``include_pending``.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import numpy as np
from recall_client import protocol as p

from ..pipeline.writer import Principal, WriteJob, content_hash, new_id
from ..errors import RecallError
from ..retrieval.search import CHANNEL_DEPTH, query_terms, retrieve
from ..store.sqlite_schema import remember_key, replayed_record
from ..ingest.trust import assess
from ..store.vector_index import VectorIndex

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = [
    "HARD_TRUST_FLOOR",
    "SETTLEABLE_PARAMS",
    "SETTLEABLE_SQL",
    "SUCCESS_STATUSES",
    "capture",
    "search",
    "set_verdict",
    "settle",
    "shape",
]

SUCCESS_STATUSES = frozenset({"ok", "success", "succeeded", "completed", "done", "passed"})
# Below this trust no reader's min_trust reaches an episode: the evaluator rejects it.
HARD_TRUST_FLOOR = 0.1

# A semantic-only candidate (no lexical match) must be at least this similar to the query:
# the cosine channel ranks every visible episode, and a list padded with unrelated ones
# would bury the paraphrase it is there to find.
SEMANTIC_MIN_COSINE = 0.3

_CONCISE_DROP = frozenset(
    {"vault", "caller", "channel", "episode_type", "duration_ms", "result_size"}
)
_ALWAYS = frozenset({"id", "ts", "status", "eligibility", "trust"})
_tags_json = msgspec.json.Encoder()
_tags_decoder = msgspec.json.Decoder(list[str])


# --------------------------------------------------------------------------- evaluation policy


def settle(trust: float, blocked: bool, status: str, task_result: float | None) -> str | None:
    """The eligibility a pending episode settles to, or None while it waits for a verdict."""
    if blocked:
        return "blocked"
    if trust < HARD_TRUST_FLOOR:
        return "ineligible"
    if status in SUCCESS_STATUSES or task_result is not None:
        return "eligible"
    return None


# The SQL mirror of settle() returning non-None, over ``records r LEFT JOIN episodes e``: the
# evaluation actor reads only rows it can settle now, so episodes waiting for a verdict are
# not re-read by every pass. Records of other kinds are always settleable.
SETTLEABLE_SQL = (
    "(r.kind != 'episode' OR e.blocked OR r.trust < ? OR e.task_result IS NOT NULL"
    f" OR e.status IN ({','.join('?' * len(SUCCESS_STATUSES))}))"
)
SETTLEABLE_PARAMS: tuple[Any, ...] = (HARD_TRUST_FLOOR, *sorted(SUCCESS_STATUSES))


# --------------------------------------------------------------------------- capture


class CaptureEpisodeJob(WriteJob):
    """Insert one episode: redacted, trust-scored and chained before its COMMIT."""

    __slots__ = ("principal", "req")

    def __init__(self, principal: Principal, req: p.CaptureEpisode) -> None:
        super().__init__()
        self.principal = principal
        self.req = req

    def apply(self, conn: sqlite3.Connection, now: float) -> p.EpisodeCaptured:
        req, who = self.req, self.principal
        replayed = replayed_record(conn, who.agent, req.idempotency_key)
        if replayed is not None:
            return _existing(conn, replayed, replayed=True)
        workspace = req.workspace or who.workspace
        # Every free-text field was redacted by the ingest stage (sanitize) already.
        summary, tool, error_code = req.summary, req.tool, req.error_code
        tags = list(dict.fromkeys(req.tags))
        files = list(dict.fromkeys(req.files))
        status = req.status.strip().lower()
        ts = req.ts if req.ts is not None else now
        # The same event reported twice is stored once; the same words at another time are
        # another episode.
        event = (who.agent, req.session_id or "", repr(ts), tool or "", status, summary)
        digest = content_hash("episode", "\0".join(event))
        row = conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'episode' AND content_hash = ?"
            " AND tombstoned_at IS NULL",
            (workspace, digest),
        ).fetchone()
        if row is not None:
            result = _existing(conn, row[0], duplicate=True)
        else:
            trust, blocked, _reasons = assess(
                summary if error_code is None else f"{summary}\n{error_code}", source=req.source
            )
            prev_id = None
            if req.session_id is not None:
                prev = conn.execute(
                    "SELECT id FROM records WHERE session = ? AND kind = 'episode'"
                    " AND agent = ? AND uid = ? ORDER BY rowid DESC LIMIT 1",
                    (req.session_id, who.agent, who.uid),
                ).fetchone()
                prev_id = prev[0] if prev else None
            record_id = new_id("ep")
            cur = conn.execute(
                "INSERT INTO records (id, kind, ts, created_at, updated_at, workspace, agent, uid,"
                " session, source, text, tags, trust, eligibility, expires_at, content_hash)"
                " VALUES (?, 'episode', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                (
                    record_id, ts, now, now, workspace, who.agent, who.uid, req.session_id,
                    req.source, summary, _tags_json.encode(tags).decode(), trust,
                    now + req.ttl_s if req.ttl_s is not None else None, digest,
                ),
            )
            assert cur.lastrowid is not None
            conn.execute(
                "INSERT INTO episodes (rowid, channel, episode_type, tool, status, error_code,"
                " duration_ms, result_size, task_result, verdict_at, blocked, prev_id, files)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    cur.lastrowid, req.channel, req.episode_type, tool, status, error_code,
                    req.duration_ms, req.result_size, req.task_result,
                    now if req.task_result is not None else None, int(blocked), prev_id,
                    _tags_json.encode(files).decode(),
                ),
            )
            self.new_rowids.append(cur.lastrowid)
            result = p.EpisodeCaptured(
                id=0, record_id=record_id, prev_id=prev_id, trust=trust, blocked=blocked,
            )
        remember_key(conn, who.agent, req.idempotency_key, result.record_id, now)
        return result


def _existing(
    conn: sqlite3.Connection, record_id: str, *, duplicate: bool = False, replayed: bool = False
) -> p.EpisodeCaptured:
    row = conn.execute(
        "SELECT e.prev_id, r.eligibility, r.trust, e.blocked FROM records r"
        " JOIN episodes e ON e.rowid = r.rowid WHERE r.id = ?",
        (record_id,),
    ).fetchone()
    if row is None:
        raise RecallError(
            "invalid_request",
            f"idempotency_key was already used for {record_id}, which is not an episode",
        )
    prev_id, eligibility, trust, blocked = row
    return p.EpisodeCaptured(
        id=0, record_id=record_id, prev_id=prev_id, eligibility=eligibility, trust=trust,
        blocked=bool(blocked), duplicate=duplicate, replayed=replayed,
    )


async def capture(daemon: Daemon, who: Principal, req: p.CaptureEpisode) -> p.EpisodeCaptured:
    """Capture one episode; returns once it has committed."""
    job = CaptureEpisodeJob(who, req)
    await daemon.submit(job)
    result: p.EpisodeCaptured = await job.wait()
    return result


# --------------------------------------------------------------------------- verdicts


class _VerdictJob(WriteJob):
    """Set task_result and verdict_at on one episode or a whole session."""

    __slots__ = ("principal", "req")

    def __init__(self, principal: Principal, req: p.WorkResult) -> None:
        super().__init__()
        self.principal = principal
        self.req = req

    def apply(self, conn: sqlite3.Connection, now: float) -> p.VerdictSet:
        req, who = self.req, self.principal
        where = "r.kind = 'episode' AND r.uid = ? AND r.tombstoned_at IS NULL"
        params: list[Any] = [who.uid]
        if not req.any_caller:
            where += " AND r.agent = ?"
            params.append(who.agent)
        if req.episode_id is not None:
            where += " AND r.id = ?"
            params.append(req.episode_id)
        else:
            # Session ids are unique; a session that moved between workspaces is still one.
            where += " AND r.session = ?"
            params.append(req.session_id)
        rows = conn.execute(
            f"SELECT r.rowid, e.task_result FROM records r JOIN episodes e ON e.rowid = r.rowid"
            f" WHERE {where}",
            params,
        ).fetchall()
        if not rows:
            what = f"episode {req.episode_id}" if req.episode_id else f"session {req.session_id}"
            raise RecallError("not_found", f"no {what} of agent {who.agent!r} to judge")
        verdict_at = req.verdict_at if req.verdict_at is not None else now
        # Re-sending the same verdict changes nothing (not even verdict_at).
        changed = [rowid for rowid, current in rows if current != req.task_result]
        for rowid in changed:
            conn.execute(
                "UPDATE episodes SET task_result = ?, verdict_at = ? WHERE rowid = ?",
                (req.task_result, verdict_at, rowid),
            )
            conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
        # Wakes the evaluation actor: episodes waiting for this verdict can settle now.
        self.new_rowids.extend(changed)
        return p.VerdictSet(
            id=0, task_result=req.task_result, verdict_at=verdict_at, matched=len(rows),
            updated=len(changed),
        )


async def set_verdict(daemon: Daemon, who: Principal, req: p.WorkResult) -> p.VerdictSet:
    """Judge one episode or a session.

    Raises:
        RecallError: ``invalid_request`` unless exactly one of episode_id and session_id is
            given; ``forbidden`` for any_caller without admin:workspace; ``not_found``.
    """
    if (req.episode_id is None) == (req.session_id is None):
        raise RecallError("invalid_request", "give exactly one of episode_id or session_id")
    job = _VerdictJob(who, req)
    await daemon.submit(job)
    result: p.VerdictSet = await job.wait()
    return result


# --------------------------------------------------------------------------- work_search


def _visible(who: Principal, req: p.WorkSearch, now: float) -> tuple[str, list[Any]]:
    """The reader contract as one SQL condition over ``records r``, with its parameters."""
    clauses = [
        "r.kind = 'episode'",
        "r.workspace = ?",
        "r.uid = ?",
        "r.tombstoned_at IS NULL",
        "(r.expires_at IS NULL OR r.expires_at > ?)",
        "r.trust >= ?",
        "r.eligibility IN ('eligible', 'pending')" if req.include_pending
        else "r.eligibility = 'eligible'",
    ]
    params: list[Any] = [who.workspace, who.uid, now, req.min_trust]
    if not req.any_caller:
        clauses.append("r.agent = ?")
        params.append(who.agent)
    if req.session_id is not None:
        clauses.append("r.session = ?")
        params.append(req.session_id)
    if req.since is not None:
        clauses.append("r.ts >= ?")
        params.append(req.since)
    if req.until is not None:
        clauses.append("r.ts <= ?")
        params.append(req.until)
    if req.tool is not None:
        clauses.append("r.rowid IN (SELECT rowid FROM episodes WHERE tool = ?)")
        params.append(req.tool)
    return " " + " AND ".join(clauses), params


def _search_sync(
    conn: sqlite3.Connection,
    who: Principal,
    req: p.WorkSearch,
    qvec: np.ndarray | None,
    index: VectorIndex | None,
    response_format: Literal["concise", "detailed"],
) -> p.WorkSearchResult:
    visible, params = _visible(who, req, time.time())
    semantic_used = False
    if req.query is None:
        rowids = [
            row[0]
            for row in conn.execute(
                f"SELECT r.rowid FROM records r WHERE {visible}"
                " ORDER BY r.ts DESC, r.rowid DESC LIMIT ?",
                (*params, req.k),
            )
        ]
    else:
        semantic_used = qvec is not None and index is not None
        candidates = retrieve(
            conn, query_terms(req.query), qvec if semantic_used else None, index,
            visible, params, limit=2 * CHANNEL_DEPTH,
        )
        rowids = [
            c.rowid for c in candidates
            if c.lexical_rank is not None or (c.cosine or 0.0) >= SEMANTIC_MIN_COSINE
        ][: req.k]
    results = _episodes(conn, rowids, response_format)
    floor = p.WorkFloor(
        min_trust=req.min_trust, include_pending=req.include_pending, semantic_used=semantic_used,
    )
    return p.WorkSearchResult(
        id=0, available=True, message=_message(who, req, len(results)), floor=floor,
        results=results, response_format=response_format,
    )


def _episodes(
    conn: sqlite3.Connection, rowids: list[int], response_format: str
) -> list[p.WorkEpisode]:
    if not rowids:
        return []
    rows = {
        row[0]: row[1:]
        for row in conn.execute(
            "SELECT r.rowid, r.id, r.ts, r.workspace, r.session, r.agent, e.channel,"
            " e.episode_type, e.task_result, e.verdict_at, e.tool, e.status, e.error_code,"
            " e.duration_ms, e.result_size, r.text, r.tags, r.trust, r.eligibility, e.blocked,"
            " e.prev_id FROM records r JOIN episodes e ON e.rowid = r.rowid"
            f" WHERE r.rowid IN ({','.join('?' * len(rowids))})",
            rowids,
        )
    }
    out = []
    for rowid in rowids:
        row = rows.get(rowid)
        if row is None:
            continue
        values: dict[str, Any] = dict(zip(_FIELDS, row, strict=True))
        values["tags"] = _tags_decoder.decode(values["tags"])
        values["blocked"] = bool(values["blocked"])
        out.append(shape(values, response_format))
    return out


def shape(values: dict[str, Any], response_format: str) -> p.WorkEpisode:
    """One result in the requested format: detailed sends every field (null included);
    concise leaves out vault, caller, channel, episode_type, duration_ms, result_size and
    whatever is null or empty, keeping trust, eligibility and a true blocked flag."""
    if response_format == "concise":
        values = {k: v for k, v in values.items() if k in _ALWAYS or _high_signal(k, v)}
    return p.WorkEpisode(**values)


_FIELDS = (
    "id", "ts", "vault", "session_id", "caller", "channel", "episode_type", "task_result",
    "verdict_at", "tool", "status", "error_code", "duration_ms", "result_size", "summary",
    "tags", "trust", "eligibility", "blocked", "prev_id",
)


def _high_signal(key: str, value: Any) -> bool:
    # Identity checks: a task_result of 0.0 is a verdict, not an empty field.
    empty = value is None or value is False or value == "" or value == []
    return key not in _CONCISE_DROP and not empty


def _message(who: Principal, req: p.WorkSearch, n: int) -> str:
    if n:
        return f"{n} episode{'s' if n != 1 else ''}, best match first." if req.query else (
            f"{n} episode{'s' if n != 1 else ''}, newest first."
        )
    whose = "any agent" if req.any_caller else f"agent {who.agent!r}"
    which = "eligible or pending" if req.include_pending else "eligible"
    hint = "" if req.include_pending else " include_pending: true adds episodes not yet evaluated."
    return (
        f"No episodes matched. Searched {which} episodes of {whose} in {who.workspace}"
        f" with trust >= {req.min_trust:g}.{hint}"
    )


def _response_format(daemon: Daemon, req: p.WorkSearch) -> Literal["concise", "detailed"]:
    if req.response_format is not None:
        return req.response_format
    if req.verbosity is not None:
        return "concise" if req.verbosity == "terse" else "detailed"
    return daemon.settings.response_format


async def search(daemon: Daemon, who: Principal, req: p.WorkSearch) -> p.WorkSearchResult:
    """Run one work_search under the reader contract.

    Raises:
        RecallError: ``forbidden`` for any_caller without admin:workspace;
            ``invalid_request`` when since is after until; ``busy`` / ``unavailable``.
    """
    started = time.perf_counter()
    if req.since is not None and req.until is not None and req.since > req.until:
        raise RecallError("invalid_request", f"since ({req.since}) is after until ({req.until})")
    response_format = _response_format(daemon, req)
    qvec = None
    if req.semantic and req.query is not None:
        # None when there is no model or it failed: the search degrades to lexical.
        qvec = await daemon.model.embed_query(req.query)
    index = daemon.search.index
    result = await daemon.search.run_read(
        lambda conn: _search_sync(conn, who, req, qvec, index, response_format)
    )
    result.took_ms = round((time.perf_counter() - started) * 1000, 3)
    return result
