"""Memories and canonical facts: the writes (inside a group commit) and the reads.

A memory is a ``records`` row of kind 'memory' plus its ``memory_meta`` row (kind, subject,
authority, origin, verification, supersession), its labels, cited paths, links and recorded
uses. A fact's supersession or contest is decided (by the policy) in the transaction that
stores it, so the reply and every later search already see it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ...domain.policy import HELD
from ...domain.principal import Principal
from ...domain.scopes import ADMIN
from ...errors import RecallError
from ..port import (
    CalibrationRow,
    Fact,
    Filter,
    MemoryChange,
    MemoryInsert,
    MemoryRow,
    MemoryTarget,
    UseRow,
)
from .db import Db
from .filters import marks, where
from .records import insert_record

__all__ = ["SqlMemoryReads", "SqlMemoryWrites"]

_json = msgspec.json.Encoder()
_tags = msgspec.json.Decoder(list[str])

# MemoryRow's fields, each beside the expression that reads it (rows are bound by name). A
# memory row written without its metadata (a bulk load straight into records) reads as a
# plain entry of its workspace, verified when it was created.
_ROW_COLUMNS = (
    ("rowid", "r.rowid"),
    ("id", "r.id"),
    ("text", "r.text"),
    ("ts", "r.ts"),
    ("tags", "r.tags"),
    ("source", "r.source"),
    ("trust", "r.trust"),
    ("created_at", "r.created_at"),
    ("updated_at", "r.updated_at"),
    ("agent", "r.agent"),
    ("workspace", "r.workspace"),
    ("session", "r.session"),
    ("eligibility", "r.eligibility"),
    ("expires_at", "r.expires_at"),
    ("kind", "coalesce(m.kind, 'entry')"),
    ("subject", "m.subject"),
    ("subject_key", "m.subject_key"),
    ("authority", "coalesce(m.authority, 'first-party')"),
    ("distortion_tolerance", "m.distortion_tolerance"),
    ("origin", "CASE WHEN m.rowid IS NULL THEN r.workspace ELSE m.origin END"),
    ("origin_repo", "m.origin_repo"),
    ("origin_commit", "m.origin_commit"),
    ("verified_commit", "m.verified_commit"),
    ("last_verified_at", "coalesce(m.last_verified_at, r.created_at)"),
    ("writer_client", "m.writer_client"),
    ("writer_model", "m.writer_model"),
    ("superseded_by", "m.superseded_by"),
    ("visibility", "r.visibility"),
    ("owner", "{owner}"),
    ("mine", "CASE WHEN {owned} THEN 1 ELSE 0 END"),
)
_ROW_NAMES = [name for name, _ in _ROW_COLUMNS]
_ROW_SQL = (
    f"SELECT {', '.join(expr for _, expr in _ROW_COLUMNS)}"
    " FROM {records} LEFT JOIN memory_meta m ON m.rowid = r.rowid"
)


def _memory_row(values: Sequence[Any]) -> MemoryRow:
    row = dict(zip(_ROW_NAMES, values, strict=True))
    row["tags"] = _tags.decode(row["tags"])
    row["mine"] = bool(row["mine"])
    return MemoryRow(**row)


def _labels(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


# --------------------------------------------------------------------------- reads


class SqlMemoryReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn
        self._token_key: bytes | None = None

    def _rows(
        self, condition: str, params: Sequence[Any], tail: str = "", *, keyed: bool = False
    ) -> list[MemoryRow]:
        """Memory rows where ``condition``; ``keyed``: it names them by rowid (Db.by_rowid)."""
        records = self._conn.by_rowid("r") if keyed else "records r"
        rows = []
        sql = _ROW_SQL.format(
            records=records, owner=self._conn.owner("r"), owned=self._conn.owned("r")
        )
        for r in self._conn.execute(f"{sql} WHERE {condition}{tail}", params):
            rows.append(_memory_row(r))
        if not rows:
            return rows
        by_rowid = {r.rowid: r for r in rows}
        ids = list(by_rowid)
        for rowid, kind, value in self._conn.execute(
            f"SELECT rowid, kind, value FROM memory_labels WHERE rowid IN ({marks(ids)})", ids
        ):
            by_rowid[rowid].labels.setdefault(kind, []).append(value)
        for rowid, path, anchored in self._conn.execute(
            f"SELECT rowid, path, anchored FROM memory_paths WHERE rowid IN ({marks(ids)})", ids
        ):
            by_rowid[rowid].paths.append((path, bool(anchored)))
        return rows

    def by_rowid(self, rowids: Sequence[int]) -> dict[int, MemoryRow]:
        if not rowids:
            return {}
        return {r.rowid: r for r in self._rows(f"r.rowid IN ({marks(rowids)})", list(rowids))}

    def live(self, ids: Sequence[str]) -> dict[str, MemoryRow]:
        """Memories by public id that are not forgotten (any eligibility)."""
        if not ids:
            return {}
        return {
            r.id: r
            for r in self._rows(
                f"r.id IN ({marks(ids)}) AND r.kind = 'memory' AND r.tombstoned_at IS NULL",
                list(ids),
            )
        }

    def pinned_constraints(self, f: Filter) -> list[MemoryRow]:
        """Constraint facts that are current, under the filter."""
        clause, params = where(self._conn, f)
        return self._rows(
            "r.rowid IN (SELECT rowid FROM memory_meta WHERE distortion_tolerance = 'constraint'"
            f" AND superseded_by IS NULL) AND {clause}",
            params,
            keyed=True,  # the few constraints, not the workspace's every record
        )

    def current_facts(self, key: str, origin: str | None, now: float) -> list[Fact]:
        """The current facts on a subject, oldest stored first. More than one: contested."""
        return current_facts(self._conn, key, origin, now)

    def texts(self, ids: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        return dict(
            self._conn.execute(
                f"SELECT id, text FROM records WHERE id IN ({marks(wanted)})", wanted
            ).fetchall()
        )

    def uses(self, rowids: Sequence[int]) -> list[UseRow]:
        if not rowids:
            return []
        return [
            UseRow(*row)
            for row in self._conn.execute(
                f"SELECT rowid, outcome, ts, note FROM memory_uses WHERE rowid IN ({marks(rowids)})"
                " ORDER BY ts DESC",
                list(rowids),
            )
        ]

    def use_counts(self, rowid: int) -> dict[str, int]:
        return dict(
            self._conn.execute(
                "SELECT outcome, count(*) FROM memory_uses WHERE rowid = ? GROUP BY outcome",
                (rowid,),
            ).fetchall()
        )

    def links_from(self, rowid: int) -> list[tuple[str, str, str | None]]:
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT rel, dst_id, note FROM memory_links WHERE src = ?", (rowid,)
            )
        ]

    def depended_on_by(self, memory_id: str) -> list[tuple[str, str, str | None]]:
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT r.id, r.text, l.note FROM memory_links l JOIN records r ON r.rowid = l.src"
                " WHERE l.dst_id = ? AND l.rel = 'depends_on' AND r.tombstoned_at IS NULL",
                (memory_id,),
            )
        ]

    def depends_on(self, rowids: Sequence[int]) -> dict[int, list[tuple[str, str | None]]]:
        out: dict[int, list[tuple[str, str | None]]] = {}
        if not rowids:
            return out
        for src, dst, note in self._conn.execute(
            "SELECT src, dst_id, note FROM memory_links WHERE rel = 'depends_on'"
            f" AND src IN ({marks(rowids)})",
            list(rowids),
        ):
            out.setdefault(src, []).append((dst, note))
        return out

    def prior_session_boundary(self, session: str) -> float | None:
        row = self._conn.execute(
            "SELECT max(ts) FROM memory_events WHERE session != ?", (session,)
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def newest_facts(self, f: Filter, limit: int) -> list[MemoryRow]:
        """Up to ``limit`` current facts under ``f``, newest first: found from the subject
        index, so a workspace's other records are not read."""
        clause, params = where(self._conn, f)
        return self._rows(
            "r.rowid IN (SELECT rowid FROM memory_meta WHERE subject_key IS NOT NULL"
            f" AND kind = 'fact' AND superseded_by IS NULL) AND {clause}",
            [*params, limit],
            " ORDER BY r.ts DESC, r.id DESC LIMIT ?",
            keyed=True,
        )

    def citing(self, paths: Sequence[str], f: Filter, limit: int) -> list[MemoryRow]:
        """Up to ``limit`` memories under ``f`` that cite one of ``paths``, newest first."""
        if not paths:
            return []
        clause, params = where(self._conn, f)
        return self._rows(
            f"r.rowid IN (SELECT rowid FROM memory_paths WHERE path IN ({marks(paths)}))"
            f" AND {clause}",
            [*paths, *params, limit],
            " ORDER BY r.ts DESC, r.id DESC LIMIT ?",
        )

    def origin_repo(self, memory_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT m.origin_repo FROM records r JOIN memory_meta m ON m.rowid = r.rowid"
            " WHERE r.id = ?",
            (memory_id,),
        ).fetchone()
        return None if row is None else row[0]

    def newest_page(
        self,
        f: Filter,
        *,
        before: tuple[float, str] | None,
        limit: int,
        kind: str | None = None,
        subject_key: str | None = None,
        current_only: bool = False,
    ) -> list[MemoryRow]:
        clause, params = where(self._conn, f)
        if kind is not None:
            # A row without metadata reads as an entry (see _ROW_SQL).
            has_fact = (
                "EXISTS (SELECT 1 FROM memory_meta k WHERE k.rowid = r.rowid AND k.kind = 'fact')"
            )
            clause += f" AND {has_fact}" if kind == "fact" else f" AND NOT {has_fact}"
        if subject_key is not None:
            clause += (
                " AND EXISTS (SELECT 1 FROM memory_meta k WHERE k.rowid = r.rowid"
                " AND k.subject_key = ?)"
            )
            params.append(subject_key)
        if current_only:
            clause += (
                " AND NOT EXISTS (SELECT 1 FROM memory_meta k WHERE k.rowid = r.rowid"
                " AND k.superseded_by IS NOT NULL)"
            )
        if before is not None:
            clause += " AND (r.ts < ? OR (r.ts = ? AND r.id < ?))"
            params += [before[0], before[0], before[1]]
        return self._rows(clause, [*params, limit], " ORDER BY r.ts DESC, r.id DESC LIMIT ?")

    def workspace_counts(self, f: Filter) -> dict[str, int]:
        clause, params = where(self._conn, f)
        return {
            str(workspace): int(n)
            for workspace, n in self._conn.execute(
                f"SELECT r.workspace, count(*) FROM records r WHERE {clause} GROUP BY r.workspace",
                params,
            )
        }

    def use_token_key(self) -> bytes:
        if self._token_key is None:
            self._token_key = bytes(
                self._conn.execute(
                    "SELECT key FROM daemon_keys WHERE name = 'use_token'"
                ).fetchone()[0]
            )
        return self._token_key

    def token_outcome(self, nonce: str) -> str | None:
        row = self._conn.execute(
            "SELECT outcome FROM memory_uses WHERE token = ?", (nonce,)
        ).fetchone()
        return None if row is None else row[0]

    def calibrations(self, workspace: str, uid: int) -> dict[str, CalibrationRow]:
        return {
            str(r[0]): CalibrationRow(
                str(r[0]), int(r[1]), float(r[2]), float(r[3]), float(r[4]), int(r[5]), r[6]
            )
            for r in self._conn.execute(
                "SELECT workspace, uid, bias, lexical, semantic, updates, updated_at"
                " FROM relevance_calibrations WHERE uid = ? AND workspace IN (?, '')",
                (uid, workspace),
            )
        }


