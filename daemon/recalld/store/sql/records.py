"""What every kind of record shares: idempotency keys, forgetting, evaluation's
backlog, vectors, and what authorization and status read of records."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import fields

import msgspec
import numpy as np

from ...domain.policy import HARD_TRUST_FLOOR, SETTLED_STATUSES
from ...domain.principal import Principal
from ...errors import RecallError
from ..port import NewRecord, Ownership, ShareRow, Tombstone
from .db import Db
from .filters import marks

_tags = msgspec.json.Decoder(list[str])
_json = msgspec.json.Encoder()

__all__ = [
    "EMBEDDING_BACKLOG",
    "SqlRecordReads",
    "SqlRecordWrites",
    "insert_record",
    "key_digest",
    "remember_key",
    "replayed",
]

# The records waiting to be embedded, one definition for the embedding actor, status and
# doctor: live, no vector yet, and not waiting for their evaluation (an episode waiting for
# its verdict is embedded once it settles, so it is not late).
EMBEDDING_BACKLOG = "embed_state = 0 AND tombstoned_at IS NULL AND eligibility != 'pending'"


def key_digest(key: str) -> str:
    """How an idempotency key is stored and looked up: a digest, never the key itself."""
    return hashlib.blake2b(key.encode(), digest_size=16, person=b"recalld-idem").hexdigest()


def replayed(conn: Db, who: Principal, key: str | None) -> str | None:
    """The record an earlier request of ``who`` with idempotency key ``key`` wrote."""
    if key is None:
        return None
    row = conn.execute(
        "SELECT record_id FROM idempotency WHERE agent = ? AND key = ?",
        (who.agent, _scoped(who, key)),
    ).fetchone()
    return None if row is None else str(row[0])


def remember_key(conn: Db, who: Principal, key: str | None, record_id: str, now: float) -> None:
    """Record that ``who``'s request with ``key`` wrote ``record_id`` (no-op without a key)."""
    if key is not None:
        conn.execute(
            "INSERT INTO idempotency (agent, key, record_id, created_at) VALUES (?, ?, ?, ?)",
            (who.agent, _scoped(who, key), record_id, now),
        )


def _scoped(who: Principal, key: str) -> str:
    # A key is the caller's in its workspace: the same agent name in another workspace using
    # the same key neither replays this record (its id, its lessons) nor collides with it.
    return key_digest(f"{who.workspace}\0{key}")


_NEW_RECORD = [f.name for f in fields(NewRecord)]
_INSERT_RECORD = (
    f"INSERT INTO records ({', '.join(_NEW_RECORD)}, updated_at) VALUES ({marks(_NEW_RECORD)}, ?)"
)


def insert_record(conn: Db, row: NewRecord) -> int:
    """Insert ``row`` (updated when created, its tags once each); its rowid."""
    values = {name: getattr(row, name) for name in _NEW_RECORD}
    values["tags"] = _json.encode(list(dict.fromkeys(row.tags))).decode()
    return conn.insert_record(_INSERT_RECORD, [*values.values(), row.created_at], row.text)


# Pending records the policy can settle now: episodes waiting for a verdict are skipped, so
# they are not re-read by every pass (the SQL mirror of settle_episode returning non-None).
# Records of other kinds are always settleable.
_SETTLEABLE = (
    "SELECT r.rowid, r.kind, r.trust, e.blocked, e.status, e.task_result FROM records r"
    " LEFT JOIN episodes e ON e.rowid = r.rowid WHERE r.eligibility = 'pending'"
    " AND r.tombstoned_at IS NULL"
    " AND (r.kind != 'episode' OR e.blocked != 0 OR r.trust < ? OR e.task_result IS NOT NULL"
    f" OR e.status IN ({marks(sorted(SETTLED_STATUSES))}))"
)
_SETTLEABLE_PARAMS = (HARD_TRUST_FLOOR, *sorted(SETTLED_STATUSES))

# Settles one pending record: (kind, trust, blocked, status, task_result) -> eligibility.
Settle = Callable[[str, float, bool, str | None, float | None], str]


class SqlRecordReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def ownership(self, ids: Sequence[str]) -> dict[str, Ownership]:
        if not ids:
            return {}
        return {
            row[0]: Ownership(row[1], row[2], row[3], row[4], bool(row[5]))
            for row in self._conn.execute(
                "SELECT r.id, r.kind, r.workspace, r.agent,"
                " CASE WHEN m.rowid IS NULL THEN r.workspace ELSE m.origin END,"
                f" {self._conn.owned('r')}"
                " FROM records r LEFT JOIN memory_meta m ON m.rowid = r.rowid"
                f" WHERE r.id IN ({marks(ids)})",
                list(ids),
            )
        }

    def shareable(self, record_id: str) -> ShareRow | None:
        row = self._conn.execute(
            "SELECT r.rowid, r.id, r.kind, coalesce(m.kind, 'entry'), r.text, m.subject, r.source,"
            " r.tags, r.workspace, r.agent, m.writer_client, m.writer_model, r.created_at,"
            f" r.visibility, {self._conn.owner('r')}"
            " FROM records r LEFT JOIN memory_meta m ON m.rowid = r.rowid"
            " WHERE r.id = ? AND r.kind IN ('memory', 'lesson') AND r.tombstoned_at IS NULL",
            (record_id,),
        ).fetchone()
        if row is None:
            return None
        paths = [
            path
            for (path,) in self._conn.execute(
                "SELECT path FROM memory_paths WHERE rowid = ? ORDER BY path", (row[0],)
            )
        ]
        (
            _,
            record_id,
            kind,
            memory_kind,
            text,
            subject,
            source,
            tags,
            workspace,
            agent,
            client,
            model,
            created_at,
            visibility,
            owner,
        ) = row
        return ShareRow(
            id=record_id,
            kind=kind,
            memory_kind=memory_kind,
            text=text,
            subject=subject,
            source=source,
            tags=_tags.decode(tags),
            workspace=workspace,
            agent=agent,
            writer_client=client,
            writer_model=model,
            created_at=created_at,
            visibility=visibility,
            owner=owner,
            paths=paths,
        )

    def has_pending(self) -> bool:
        return (
            self._conn.execute(f"{_SETTLEABLE} LIMIT 1", _SETTLEABLE_PARAMS).fetchone() is not None
        )

    def unembedded(self, after: int, limit: int) -> list[tuple[int, str]]:
        """The embedding backlog: (rowid, text) of records with no vector yet, in rowid order
        (a record still waiting for its evaluation waits for that first)."""
        return [
            tuple(row)
            for row in self._conn.execute(
                f"SELECT rowid, text FROM records WHERE {EMBEDDING_BACKLOG} AND rowid > ?"
                " ORDER BY rowid LIMIT ?",
                (after, limit),
            )
        ]

    def counts(self) -> tuple[dict[str, dict[str, int]], int]:
        counts: dict[str, dict[str, int]] = {}
        for kind, eligibility, n in self._conn.execute(
            "SELECT kind, eligibility, count(*) FROM records WHERE tombstoned_at IS NULL"
            " GROUP BY kind, eligibility"
        ):
            counts.setdefault(kind, {"total": 0})
            counts[kind][eligibility] = n
            counts[kind]["total"] += n
        backlog = self._conn.execute(
            f"SELECT count(*) FROM records WHERE {EMBEDDING_BACKLOG}"
        ).fetchone()[0]
        return counts, int(backlog)


class SqlRecordWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def replayed(self, who: Principal, key: str | None) -> str | None:
        return replayed(self._conn, who, key)

    def remember_key(self, who: Principal, key: str | None, record_id: str, now: float) -> None:
        remember_key(self._conn, who, key, record_id, now)

    def forget(self, record_id: str, now: float) -> Tombstone:
        row = self._conn.execute(
            "SELECT rowid, kind, tombstoned_at FROM records WHERE id = ?",
            (record_id,),
        ).fetchone()
        if row is None:
            raise RecallError("not_found", f"no record {record_id}")
        rowid, kind, tombstoned_at = row
        if tombstoned_at is not None:
            return Tombstone(kind, tombstoned_at, None)
        self._conn.execute(
            "UPDATE records SET tombstoned_at = ?, updated_at = ? WHERE rowid = ?",
            (now, now, rowid),
        )
        self._conn.execute("DELETE FROM vectors WHERE rowid = ?", (rowid,))
        return Tombstone(kind, now, int(rowid))

    def share(self, who: Principal, record_id: str, text: str, now: float) -> None:
        conn = self._conn
        # Guarded in the statement: a memory_update between the review and now, or a
        # second share, changes no row instead of sharing what was not reviewed.
        cur = conn.execute(
            "UPDATE records SET visibility = 'team', updated_at = ?"
            " WHERE id = ? AND visibility = 'private' AND text = ? AND tombstoned_at IS NULL"
            f" AND {conn.owned('records')} AND NOT EXISTS (SELECT 1 FROM records d"
            "  WHERE d.visibility = 'team' AND d.workspace = records.workspace"
            "  AND d.kind = records.kind AND d.content_hash = records.content_hash"
            f"  AND {conn.owned('d')})",
            (now, record_id, text),
        )
        if not cur.rowcount:
            raise RecallError(
                "invalid_request",
                f"{record_id} was not shared: it changed since it was reviewed, is team memory"
                " already, or its text is (as another record); preview it again",
            )
        conn.execute(
            "INSERT INTO memory_events (ts, session, agent, record_id, event)"
            " VALUES (?, ?, ?, ?, 'shared')",
            (now, who.session, who.agent, record_id),
        )

    def settle_pending(self, limit: int, now: float, settle: Settle) -> int:
        """Settle up to ``limit`` pending records by ``settle``; returns how many."""
        rows = self._conn.execute(
            f"{_SETTLEABLE} ORDER BY r.rowid LIMIT ?", (*_SETTLEABLE_PARAMS, limit)
        ).fetchall()
        for rowid, kind, trust, blocked, status, task_result in rows:
            self._conn.execute(
                "UPDATE records SET eligibility = ?, updated_at = ? WHERE rowid = ?",
                (settle(kind, trust, bool(blocked), status, task_result), now, rowid),
            )
        return len(rows)

    def store_vectors(self, model: str, rows: Sequence[tuple[int, np.ndarray]]) -> list[int]:
        """Write vectors for records that still exist, and mark them embedded; the rowids
        written."""
        stored: list[int] = []
        for rowid, vec in rows:
            cur = self._conn.execute(
                "UPDATE records SET embed_state = 1 WHERE rowid = ? AND tombstoned_at IS NULL",
                (rowid,),
            )
            if cur.rowcount:
                self._conn.execute(
                    "INSERT INTO vectors (rowid, model, vec) VALUES (?, ?, ?)"
                    " ON CONFLICT (rowid) DO UPDATE SET model = excluded.model, vec = excluded.vec",
                    (rowid, model, self._conn.vector(vec)),
                )
                stored.append(rowid)
        return stored

    def mark_all_unembedded(self) -> int:
        """Every live record waits for a vector again (old vectors serve until replaced)."""
        return int(
            self._conn.execute(
                "UPDATE records SET embed_state = 0 WHERE tombstoned_at IS NULL"
            ).rowcount
        )

    def merge_text_index(self, pages: int) -> bool:
        return self._conn.merge_text_index(pages)

    def probe(self) -> None:
        self._conn.execute("SELECT 1").fetchone()
