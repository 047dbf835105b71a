"""Work episodes (seed 001).

An episode is a ``records`` row of kind ``episode`` (ts, workspace = vault, agent = caller,
session = session_id, text = summary, tags, trust, eligibility, expiry, tombstone) plus an
``episodes`` row with what only an episode has (channel, episode_type, tool, status,
error_code, duration_ms, result_size, task_result, verdict_at, blocked, prev_id, and the
files it touched).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from recall_client import protocol as p

from ...domain.dedup import episode_digest
from ...domain.ids import new_id
from ...domain.policy import Assessment
from ...domain.principal import Principal
from ...errors import RecallError
from ..port import EpisodeRow, SessionEpisode
from .db import Db
from .filters import marks
from .records import NewRecord, insert_record, remember_key, replayed

__all__ = ["SqlEpisodeReads", "SqlEpisodeWrites"]

_json = msgspec.json.Encoder()
_strings = msgspec.json.Decoder(list[str])


class SqlEpisodeReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def rows(self, rowids: Sequence[int]) -> dict[int, EpisodeRow]:
        if not rowids:
            return {}
        out = {}
        for row in self._conn.execute(
            "SELECT r.rowid, r.id, r.ts, r.workspace, r.session, r.agent, e.channel,"
            " e.episode_type, e.task_result, e.verdict_at, e.tool, e.status, e.error_code,"
            " e.duration_ms, e.result_size, r.text, r.tags, r.trust, r.eligibility, e.blocked,"
            " e.prev_id FROM records r JOIN episodes e ON e.rowid = r.rowid"
            f" WHERE r.rowid IN ({marks(rowids)})",
            list(rowids),
        ):
            values: list[Any] = [
                *row[:16],
                _strings.decode(row[16]),
                row[17],
                row[18],
                bool(row[19]),
                row[20],
            ]
            out[row[0]] = EpisodeRow(*values)
        return out

    def of_session(
        self, workspace: str, session: str, uid: int, agent: str | None, now: float
    ) -> list[SessionEpisode]:
        """A session's live episodes in the workspace (of one agent, or of any), in order."""
        where = (
            "r.kind = 'episode' AND r.workspace = ? AND r.session = ? AND r.uid = ?"
            " AND r.tombstoned_at IS NULL AND (r.expires_at IS NULL OR r.expires_at > ?)"
        )
        params: list[Any] = [workspace, session, uid, now]
        if agent is not None:
            where += " AND r.agent = ?"
            params.append(agent)
        return [
            SessionEpisode(*[*row[:9], _strings.decode(row[9])])
            for row in self._conn.execute(
                "SELECT r.ts, r.agent, r.text, r.eligibility, e.episode_type, e.tool, e.status,"
                " e.task_result, e.verdict_at, e.files FROM records r"
                f" JOIN episodes e ON e.rowid = r.rowid WHERE {where} ORDER BY r.ts, r.rowid",
                params,
            )
        ]

    def last_session(
        self, workspace: str, uid: int, agent: str, session: str
    ) -> tuple[str, float] | None:
        """The session before ``session`` of an agent in a workspace (the newest other one
        with episodes) and the time of its last episode."""
        row = self._conn.execute(
            "SELECT session, ts FROM records WHERE kind = 'episode' AND workspace = ?"
            " AND uid = ? AND agent = ? AND session IS NOT NULL AND session != ?"
            " AND tombstoned_at IS NULL ORDER BY ts DESC LIMIT 1",
            (workspace, uid, agent, session),
        ).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    def unresolved(
        self,
        workspace: str,
        uid: int,
        agent: str,
        session: str,
        min_trust: float,
        now: float,
        limit: int,
    ) -> list[EpisodeRow]:
        """An agent's session's failed steps that no verdict has judged (no task_result,
        nothing settled them eligible), at or above ``min_trust``, never blocked; newest
        first."""
        rowids = [
            row[0]
            for row in self._conn.execute(
                "SELECT r.rowid FROM records r JOIN episodes e ON e.rowid = r.rowid"
                " WHERE r.kind = 'episode' AND r.workspace = ? AND r.uid = ? AND r.agent = ?"
                " AND r.session = ? AND r.tombstoned_at IS NULL"
                " AND (r.expires_at IS NULL OR r.expires_at > ?)"
                " AND r.eligibility = 'pending' AND r.trust >= ? AND e.task_result IS NULL"
                " AND e.verdict_at IS NULL ORDER BY r.ts DESC LIMIT ?",
                (workspace, uid, agent, session, now, min_trust, limit),
            )
        ]
        found = self.rows(rowids)
        return [found[r] for r in rowids if r in found]

    def refs(
        self, workspace: str, session: str, agent: str | None, now: float, limit: int
    ) -> list[tuple[str, float, str]]:
        """(id, ts, text) of a session's episodes that a reader may quote: eligible or
        pending, never blocked or ineligible; of one agent, or of any."""
        partition = "" if agent is None else " AND agent = ?"
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT id, ts, text FROM records WHERE workspace = ? AND session = ?"
                " AND kind = 'episode' AND tombstoned_at IS NULL"
                " AND eligibility IN ('eligible', 'pending')"
                f" AND (expires_at IS NULL OR expires_at > ?){partition} ORDER BY ts LIMIT ?",
                (workspace, session, now, *([] if agent is None else [agent]), limit),
            )
        ]