def current_facts(conn: Db, key: str, origin: str | None, now: float) -> list[Fact]:
    return [
        Fact(*row)
        for row in conn.execute(
            "SELECT r.rowid, r.id, m.authority, r.ts, r.created_at, r.text, m.subject,"
            " m.distortion_tolerance, r.visibility FROM memory_meta m"
            " JOIN records r ON r.rowid = m.rowid"
            " WHERE m.subject_key = ? AND m.origin IS NOT DISTINCT FROM ? AND m.kind = 'fact'"
            " AND m.superseded_by IS NULL AND r.tombstoned_at IS NULL"
            " AND (r.expires_at IS NULL OR r.expires_at > ?) AND r.eligibility = 'eligible'"
            " ORDER BY r.created_at, r.rowid",
            (key, origin, now),
        )
    ]


# --------------------------------------------------------------------------- writes


def _event(conn: Db, now: float, who: Principal, record_id: str, event: str) -> None:
    conn.execute(
        "INSERT INTO memory_events (ts, session, agent, record_id, event) VALUES (?, ?, ?, ?, ?)",
        (now, who.session, who.agent, record_id, event),
    )


def _require_memories(conn: Db, ids: Sequence[str], what: str) -> None:
    for memory_id in ids:
        if (
            conn.execute(
                "SELECT 1 FROM records WHERE id = ? AND kind = 'memory' AND tombstoned_at IS NULL",
                (memory_id,),
            ).fetchone()
            is None
        ):
            raise RecallError(
                "not_found", f"{what} names {memory_id}, which is not a stored memory"
            )


