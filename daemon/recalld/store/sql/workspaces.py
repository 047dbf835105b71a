"""Workspaces by identity: the re-keying of path-keyed rows, and the paths (local aliases) a
workspace was seen at. See recalld.domain.workspace_identity for what an identity is.

Re-keying runs per path, one transaction each, so a start interrupted half way resumes: a
path already done has its alias and no rows left; the others are still keyed as they were.
Only this install's own rows move (a shared database's other members re-key theirs, from
their own checkouts).
"""

from __future__ import annotations

from ..port import AliasRow
from .db import Db

__all__ = [
    "aliases",
    "note_alias",
    "reidentify",
    "reidentify_pending",
    "rekey",
    "rekey_done",
    "rekey_pending",
    "workspace_records",
]


def rekey_pending(conn: Db) -> list[str]:
    if conn.execute("SELECT count(*) FROM workspace_rekey").fetchone()[0] == 0:
        return []
    rows = conn.execute(
        "SELECT DISTINCT workspace FROM records WHERE workspace LIKE '/%'"
        f" AND {conn.owned('records')}"
        " AND NOT EXISTS (SELECT 1 FROM workspace_aliases a WHERE a.path = records.workspace)"
        " UNION SELECT workspace FROM workspace_approvals w WHERE workspace LIKE '/%'"
        " AND NOT EXISTS (SELECT 1 FROM workspace_aliases a WHERE a.path = w.workspace)"
    ).fetchall()
    return sorted(r[0] for r in rows)


def reidentify_pending(conn: Db) -> dict[str, list[str]]:
    if conn.execute("SELECT count(*) FROM workspace_rekey").fetchone()[0] == 0:
        return {}
    pending: dict[str, list[str]] = {}
    for workspace, path in conn.execute(
        "SELECT workspace, path FROM workspace_aliases WHERE workspace NOT LIKE '/%'"
        " AND workspace NOT LIKE 'git-root:%' ORDER BY workspace, path"
    ):
        pending.setdefault(workspace, []).append(path)
    return pending


def rekey(conn: Db, path: str, workspace: str, now: float) -> int:
    moved = _move(conn, path, workspace, now) if workspace != path else 0
    note_alias(conn, path, workspace, now)
    return moved


def reidentify(conn: Db, old: str, new: str, paths: list[str], now: float) -> int:
    moved = _move(conn, old, new, now)
    for path in paths:
        note_alias(conn, path, new, now)
    return moved


def _move(conn: Db, old: str, new: str, now: float) -> int:
    """This install's rows keyed by ``old`` (a path, or an identity as an earlier schema
    derived it) moved to ``new``; how many records moved."""
    own = conn.owned("records")
    # One live copy of a content per workspace: a checkout's record whose content the
    # identity already holds (another checkout stored it too) is kept as a tombstone.
    conn.execute(
        "UPDATE records SET tombstoned_at = ? WHERE workspace = ? AND tombstoned_at IS NULL"
        f" AND {own} AND EXISTS (SELECT 1 FROM records o WHERE o.workspace = ?"
        " AND o.kind = records.kind AND o.content_hash = records.content_hash"
        " AND o.tombstoned_at IS NULL)",
        (now, old, new),
    )
    moved = conn.execute(
        f"UPDATE records SET workspace = ? WHERE workspace = ? AND {own}", (new, old)
    ).rowcount
    conn.execute(
        "UPDATE memory_meta SET origin = ? WHERE origin = ? AND rowid IN"
        f" (SELECT rowid FROM records WHERE workspace = ? AND {own})",
        (new, old, new),
    )
    conn.execute(
        "UPDATE experience_rollups SET workspace = ? WHERE workspace = ? AND NOT EXISTS"
        " (SELECT 1 FROM experience_rollups o WHERE o.workspace = ?"
        " AND o.session = experience_rollups.session)",
        (new, old, new),
    )
    conn.execute(
        "INSERT INTO workspace_approvals (workspace, approved_at, approved_by)"
        " SELECT ?, approved_at, approved_by FROM workspace_approvals WHERE workspace = ?"
        " ON CONFLICT DO NOTHING",
        (new, old),
    )
    conn.execute("DELETE FROM workspace_approvals WHERE workspace = ?", (old,))
    return moved


def rekey_done(conn: Db) -> None:
    conn.execute("DELETE FROM workspace_rekey")


def note_alias(conn: Db, path: str, workspace: str, now: float) -> None:
    # Replace, not upsert: in a shared database the key is the owner's and the path.
    conn.execute("DELETE FROM workspace_aliases WHERE path = ?", (path,))
    conn.execute(
        "INSERT INTO workspace_aliases (path, workspace, seen_at) VALUES (?, ?, ?)",
        (path, workspace, now),
    )


def aliases(conn: Db) -> list[AliasRow]:
    return [
        AliasRow(path, workspace, seen_at)
        for path, workspace, seen_at in conn.execute(
            "SELECT path, workspace, seen_at FROM workspace_aliases ORDER BY workspace, path"
        )
    ]


def workspace_records(conn: Db) -> dict[str, int]:
    return {
        workspace: int(count)
        for workspace, count in conn.execute(
            "SELECT workspace, count(*) FROM records WHERE tombstoned_at IS NULL GROUP BY workspace"
        )
    }
