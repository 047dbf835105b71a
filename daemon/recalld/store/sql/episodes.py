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

from ..port import EpisodeInsert, EpisodeRow, SessionEpisode
from .db import Db
from .filters import marks
from .records import insert_record

__all__ = ["SqlEpisodeReads", "SqlEpisodeWrites"]

_json = msgspec.json.Encoder()
_strings = msgspec.json.Decoder(list[str])


class SqlEpisodeReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def rows(self, rowids: Sequence[int]) -> dict[int, EpisodeRow]:
        if not rowids:
            return {}
        found = self._select(f"r.rowid IN ({marks(rowids)})", list(rowids))
        return {row.rowid: row for row in found}

    def find(self, record_id: str) -> EpisodeRow | None:
        found = self._select("r.id = ?", [record_id])
        return found[0] if found else None

    def _select(self, where: str, params: list[Any]) -> list[EpisodeRow]:
        out = []
        for row in self._conn.execute(
            "SELECT r.rowid, r.id, r.ts, r.workspace, r.session, r.agent, e.channel,"
            " e.episode_type, e.task_result, e.verdict_at, e.tool, e.status, e.error_code,"
            " e.duration_ms, e.result_size, r.text, r.tags, r.trust, r.eligibility, e.blocked,"
            f" e.prev_id FROM records r JOIN episodes e ON e.rowid = r.rowid WHERE {where}",
            params,
        ):
            values: list[Any] = [
                *row[:16],
                _strings.decode(row[16]),
                row[17],
                row[18],
                bool(row[19]),
                row[20],
            ]
            out.append(EpisodeRow(*values))
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


class SqlEpisodeWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def find_duplicate(self, workspace: str, content_hash: bytes) -> str | None:
        row = self._conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'episode' AND content_hash = ?"
            " AND tombstoned_at IS NULL",
            (workspace, content_hash),
        ).fetchone()
        return None if row is None else str(row[0])

    def lock_session(self, workspace: str, session: str, agent: str, uid: int) -> str | None:
        # The chain stays one chain when two daemons capture into one session. A session is
        # the agent's within its workspace: the same name elsewhere is another chain (its
        # ids are not this one's to see).
        self._conn.lock("session", workspace, session, agent, str(uid))
        row = self._conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND session = ?"
            " AND kind = 'episode' AND agent = ? AND uid = ?"
            " ORDER BY rowid DESC LIMIT 1",
            (workspace, session, agent, uid),
        ).fetchone()
        return None if row is None else str(row[0])

    def insert(self, episode: EpisodeInsert) -> int:
        e = episode
        rowid = insert_record(self._conn, e.record)
        self._conn.execute(
            "INSERT INTO episodes (rowid, channel, episode_type, tool, status, error_code,"
            " duration_ms, result_size, task_result, verdict_at, blocked, prev_id, files)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rowid,
                e.channel,
                e.episode_type,
                e.tool,
                e.status,
                e.error_code,
                e.duration_ms,
                e.result_size,
                e.task_result,
                e.verdict_at,
                int(e.blocked),
                e.prev_id,
                _json.encode(e.files).decode(),
            ),
        )
        return rowid

    def verdict_targets(
        self,
        workspace: str,
        uid: int,
        agent: str | None,
        episode_id: str | None,
        session: str | None,
    ) -> list[tuple[int, float | None]]:
        where = "r.kind = 'episode' AND r.workspace = ? AND r.uid = ? AND r.tombstoned_at IS NULL"
        params: list[Any] = [workspace, uid]
        if agent is not None:
            where += " AND r.agent = ?"
            params.append(agent)
        if episode_id is not None:
            where += " AND r.id = ?"
            params.append(episode_id)
        else:
            where += " AND r.session = ?"
            params.append(session)
        return [
            (int(rowid), task_result)
            for rowid, task_result in self._conn.execute(
                "SELECT r.rowid, e.task_result FROM records r JOIN episodes e"
                f" ON e.rowid = r.rowid WHERE {where}",
                params,
            ).fetchall()
        ]

    def set_verdict(
        self, rowids: Sequence[int], task_result: float, verdict_at: float, now: float
    ) -> None:
        for rowid in rowids:
            self._conn.execute(
                "UPDATE episodes SET task_result = ?, verdict_at = ? WHERE rowid = ?",
                (task_result, verdict_at, rowid),
            )
            self._conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