# ``fresh``: the row was inserted in this job and has no labels, paths or links yet, so there
# is nothing to read or delete first (a store is a capture's hot path: statements count).


def _write_labels(
    conn: Db, rowid: int, kind: str, values: list[str], *, fresh: bool = False
) -> None:
    if not fresh:
        conn.execute("DELETE FROM memory_labels WHERE rowid = ? AND kind = ?", (rowid, kind))
    if values:
        conn.executemany(
            "INSERT INTO memory_labels (rowid, kind, value) VALUES (?, ?, ?)",
            [(rowid, kind, v) for v in _labels(values)],
        )


def hold(conn: Db, rowid: int, why: str) -> None:
    """Keep the memory out of the context hooks until a person verifies it (policy.HELD)."""
    conn.execute(
        "INSERT INTO memory_labels (rowid, kind, value) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        (rowid, HELD, why),
    )


def _write_paths(conn: Db, rowid: int, paths: dict[str, int], *, fresh: bool = False) -> None:
    """``paths`` (path -> anchored) replace the memory's own; those a person attested stay."""
    attested: set[str] = set()
    if not fresh:
        attested = {
            r[0]
            for r in conn.execute(
                "SELECT path FROM memory_paths WHERE rowid = ? AND anchored = 2", (rowid,)
            )
        }
        conn.execute("DELETE FROM memory_paths WHERE rowid = ? AND anchored < 2", (rowid,))
    if paths:
        conn.executemany(
            "INSERT INTO memory_paths (rowid, path, anchored) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            [(rowid, path, anchored) for path, anchored in paths.items() if path not in attested],
        )


