"""What recallctl's operations read and write: export pages, the doctor's figures,
workspace approvals and agent credentials."""

from __future__ import annotations

import msgspec
import numpy as np
from recall_client import protocol as p

from ...domain.policy import confidence
from ..port import ApprovalRow, CredentialRow, DoctorFigures
from .db import Db
from .experiences import lesson_stats
from .filters import marks
from .records import EMBEDDING_BACKLOG

__all__ = ["OperationReads", "OperationWrites"]

_strings = msgspec.json.Decoder(list[str])


class OperationReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def export_page(
        self,
        after: int,
        limit: int,
        workspace: str | None,
        kind: str | None,
        now: float,
        page_bytes: int,
    ) -> p.ExportPage:
        """One page of live records in rowid order (tombstoned and expired ones are gone);
        at most ``page_bytes`` of text, and at least one record."""
        conn = self._conn
        where = "tombstoned_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
        params: list[object] = [now]
        if workspace is not None:
            where += " AND workspace = ?"
            params.append(workspace)
        if kind is not None:
            where += " AND kind = ?"
            params.append(kind)
        total = None
        if after == 0:
            total = conn.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[
                0
            ]
        rows = conn.execute(
            "SELECT rowid, id, kind, text, workspace, agent, ts, created_at, updated_at,"
            " session, source, tags, trust, eligibility, expires_at FROM records"
            f" WHERE rowid > ? AND {where} ORDER BY rowid LIMIT ?",
            (after, *params, limit),
        )
        records: dict[int, p.ExportedRecord] = {}
        size = 0
        last = after
        for row in rows:
            last = row[0]
            records[row[0]] = p.ExportedRecord(
                id=row[1],
                kind=row[2],
                text=row[3],
                workspace=row[4],
                agent=row[5],
                ts=row[6],
                created_at=row[7],
                updated_at=row[8],
                session=row[9],
                source=row[10],
                tags=_strings.decode(row[11]),
                trust=row[12],
                eligibility=row[13],
                expires_at=row[14],
            )
            size += len(row[3].encode())
            if size >= page_bytes:
                break
        self._add_experience_fields(records)
        full = len(records) == limit or size >= page_bytes
        return p.ExportPage(
            id=0, records=list(records.values()), next_after=last if full else None, total=total
        )

    def _add_experience_fields(self, records: dict[int, p.ExportedRecord]) -> None:
        """Give experience rows their metadata and live lessons, lesson rows their support."""
        conn = self._conn
        experiences = [rowid for rowid, r in records.items() if r.kind == "experience"]
        lessons = [rowid for rowid, r in records.items() if r.kind == "lesson"]
        if experiences:
            links: dict[int, list[p.ExportedLessonLink]] = {rowid: [] for rowid in experiences}
            for exp, lesson_id, text in conn.execute(
                "SELECT ls.experience_rowid, l.id, l.text FROM lesson_support ls"
                " JOIN records l ON l.rowid = ls.lesson_rowid AND l.tombstoned_at IS NULL"
                f" WHERE ls.experience_rowid IN ({marks(experiences)})"
                " ORDER BY ls.created_at, l.rowid",
                experiences,
            ):
                links[exp].append(p.ExportedLessonLink(id=lesson_id, text=text))
            for rowid, task_class, strategy, status, tool_calls, minutes, files in conn.execute(
                "SELECT rowid, task_class, strategy, status, tool_calls, minutes, files"
                f" FROM experiences WHERE rowid IN ({marks(experiences)})",
                experiences,
            ):
                records[rowid].experience = p.ExportedExperience(
                    task_class=task_class,
                    strategy=strategy,
                    status=status,
                    tool_calls=tool_calls,
                    minutes=minutes,
                    files=_strings.decode(files),
                    lessons=links[rowid],
                )
        if lessons:
            stats = lesson_stats(conn, lessons)
            supporters: dict[int, list[str]] = {rowid: [] for rowid in lessons}
            for lesson, exp_id in conn.execute(
                "SELECT ls.lesson_rowid, x.id FROM lesson_support ls"
                " JOIN records x ON x.rowid = ls.experience_rowid AND x.tombstoned_at IS NULL"
                f" WHERE ls.lesson_rowid IN ({marks(lessons)}) ORDER BY ls.created_at, x.rowid",
                lessons,
            ):
                supporters[lesson].append(exp_id)
            for rowid in lessons:
                support, conf = stats.get(rowid, (0, confidence(0, 0, 0)))
                records[rowid].lesson = p.ExportedLesson(
                    support=support, confidence=conf, experiences=supporters[rowid]
                )

    def doctor_figures(self, model: str | None) -> DoctorFigures:
        """Integrity, schema version, and (for ``model``) the vectors the index must hold."""
        conn = self._conn
        problems = conn.integrity()
        ids = np.empty(0, dtype=np.int64)
        stale = 0
        if model is not None:
            ids = np.array(
                [
                    r[0]
                    for r in conn.execute(
                        "SELECT v.rowid FROM vectors v JOIN records r ON r.rowid = v.rowid"
                        " WHERE v.model = ? AND r.tombstoned_at IS NULL ORDER BY v.rowid",
                        (model,),
                    )
                ],
                dtype=np.int64,
            )
            stale = conn.execute(
                "SELECT count(*) FROM records r WHERE r.tombstoned_at IS NULL"
                " AND r.embed_state = 1 AND NOT EXISTS (SELECT 1 FROM vectors v"
                " WHERE v.rowid = r.rowid AND v.model = ?)",
                (model,),
            ).fetchone()[0]
        backlog = conn.execute(
            f"SELECT count(*) FROM records WHERE {EMBEDDING_BACKLOG}"
        ).fetchone()[0]
        version, expected = conn.schema()
        return DoctorFigures(
            problems=problems,
            schema_version=version,
            schema_expected=expected,
            vector_ids=ids,
            stale=int(stale),
            backlog=int(backlog),
        )

    def approvals(self) -> list[ApprovalRow]:
        return [
            ApprovalRow(*row)
            for row in self._conn.execute(
                "SELECT workspace, approved_at, approved_by FROM workspace_approvals"
            )
        ]

    def credentials(self) -> list[CredentialRow]:
        return [
            CredentialRow(agent, bytes(digest), created)
            for agent, digest, created in self._conn.execute(
                "SELECT agent, token_digest, created_at FROM agent_credentials"
            )
        ]


class OperationWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def approve(self, workspace: str, by: str, now: float) -> ApprovalRow | None:
        """Record an approval; None when the workspace was approved already."""
        cur = self._conn.execute(
            "INSERT INTO workspace_approvals (workspace, approved_at, approved_by)"
            " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (workspace, now, by),
        )
        return ApprovalRow(workspace, now, by) if cur.rowcount else None

    def revoke_approval(self, workspace: str) -> bool:
        cur = self._conn.execute(
            "DELETE FROM workspace_approvals WHERE workspace = ?", (workspace,)
        )
        return cur.rowcount > 0

    def enroll_agent(self, agent: str, token_digest: bytes, now: float) -> bool:
        """Store the digest of a new token for ``agent``; True when it replaced one."""
        exists = (
            self._conn.execute(
                "SELECT 1 FROM agent_credentials WHERE agent = ?", (agent,)
            ).fetchone()
            is not None
        )
        # Replace, not upsert: in a shared database the key is the owner's and the agent's.
        self._conn.execute("DELETE FROM agent_credentials WHERE agent = ?", (agent,))
        self._conn.execute(
            "INSERT INTO agent_credentials (agent, token_digest, created_at) VALUES (?, ?, ?)",
            (agent, token_digest, now),
        )
        return exists

    def enrolled(self, agent: str) -> bool:
        return (
            self._conn.execute(
                "SELECT 1 FROM agent_credentials WHERE agent = ?", (agent,)
            ).fetchone()
            is not None
        )

    def revoke_agent(self, agent: str) -> bool:
        cur = self._conn.execute("DELETE FROM agent_credentials WHERE agent = ?", (agent,))
        return cur.rowcount > 0
