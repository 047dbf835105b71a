"""What recallctl's operations read and write: records as their tables hold them (export and
import; the mapping to the export format is above the store, ``handlers.export_format``),
the doctor's figures, workspace approvals and agent credentials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from ..port import AliasRow, ApprovalRow, CredentialRow, DoctorFigures, RecordRows
from . import workspaces
from .db import Db
from .experiences import lesson_stats
from .filters import marks
from .records import EMBEDDING_BACKLOG

__all__ = ["SqlOperationReads", "SqlOperationWrites"]

_json = msgspec.json.Encoder()
_strings = msgspec.json.Decoder(list[str])

# Columns kept as JSON arrays of strings; and as integers for a bool.
_JSON_COLUMNS = frozenset({"tags", "trust_reasons", "files", "given"})
_BOOL_COLUMNS = frozenset({"blocked"})
# The column an attached row names its record by, where it is not the rowid: a memory's
# links by src, its events by the record's public id.
_KEYS = {"memory_links": "src", "memory_events": "record_id"}


def _value(column: str, value: Any) -> Any:
    if column in _JSON_COLUMNS:
        return _strings.decode(value)
    if column in _BOOL_COLUMNS:
        return bool(value)
    return value


def _stored(column: str, value: Any) -> Any:
    if column in _JSON_COLUMNS:
        return _json.encode(value).decode()
    if column in _BOOL_COLUMNS:
        return int(value)
    return value


def _where(workspace: str | None, kind: str | None) -> tuple[str, list[object]]:
    where = "TRUE"
    params: list[object] = []
    if workspace is not None:
        where += " AND workspace = ?"
        params.append(workspace)
    if kind is not None:
        where += " AND kind = ?"
        params.append(kind)
    return where, params


class _Rows:
    """Reads the ``columns`` of each table named, grouped by a key column."""

    def __init__(self, conn: Db, columns: Mapping[str, Sequence[str]]) -> None:
        self._conn = conn
        self._columns = columns

    def by(
        self, table: str, key: str, keys: Sequence[Any], tail: str = ""
    ) -> dict[Any, list[dict[str, Any]]]:
        out: dict[Any, list[dict[str, Any]]] = {k: [] for k in keys}
        if not keys:
            return out
        cols = self._columns[table]
        for key_value, *values in self._conn.execute(
            f"SELECT {key}, {', '.join(cols)} FROM {table} WHERE {key} IN ({marks(keys)}){tail}",
            list(keys),
        ):
            out[key_value].append({c: _value(c, v) for c, v in zip(cols, values, strict=True)})
        return out


class SqlOperationReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def export_count(self, workspace: str | None, kind: str | None) -> int:
        where, params = _where(workspace, kind)
        return int(
            self._conn.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[0]
        )

    def export_rows(
        self,
        after: int,
        limit: int,
        workspace: str | None,
        kind: str | None,
        columns: Mapping[str, Sequence[str]],
    ) -> dict[int, RecordRows]:
        conn = self._conn
        where, params = _where(workspace, kind)
        rowids = [
            r[0]
            for r in conn.execute(
                f"SELECT rowid FROM records WHERE rowid > ? AND {where} ORDER BY rowid LIMIT ?",
                (after, *params, limit),
            )
        ]
        read = _Rows(conn, columns)
        rows = {
            rowid: RecordRows(found[0])
            for rowid, found in read.by("records", "rowid", rowids).items()
        }
        of = {
            kind: [rowid for rowid, r in rows.items() if r.record["kind"] == kind]
            for kind in ("memory", "episode", "experience", "lesson")
        }
        memories = of["memory"]
        ids = {rows[r].record["id"]: r for r in memories}
        for table, key, keys, tail in (
            ("memory_meta", "rowid", memories, ""),
            ("memory_links", "src", memories, " ORDER BY src, rel, dst_id"),
            ("memory_paths", "rowid", memories, " ORDER BY rowid, path"),
            ("memory_uses", "rowid", memories, " ORDER BY rowid, ts, id"),
            ("memory_events", "record_id", list(ids), " ORDER BY id"),
            ("episodes", "rowid", of["episode"], ""),
            ("experiences", "rowid", of["experience"], ""),
            ("experience_rollups", "rowid", of["experience"], ""),
        ):
            for key_value, found in read.by(table, key, keys, tail).items():
                rows[ids[key_value] if key == "record_id" else key_value].attached[table] = found
        if memories:
            for rowid, label, value in conn.execute(
                f"SELECT rowid, kind, value FROM memory_labels WHERE rowid IN ({marks(memories)})"
                " ORDER BY rowid, kind, value",
                memories,
            ):
                rows[rowid].labels.setdefault(label, []).append(value)
        for mine, column, other in (
            (of["experience"], "experience_rowid", "lesson_rowid"),
            (of["lesson"], "lesson_rowid", "experience_rowid"),
        ):
            if not mine:
                continue
            for rowid, other_id, created_at in conn.execute(
                f"SELECT ls.{column}, x.id, ls.created_at FROM lesson_support ls"
                f" JOIN records x ON x.rowid = ls.{other}"
                f" WHERE ls.{column} IN ({marks(mine)}) ORDER BY ls.{column}, x.rowid",
                mine,
            ):
                rows[rowid].support.append((other_id, created_at))
        return rows

    def lesson_stats(self, rowids: Sequence[int]) -> dict[int, tuple[int, float]]:
        return lesson_stats(self._conn, rowids)

    def record_exists(self, record_id: str) -> bool:
        return bool(
            self._conn.execute("SELECT 1 FROM records WHERE id = ?", (record_id,)).fetchone()
        )

    def live_content(self, workspace: str, kind: str, content_hash: bytes) -> bool:
        # The dedup index holds live records only.
        return bool(
            self._conn.execute(
                "SELECT 1 FROM records WHERE workspace = ? AND kind = ? AND content_hash = ?"
                " AND tombstoned_at IS NULL",
                (workspace, kind, content_hash),
            ).fetchone()
        )

    def rolled_up(self, workspace: str, session: str) -> bool:
        return bool(
            self._conn.execute(
                "SELECT 1 FROM experience_rollups WHERE workspace = ? AND session = ?",
                (workspace, session),
            ).fetchone()
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

    def rekey_pending(self) -> list[str]:
        return workspaces.rekey_pending(self._conn)

    def reidentify_pending(self) -> dict[str, list[str]]:
        return workspaces.reidentify_pending(self._conn)

    def aliases(self) -> list[AliasRow]:
        return workspaces.aliases(self._conn)

    def workspace_records(self) -> dict[str, int]:
        return workspaces.workspace_records(self._conn)

    def credentials(self) -> list[CredentialRow]:
        return [
            CredentialRow(agent, bytes(digest), created)
            for agent, digest, created in self._conn.execute(
                "SELECT agent, token_digest, created_at FROM agent_credentials"
            )
        ]


class SqlOperationWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def insert_rows(self, rows: RecordRows, uid: int) -> int | None:
        record = rows.record
        rowid = self._conn.insert_record_if_free(
            *self._insert("records", {"uid": uid}, record, " (id)"), record["text"]
        )
        if rowid is None:
            return None
        for table, parts in rows.attached.items():
            key = _KEYS.get(table, "rowid")
            of = {key: record["id"] if key == "record_id" else rowid}
            for part in parts:
                self._conn.execute(*self._insert(table, of, part))
        labels = [(rowid, kind, value) for kind, values in rows.labels.items() for value in values]
        if labels:
            self._conn.executemany(
                "INSERT INTO memory_labels (rowid, kind, value) VALUES (?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                labels,
            )
        lesson_end = record["kind"] == "lesson"
        for other_id, created_at in rows.support:
            other = self._conn.execute(
                "SELECT rowid FROM records WHERE id = ? AND kind = ?",
                (other_id, "experience" if lesson_end else "lesson"),
            ).fetchone()
            if other is None:
                continue
            pair = (rowid, other[0]) if lesson_end else (other[0], rowid)
            self._conn.execute(
                "INSERT INTO lesson_support (lesson_rowid, experience_rowid, created_at)"
                " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (*pair, created_at),
            )
        return rowid

    @staticmethod
    def _insert(
        table: str, keys: dict[str, Any], row: dict[str, Any], conflict: str = ""
    ) -> tuple[str, list[Any]]:
        """The INSERT of one row of ``table`` (``keys`` name its record), and its values; a
        row there already (a record's list may repeat an item) is left."""
        names = [*keys, *row]
        values = [*keys.values(), *(_stored(c, v) for c, v in row.items())]
        sql = (
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks(names)})"
            f" ON CONFLICT{conflict} DO NOTHING"
        )
        return sql, values

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

    def rekey(self, path: str, workspace: str, now: float) -> int:
        return workspaces.rekey(self._conn, path, workspace, now)

    def reidentify(self, old: str, new: str, paths: list[str], now: float) -> int:
        return workspaces.reidentify(self._conn, old, new, paths, now)

    def rekey_done(self) -> None:
        workspaces.rekey_done(self._conn)

    def note_alias(self, path: str, workspace: str, now: float) -> None:
        workspaces.note_alias(self._conn, path, workspace, now)

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