def _write_depends(
    conn: Db, rowid: int, links: list[tuple[str, str | None]], *, fresh: bool = False
) -> None:
    if not fresh:
        conn.execute("DELETE FROM memory_links WHERE src = ? AND rel = 'depends_on'", (rowid,))
    if links:
        conn.executemany(
            "INSERT INTO memory_links (src, rel, dst_id, note) VALUES (?, 'depends_on', ?, ?)"
            " ON CONFLICT (src, rel, dst_id) DO UPDATE SET note = excluded.note",
            [(rowid, dst, note) for dst, note in links],
        )


class SqlMemoryWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def require_live(self, ids: Sequence[str], what: str) -> None:
        _require_memories(self._conn, ids, what)

    def find_duplicate(
        self, workspace: str, content_hash: bytes, besides: int | None = None
    ) -> str | None:
        row = self._conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'memory' AND content_hash = ?"
            " AND tombstoned_at IS NULL AND rowid IS DISTINCT FROM ?",
            (workspace, content_hash, besides),
        ).fetchone()
        return None if row is None else str(row[0])

    def insert(self, memory: MemoryInsert) -> int:
        conn = self._conn
        m = memory
        rowid = insert_record(conn, m.record)
        conn.execute(
            "INSERT INTO memory_meta (rowid, kind, subject, subject_key, authority,"
            " distortion_tolerance, origin, origin_repo, origin_commit, verified_commit,"
            " last_verified_at, writer_client, writer_model, trust_reasons)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rowid,
                m.memory_kind,
                m.subject,
                m.subject_key,
                m.authority,
                m.distortion_tolerance,
                m.origin,
                m.origin_repo,
                m.origin_commit,
                m.origin_commit,
                m.record.created_at,
                m.writer_client,
                m.writer_model,
                _json.encode(list(m.trust_reasons)).decode(),
            ),
        )
        for kind, values in m.labels.items():
            _write_labels(conn, rowid, kind, values, fresh=True)
        if m.held is not None:
            hold(conn, rowid, m.held)
        _write_paths(conn, rowid, m.paths, fresh=True)
        _write_depends(conn, rowid, m.depends_on, fresh=True)
        return rowid

    def note_supersedes(self, rowid: int, record_id: str, target: str) -> None:
        self._conn.execute(
            "INSERT INTO memory_links (src, rel, dst_id) VALUES (?, 'supersedes', ?)"
            " ON CONFLICT DO NOTHING",
            (rowid, target),
        )
        self._conn.execute(
            "UPDATE memory_meta SET superseded_by = ? WHERE rowid ="
            " (SELECT rowid FROM records WHERE id = ?)",
            (record_id, target),
        )

    def lock_facts(self, key: str, origin: str | None, now: float) -> list[Fact]:
        self._conn.lock("fact", key, origin or "")
        return current_facts(self._conn, key, origin, now)

    def supersede(self, rowid: int, by: str) -> None:
        self._conn.execute("UPDATE memory_meta SET superseded_by = ? WHERE rowid = ?", (by, rowid))

    def event(self, who: Principal, record_id: str, event: str, now: float) -> None:
        _event(self._conn, now, who, record_id, event)

    def target(self, memory_id: str) -> MemoryTarget:
        conn = self._conn
        # A memory bulk-loaded straight into records gets its metadata row on first change.
        conn.execute(
            "INSERT INTO memory_meta (rowid, origin, last_verified_at)"
            " SELECT rowid, workspace, created_at FROM records WHERE id = ? AND kind = 'memory'"
            " ON CONFLICT DO NOTHING",
            (memory_id,),
        )
        row = conn.execute(
            "SELECT r.rowid, r.text, r.source, r.workspace, m.kind, m.authority"
            " FROM records r JOIN memory_meta m ON m.rowid = r.rowid"
            " WHERE r.id = ? AND r.kind = 'memory' AND r.tombstoned_at IS NULL",
            (memory_id,),
        ).fetchone()
        if row is None:
            raise RecallError("not_found", f"no memory {memory_id}")
        rowid, text, source, workspace, kind, authority = row
        return MemoryTarget(rowid, text, source, workspace, kind, authority)

    def anchored_paths(self, rowid: int) -> list[str]:
        return [
            r[0]
            for r in self._conn.execute(
                "SELECT path FROM memory_paths WHERE rowid = ? AND anchored = 1", (rowid,)
            )
        ]

    def change(self, rowid: int, change: MemoryChange, head: str | None, now: float) -> None:
        conn = self._conn
        c = change
        if c.subject is not None:
            conn.execute(
                "UPDATE memory_meta SET subject = ?, subject_key = ? WHERE rowid = ?",
                (c.subject, c.subject_key, rowid),
            )
        if c.text is not None:
            # embed_state 0: the embedding actor re-embeds it and replaces the old vector.
            conn.execute(
                "UPDATE records SET text = ?, content_hash = ?, embed_state = 0 WHERE rowid = ?",
                (c.text, c.content_hash, rowid),
            )
        if c.source is not None:
            conn.execute("UPDATE records SET source = ? WHERE rowid = ?", (c.source, rowid))
        if c.held is not None:
            hold(conn, rowid, c.held)
        if c.authority is not None:
            conn.execute(
                "UPDATE memory_meta SET authority = ? WHERE rowid = ?", (c.authority, rowid)
            )
        if c.trust is not None:
            conn.execute(
                "UPDATE records SET trust = ?, eligibility = ? WHERE rowid = ?",
                (c.trust.trust, c.trust.eligibility, rowid),
            )
            conn.execute(
                "UPDATE memory_meta SET trust_reasons = ? WHERE rowid = ?",
                (_json.encode(list(c.trust.reasons)).decode(), rowid),
            )
        if c.tags is not None:
            conn.execute(
                "UPDATE records SET tags = ? WHERE rowid = ?",
                (_json.encode(_labels(c.tags)).decode(), rowid),
            )
        for kind, values in c.labels.items():
            _write_labels(conn, rowid, kind, values)
        if c.distortion_tolerance is not None:
            conn.execute(
                "UPDATE memory_meta SET distortion_tolerance = ? WHERE rowid = ?",
                (c.distortion_tolerance[0], rowid),
            )
        if c.depends_on is not None:
            _write_depends(conn, rowid, c.depends_on)
        if c.paths is not None:
            _write_paths(conn, rowid, c.paths)
        if c.expires_at is not None:
            conn.execute("UPDATE records SET expires_at = ? WHERE rowid = ?", (c.expires_at, rowid))
        conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
        conn.execute(
            "UPDATE memory_meta SET last_verified_at = ?,"
            " verified_commit = COALESCE(?, verified_commit) WHERE rowid = ?",
            (now, head, rowid),
        )

    def verify(
        self, who: Principal, memory_id: str, attested: Sequence[str], head: str | None, now: float
    ) -> float:
        """Refresh last_verified_at (and the commit drift base); ``attested`` paths become
        anchors. Its updated_at."""
        conn = self._conn
        rowid = self.target(memory_id).rowid
        conn.executemany(
            "INSERT INTO memory_paths (rowid, path, anchored) VALUES (?, ?, 2)"
            " ON CONFLICT (rowid, path) DO UPDATE SET anchored = 2",
            [(rowid, path) for path in attested],
        )
        conn.execute(
            "UPDATE memory_meta SET last_verified_at = ?, verified_commit = ? WHERE rowid = ?",
            (now, head, rowid),
        )
        if ADMIN in who.scopes:
            # A person's check (the admin token is the user's own, see domain.scopes): what
            # was held for it may now be injected.
            conn.execute("DELETE FROM memory_labels WHERE rowid = ? AND kind = ?", (rowid, HELD))
        _event(conn, now, who, memory_id, "verified")
        return float(
            conn.execute("SELECT updated_at FROM records WHERE rowid = ?", (rowid,)).fetchone()[0]
        )

    def record_uses(
        self,
        who: Principal,
        targets: Sequence[tuple[str, str | None]],
        outcome: str,
        note: str | None,
        now: float,
    ) -> list[str]:
        """Record ``outcome`` for each (memory id, token nonce); a token's outcome replaces an
        earlier one of the same token. The ids recorded (a memory forgotten since it was
        injected is skipped)."""
        conn = self._conn
        recorded = []
        for memory_id, nonce in dict(targets).items():
            row = conn.execute(
                "SELECT rowid FROM records WHERE id = ? AND kind = 'memory'", (memory_id,)
            ).fetchone()
            if row is None and outcome == "injected":
                continue  # forgotten since it was packed: nothing to account for
            if row is None:
                raise RecallError("not_found", f"no memory {memory_id}")
            conn.execute(
                "INSERT INTO memory_uses (rowid, outcome, ts, agent, session, token, note)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token) DO UPDATE SET"
                " outcome = excluded.outcome, ts = excluded.ts, note = excluded.note",
                (row[0], outcome, now, who.agent, who.session, nonce, note),
            )
            _event(conn, now, who, memory_id, f"use:{outcome}")
            recorded.append(memory_id)
        return recorded

    def save_calibration(self, row: CalibrationRow) -> None:
        # Update, else insert: in a team database the key has the member's role too (which
        # the column's default fills in), so no one statement names the conflict for both.
        values = (row.bias, row.lexical, row.semantic, row.updates, row.updated_at)
        changed = self._conn.execute(
            "UPDATE relevance_calibrations SET bias = ?, lexical = ?, semantic = ?,"
            " updates = ?, updated_at = ? WHERE workspace = ? AND uid = ?",
            (*values, row.workspace, row.uid),
        ).rowcount
        if not changed:
            self._conn.execute(
                "INSERT INTO relevance_calibrations"
                " (workspace, uid, bias, lexical, semantic, updates, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (row.workspace, row.uid, *values),
            )

    def clear_calibrations(self, uid: int, workspace: str | None) -> int:
        if workspace is None:
            cur = self._conn.execute("DELETE FROM relevance_calibrations WHERE uid = ?", (uid,))
        else:
            cur = self._conn.execute(
                "DELETE FROM relevance_calibrations WHERE uid = ? AND workspace = ?",
                (uid, workspace),
            )
        return cur.rowcount
