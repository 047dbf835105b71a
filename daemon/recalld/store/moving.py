"""Moving in: copy a local SQLite store into a team database (``recallctl migrate``).

It reads one engine's schema and writes the other's, so it sits above both: neither engine
imports the other.

Every record of every kind (tombstoned ones too: history and links stay explainable) and
all attached to it lands owned by the role the URL logs in as (``owner``'s default), with
its visibility. Rowids are new there: children follow the local rowid -> public id -> new
rowid map. All local reads are one read transaction: one instant of the store, while the
daemon goes on writing (WAL never blocks it; it only keeps the WAL from being reset).

Idempotent: records go in with ON CONFLICT DO NOTHING (their id, or the owner's dedup
index), their children only when this run inserted them, in the same transaction (one per
page), so a rerun, or one after a crash, adds nothing twice; links, lesson support, keys,
approvals and credentials go last, ON CONFLICT DO NOTHING. A record there under another id
(the same content, moved in from another machine of the same person) is kept once, and
what named the local copy names that one. Later local changes to a moved record do not
follow it: move in, then point the daemon at the database. The context hooks' log stays
behind: it is this machine's account of what its hooks injected, kept for its own page.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from .postgres.db import PgVector, connect
from .postgres.schema import MEMBER_ROLE, MIGRATIONS, VECTOR_DIM, schema_version
from .sqlite.schema import DB_NAME
from .sqlite.schema import MIGRATIONS as SQLITE_MIGRATIONS

__all__ = ["PAGE", "CopyReport", "copy_store"]

# Records per PostgreSQL transaction: large enough to amortise the round trips, small
# enough that a crash loses little work and no transaction holds many locks.
PAGE = 500
# Tables whose rows belong to one record by its rowid, copied with the records of a page.
_CHILDREN = (
    "memory_meta memory_labels memory_paths memory_uses episodes experiences experience_rollups"
).split()
# The owner's tables, not attached to a record's rowid: copied at the end.
_OWNED = ("idempotency", "workspace_approvals", "workspace_aliases", "agent_credentials")
# Columns PostgreSQL numbers itself (identities); everything else is copied as stored. The
# schema versions are checked on both sides, so both tables have the same columns.
_GENERATED = {"records": {"rowid"}, "memory_uses": {"id"}, "memory_events": {"id"}}


@dataclass
class CopyReport:
    """What one run did: records seen in the snapshot and what became of them."""

    role: str = ""  # the database role that owns the copied rows
    seen: int = 0
    copied: int = 0  # inserted by this run
    already: int = 0  # there before: an earlier run, or merged (below)
    merged: int = 0  # of those, the same content under another id: kept once
    rows: dict[str, int] = field(default_factory=dict)  # child rows copied, per table
    vectors_skipped: int = 0  # another model's size: the daemon embeds them again
    seconds: float = 0.0

    @property
    def per_s(self) -> float:
        return self.seen / self.seconds if self.seconds > 0 else 0.0


def copy_store(
    data_dir: Path, url: str, *, progress: Callable[[int], None] | None = None
) -> CopyReport:
    """Copy ``data_dir``'s store into the database at ``url``; ``progress`` gets the number
    of records seen after each page.

    Raises:
        RuntimeError: either schema is not the one this recalld has, or there is no store.
        psycopg.Error, sqlite3.Error: a database failed (what committed stays; run again).
    """
    started = time.monotonic()
    path = data_dir / DB_NAME
    if not path.exists():
        raise RuntimeError(f"no local store at {path}")
    # Read-only: moving in never changes the local store. isolation_level=None: the BEGIN
    # below is ours, and the snapshot starts at its first read.
    sq = sqlite3.connect(
        path.absolute().as_uri() + "?mode=ro", uri=True, isolation_level=None, timeout=10
    )
    try:
        sq.execute("BEGIN")
        local = int(sq.execute("PRAGMA user_version").fetchone()[0])
        if local != len(SQLITE_MIGRATIONS):
            raise RuntimeError(
                f"{path} is at schema version {local}, this recalld copies version"
                f" {len(SQLITE_MIGRATIONS)}: start this recalld on it once first"
            )
        # Nothing prepared on the server: the URL may be a pooler's in transaction mode
        # (PgBouncer before 1.21), where the next transaction may run on a server
        # connection that has another's statements or none. A one-off copy batched in
        # pages loses little by it.
        with connect(url, autocommit=True, prepare=False) as pg:
            remote = schema_version(pg)
            if remote != len(MIGRATIONS):
                raise RuntimeError(
                    f"the database is at schema version {remote}, this recalld needs"
                    f" {len(MIGRATIONS)}: run `recallctl db init --url ...` as its owner"
                )
            # The rows become the URL's role's: a role no daemon logs in as would own them.
            daemon_role = pg.execute(
                "SELECT NOT rolsuper AND pg_has_role(oid, %s, 'member') FROM pg_roles"
                " WHERE rolname = current_user",
                (MEMBER_ROLE,),
            ).fetchone()
            if not daemon_role or not daemon_role[0]:
                raise RuntimeError(
                    f"log in as the daemon's own role (a member of {MEMBER_ROLE}, not a"
                    " superuser): the copied rows are the role's"
                )
            mover = _Mover(sq, pg)
            mover.run(progress)
        sq.execute("COMMIT")
    finally:
        sq.close()
    mover.report.seconds = time.monotonic() - started
    return mover.report


class _Mover:
    def __init__(self, sq: sqlite3.Connection, pg: psycopg.Connection[Any]) -> None:
        self.sq, self.pg = sq, pg
        (role,) = pg.execute("SELECT current_user").fetchone() or ("",)
        self.report = CopyReport(role=str(role))
        self.ids: dict[int, str] = {}  # local rowid -> public id, every record seen
        self.rowids: dict[str, int] = {}  # public id -> rowid in PostgreSQL, of ours there
        self.merged: dict[str, str] = {}  # local id -> the id its content has there
        self.cols = {t: self._columns(t) for t in ("records", *_CHILDREN, "memory_events")}
        # The event log names records by public id (no index on it locally): read it once.
        self.events: dict[str, list[Sequence[Any]]] = {}
        cols = self.cols["memory_events"]
        rid = cols.index("record_id")
        for row in sq.execute(f"SELECT {', '.join(cols)} FROM memory_events ORDER BY id"):
            self.events.setdefault(row[rid], []).append(row)

    def _columns(self, table: str) -> list[str]:
        drop = _GENERATED.get(table, set())
        return [c[1] for c in self.sq.execute(f"PRAGMA table_info({table})") if c[1] not in drop]

    def run(self, progress: Callable[[int], None] | None) -> None:
        cols = ", ".join(self.cols["records"])
        after = -1
        while rows := self.sq.execute(
            f"SELECT rowid, {cols} FROM records WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, PAGE),
        ).fetchall():
            after = rows[-1][0]
            with self.pg.transaction():
                self._page(rows)
            self.report.seen += len(rows)
            if progress is not None:
                progress(self.report.seen)
        with self.pg.transaction():
            self._finish()

    def _page(self, rows: list[Any]) -> None:
        lo, hi, cols = rows[0][0], rows[-1][0], self.cols["records"]
        vectors = self.sq.execute(
            "SELECT rowid, model, vec FROM vectors WHERE rowid BETWEEN ? AND ?", (lo, hi)
        ).fetchall()
        # Another model's size cannot go in the database's column: the daemon embeds the
        # record again instead.
        resize = {r for r, _, blob in vectors if len(blob) != VECTOR_DIM * 4}
        embed = cols.index("embed_state")
        params = []
        for rowid, *values in rows:
            self.ids[rowid] = values[0]
            if rowid in resize:
                values[embed] = 0
            params.append(values)
        with self.pg.cursor() as cur:
            cur.executemany(
                f"INSERT INTO records ({', '.join(cols)}) VALUES ({_marks(cols)})"
                " ON CONFLICT DO NOTHING RETURNING rowid, id",
                params,
                returning=True,
            )
            inserted: dict[str, int] = {}
            while True:  # one result per row: empty when it was there already
                inserted.update((rid, rowid) for rowid, rid in cur.fetchall())
                if not cur.nextset():
                    break
        self.rowids.update(inserted)
        self.report.copied += len(inserted)
        self.report.already += len(rows) - len(inserted)
        self._place([r for r in rows if r[1] not in inserted])

        new = {r[0]: inserted[r[1]] for r in rows if r[1] in inserted}  # local -> new rowid
        for table in _CHILDREN:
            tcols = self.cols[table]
            key = tcols.index("rowid")
            found = self.sq.execute(
                f"SELECT {', '.join(tcols)} FROM {table} WHERE rowid BETWEEN ? AND ?", (lo, hi)
            )
            moved = [(*r[:key], new[r[key]], *r[key + 1 :]) for r in found if r[key] in new]
            self._insert(table, tcols, moved)
        vecs = [
            (new[r], model, PgVector(np.frombuffer(blob, dtype=np.float32)))
            for r, model, blob in vectors
            if r in new and r not in resize
        ]
        self._insert("vectors", ["rowid", "model", "vec"], vecs)
        self.report.vectors_skipped += len(resize & new.keys())
        events = [e for rid in inserted for e in self.events.get(rid, ())]
        self._insert("memory_events", self.cols["memory_events"], events)

    def _place(self, rows: list[Any]) -> None:
        """Where the records this run did not insert are: ours by id (an earlier run), or
        the same live content under another id (merged); else another role's row, left."""
        if not rows:
            return
        ids = [r[1] for r in rows]
        self.rowids.update(
            (rid, rowid)
            for rid, rowid in self.pg.execute(
                "SELECT id, rowid FROM records WHERE id = ANY(%s)", (ids,)
            )
        )
        cols = self.cols["records"]
        ws, kind, digest, dead = (
            1 + cols.index(c) for c in ("workspace", "kind", "content_hash", "tombstoned_at")
        )
        for r in rows:
            if r[1] in self.rowids or r[dead] is not None:
                continue
            there = self.pg.execute(
                "SELECT id, rowid FROM records WHERE owner = current_user AND workspace = %s"
                " AND kind = %s AND content_hash = %s AND tombstoned_at IS NULL",
                (r[ws], r[kind], r[digest]),
            ).fetchone()
            if there is not None:
                self.merged[r[1]] = there[0]
                self.rowids[there[0]] = there[1]
                self.report.merged += 1

    def _rowid(self, local: int) -> int | None:
        """The PostgreSQL rowid of the record with local rowid ``local`` (or its merge)."""
        rid = self.ids.get(local)
        return None if rid is None else self.rowids.get(self.merged.get(rid, rid))

    def _finish(self) -> None:
        links = []
        for src, rel, dst, note in self.sq.execute("SELECT * FROM memory_links"):
            if (at := self._rowid(src)) is not None:
                links.append((at, rel, self.merged.get(dst, dst), note))
        self._insert("memory_links", ["src", "rel", "dst_id", "note"], links)
        support = []
        for lesson, experience, created_at in self.sq.execute(
            "SELECT lesson_rowid, experience_rowid, created_at FROM lesson_support"
        ):
            pair = (self._rowid(lesson), self._rowid(experience))
            if None not in pair:
                support.append((*pair, created_at))
        self._insert("lesson_support", ["lesson_rowid", "experience_rowid", "created_at"], support)
        for table in _OWNED:
            cols = self._columns(table)
            found = self.sq.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
            if table == "idempotency":
                at = cols.index("record_id")
                found = [(*r[:at], self.merged.get(r[at], r[at]), *r[at + 1 :]) for r in found]
            self._insert(table, cols, found)
        # Copied rows that name a merged record by public id name its survivor instead (ids
        # are unique, so only rows this tool copied can hold a local id that never landed).
        pairs = [(new, old) for old, new in self.merged.items()]
        with self.pg.cursor() as cur:
            for table, col in (("memory_meta", "superseded_by"), ("episodes", "prev_id")):
                if pairs:
                    cur.executemany(f"UPDATE {table} SET {col} = %s WHERE {col} = %s", pairs)

    def _insert(self, table: str, cols: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with self.pg.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({_marks(cols)})"
                " ON CONFLICT DO NOTHING",
                rows,
            )
            if cur.rowcount > 0:
                self.report.rows[table] = self.report.rows.get(table, 0) + cur.rowcount


def _marks(cols: Sequence[str]) -> str:
    return ", ".join(["%s"] * len(cols))