def _existing(
    conn: Db, record_id: str, *, duplicate: bool = False, replayed: bool = False
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
        record_id=record_id,
        prev_id=prev_id,
        eligibility=eligibility,
        trust=trust,
        blocked=bool(blocked),
        duplicate=duplicate,
        replayed=replayed,
    )


class SqlEpisodeWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def capture(
        self, who: Principal, req: p.CaptureEpisode, trust: Assessment, now: float
    ) -> tuple[p.EpisodeCaptured, int | None]:
        """Insert one episode, chained to its session's previous one and stored ``pending``
        (the evaluation actor settles it); a duplicate or a replayed key answers with the
        stored one. Returns the reply and the new row, if one was written."""
        conn = self._conn
        earlier = replayed(conn, who, req.idempotency_key)
        if earlier is not None:
            return _existing(conn, earlier, replayed=True), None
        workspace = who.workspace
        status = req.status.strip().lower()
        ts = req.ts if req.ts is not None else now
        # The same event reported twice is stored once; the same words at another time are
        # another episode.
        digest = episode_digest(who.agent, req.session_id, ts, req.tool, status, req.summary)
        row = conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'episode' AND content_hash = ?"
            " AND tombstoned_at IS NULL",
            (workspace, digest),
        ).fetchone()
        rowid = None
        if row is not None:
            result = _existing(conn, row[0], duplicate=True)
        else:
            prev_id = None
            if req.session_id is not None:
                # The chain stays one chain when two daemons capture into one session. A
                # session is the agent's within its workspace: the same name elsewhere is
                # another chain (its ids are not this one's to see).
                conn.lock("session", workspace, req.session_id, who.agent, str(who.uid))
                prev = conn.execute(
                    "SELECT id FROM records WHERE workspace = ? AND session = ?"
                    " AND kind = 'episode' AND agent = ? AND uid = ?"
                    " ORDER BY rowid DESC LIMIT 1",
                    (workspace, req.session_id, who.agent, who.uid),
                ).fetchone()
                prev_id = prev[0] if prev else None
            record_id = new_id("ep")
            rowid = insert_record(
                conn,
                NewRecord(
                    id=record_id,
                    kind="episode",
                    ts=ts,
                    created_at=now,
                    workspace=workspace,
                    agent=who.agent,
                    uid=who.uid,
                    session=req.session_id,
                    source=req.source,
                    text=req.summary,
                    content_hash=digest,
                    tags=req.tags,
                    trust=trust.trust,
                    expires_at=now + req.ttl_s if req.ttl_s is not None else None,
                ),
            )
            conn.execute(
                "INSERT INTO episodes (rowid, channel, episode_type, tool, status, error_code,"
                " duration_ms, result_size, task_result, verdict_at, blocked, prev_id, files)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rowid,
                    req.channel,
                    req.episode_type,
                    req.tool,
                    status,
                    req.error_code,
                    req.duration_ms,
                    req.result_size,
                    req.task_result,
                    now if req.task_result is not None else None,
                    int(trust.blocked),
                    prev_id,
                    _json.encode(list(dict.fromkeys(req.files))).decode(),
                ),
            )
            result = p.EpisodeCaptured(
                record_id=record_id,
                prev_id=prev_id,
                trust=trust.trust,
                blocked=trust.blocked,
            )
        remember_key(conn, who, req.idempotency_key, result.record_id, now)
        return result, rowid

    def set_verdict(
        self, who: Principal, req: p.WorkResult, now: float
    ) -> tuple[p.VerdictSet, list[int]]:
        """Set task_result and verdict_at on one episode or a whole session of the caller's
        workspace (as work_search shows them); returns the reply and the rows it changed
        (episodes waiting for this verdict can settle now). Another workspace's episode or
        session is not found, exactly as one that does not exist."""
        where = "r.kind = 'episode' AND r.workspace = ? AND r.uid = ? AND r.tombstoned_at IS NULL"
        params: list[Any] = [who.workspace, who.uid]
        if not req.any_caller:
            where += " AND r.agent = ?"
            params.append(who.agent)
        if req.episode_id is not None:
            where += " AND r.id = ?"
            params.append(req.episode_id)
        else:
            where += " AND r.session = ?"
            params.append(req.session_id)
        rows = self._conn.execute(
            f"SELECT r.rowid, e.task_result FROM records r JOIN episodes e ON e.rowid = r.rowid"
            f" WHERE {where}",
            params,
        ).fetchall()
        if not rows:
            what = f"episode {req.episode_id}" if req.episode_id else f"session {req.session_id}"
            whose = "" if req.any_caller else f" of agent {who.agent!r}"
            raise RecallError(
                "not_found", f"no {what}{whose} in workspace {who.workspace} to judge"
            )
        verdict_at = req.verdict_at if req.verdict_at is not None else now
        # Re-sending the same verdict changes nothing (not even verdict_at).
        changed = [rowid for rowid, current in rows if current != req.task_result]
        for rowid in changed:
            self._conn.execute(
                "UPDATE episodes SET task_result = ?, verdict_at = ? WHERE rowid = ?",
                (req.task_result, verdict_at, rowid),
            )
            self._conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
        return p.VerdictSet(
            task_result=req.task_result,
            verdict_at=verdict_at,
            matched=len(rows),
            updated=len(changed),
        ), changed
