"""What recallctl's operations read and write: export pages and their import, the doctor's
figures, workspace approvals and agent credentials.

An export row (``protocol.ExportedRecord``) is the record as its tables hold it: the
statements that read and write it are built from the row's fields, table by table
(:data:`TABLES`), and what of a table is not in the row is named in :data:`NOT_EXPORTED`
with why (``tests/ops/test_export_schema.py`` checks both against the live schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
from recall_client import protocol as p

from ...domain.dedup import (
    episode_digest,
    experience_digest,
    lesson_digest,
    memory_digest,
    rollup_digest,
)
from ...domain.policy import HELD, IMPORTED, confidence, subject_key
from ...errors import RecallError
from ..port import AliasRow, ApprovalRow, CredentialRow, DoctorFigures
from . import workspaces
from .db import Db
from .experiences import lesson_stats
from .filters import marks
from .records import EMBEDDING_BACKLOG

__all__ = [
    "INSTALL_TABLES",
    "NOT_EXPORTED",
    "TABLES",
    "SqlOperationReads",
    "SqlOperationWrites",
    "columns",
    "digest",
]

_json = msgspec.json.Encoder()
_strings = msgspec.json.Decoder(list[str])

# Each table an export row carries, the struct whose fields are its columns, and the
# struct's fields that are no column of it (rows of other tables, nested).
TABLES: dict[str, tuple[type[msgspec.Struct], frozenset[str]]] = {
    "records": (p.ExportedRecord, frozenset({"memory", "episode", "experience", "lesson"})),
    "memory_meta": (
        p.ExportedMemory,
        frozenset({"scopes", "bands", "episodes", "links", "paths", "uses", "events"}),
    ),
    "memory_links": (p.ExportedLink, frozenset()),
    "memory_paths": (p.ExportedPath, frozenset()),
    "memory_uses": (p.ExportedUse, frozenset()),
    "memory_events": (p.ExportedEvent, frozenset()),
    "episodes": (p.ExportedEpisode, frozenset()),
    "experiences": (p.ExportedExperience, frozenset({"rollup", "lessons"})),
    "experience_rollups": (p.ExportedRollup, frozenset()),
    "lesson_support": (p.ExportedLessonLink, frozenset({"id"})),
}

_ROWID = "the install's own numbering: rows name records by public id"
_CARRIER = "the record whose row carries it"
# What of each table an export row does not carry, and why. A table not named here nor in
# TABLES is the install's own, not a record's: each is listed with why.
NOT_EXPORTED: dict[str, dict[str, str]] = {
    "records": {
        "rowid": _ROWID,
        "uid": "the OS user the daemon serves: the importing connection's",
        "embed_state": "vectors are the install's model's: the import is embedded again",
        "content_hash": "made from the record by its kind's rule (domain.dedup)",
        # PostgreSQL's alone:
        "owner": "the database role that writes the import",
        "tsv": "the full-text index, made from text",
        "doclen": "the full-text index, made from text",
    },
    "memory_meta": {"rowid": _CARRIER, "subject_key": "made from subject (policy.subject_key)"},
    "memory_labels": {
        "rowid": _CARRIER,
        "kind": "carried as the memory's scopes, bands and episodes",
        "value": "carried as the memory's scopes, bands and episodes",
    },
    "memory_links": {"src": _CARRIER},
    "memory_paths": {"rowid": _CARRIER},
    "memory_uses": {
        "id": _ROWID,
        "rowid": _CARRIER,
        "token": "a use token's nonce: tokens are signed with the install's own key",
    },
    "memory_events": {"id": _ROWID, "record_id": _CARRIER, "owner": "the importing role"},
    "episodes": {"rowid": _CARRIER},
    "experiences": {"rowid": _CARRIER},
    "experience_rollups": {"rowid": _CARRIER, "owner": "the importing role"},
    "lesson_support": {
        "lesson_rowid": "carried by both ends as the other end's id",
        "experience_rowid": "carried by both ends as the other end's id",
    },
}
# Tables that are the install's, not any record's.
INSTALL_TABLES = {
    "vectors": "made again by the install's model",
    "vector_changes": "the vector index snapshot's bookkeeping",
    "idempotency": "a client's retry keys against this install",
    "workspace_approvals": "the install's configuration (recallctl workspace)",
    "workspace_aliases": "the paths of this install's checkouts",
    "workspace_rekey": "the schema's bookkeeping (re-keying by identity)",
    "agent_credentials": "the install's secrets (recallctl agent)",
    "daemon_keys": "the install's secrets (the use-token key)",
    "schema_migrations": "the schema's version",
    # What this install's hooks gave the hosts of this machine: their session ids, and items
    # named by this store's ids, which an import gives anew.
    "context_injections": "the log of the blocks this install's hooks injected",
    "context_items": "the log of the blocks this install's hooks injected",
    # Learned from outcomes of this install's use tokens; an import starts from the prior.
    "relevance_calibrations": "what this install's outcomes taught its ranking",
}
# Columns kept as JSON arrays of strings; and as integers for a bool.
_JSON_COLUMNS = frozenset({"tags", "trust_reasons", "files", "given"})
_BOOL_COLUMNS = frozenset({"blocked"})


def columns(table: str) -> list[tuple[str, str]]:
    """(column, the row's wire name) of each of ``table``'s columns an export row carries."""
    cls, nested = TABLES[table]
    return [(f.name, f.encode_name) for f in msgspec.structs.fields(cls) if f.name not in nested]


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


def digest(row: p.ExportedRecord) -> bytes:
    """The content hash of ``row`` by its kind's rule."""
    if isinstance(row.episode, p.ExportedEpisode):
        e = row.episode
        return episode_digest(row.agent, row.session, row.ts, e.tool, e.status, row.text)
    if isinstance(row.experience, p.ExportedExperience):
        x = row.experience
        if x.rollup is not None:
            return rollup_digest(x.rollup.session)
        return experience_digest(row.text, x.status, x.strategy, row.session)
    if row.kind == "lesson":
        return lesson_digest(row.text)
    return memory_digest(row.text)


class _Rows:
    """Reads one table's exported columns as wire dicts, grouped by a key column."""

    def __init__(self, conn: Db, table: str) -> None:
        self._conn = conn
        self._table = table
        self._cols = columns(table)

    def by(self, key: str, keys: Sequence[Any], tail: str = "") -> dict[Any, list[dict[str, Any]]]:
        out: dict[Any, list[dict[str, Any]]] = {k: [] for k in keys}
        if not keys:
            return out
        names = ", ".join(c for c, _ in self._cols)
        for key_value, *values in self._conn.execute(
            f"SELECT {key}, {names} FROM {self._table} WHERE {key} IN ({marks(keys)}){tail}",
            list(keys),
        ):
            out[key_value].append(
                {wire: _value(c, v) for (c, wire), v in zip(self._cols, values, strict=True)}
            )
        return out


class SqlOperationReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def export_page(
        self,
        after: int,
        limit: int,
        workspace: str | None,
        kind: str | None,
        page_bytes: int,
    ) -> p.ExportPage:
        """One page of records in rowid order, forgotten and expired ones too (the store
        keeps them: links to them stay explainable, and they count in the text index's
        statistics), each with the rows attached to it; at most about ``page_bytes``
        encoded, and at least one record."""
        conn = self._conn
        where = "TRUE"
        params: list[object] = []
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
        # A page is read in chunks until it is full: a record's attached rows (its uses)
        # count towards the page's size too.
        records: list[p.ExportedRecord] = []
        size = 0
        last = after
        full = False
        while not full:
            chunk = _Rows(conn, "records").by(
                "rowid",
                [
                    r[0]
                    for r in conn.execute(
                        f"SELECT rowid FROM records WHERE rowid > ? AND {where}"
                        " ORDER BY rowid LIMIT ?",
                        (last, *params, min(limit - len(records), 100)),
                    )
                ],
            )
            if not chunk:
                break
            for rowid, row in self._attach({k: v[0] for k, v in chunk.items()}).items():
                record = msgspec.convert(row, p.ExportedRecord)
                records.append(record)
                last = rowid
                size += len(msgspec.msgpack.encode(record))
                if size >= page_bytes or len(records) == limit:
                    full = True
                    break
        return p.ExportPage(records=records, next_after=last if full else None, total=total)

    def _attach(self, rows: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Give each record row (rowid order) the part of its kind."""
        conn = self._conn
        of = {
            kind: [rowid for rowid, r in rows.items() if r["kind"] == kind]
            for kind in ("memory", "episode", "experience", "lesson")
        }
        memories = of["memory"]
        meta = _Rows(conn, "memory_meta").by("rowid", memories)
        labels: dict[int, dict[str, list[str]]] = {r: {} for r in memories}
        if memories:
            for rowid, kind, value in conn.execute(
                f"SELECT rowid, kind, value FROM memory_labels WHERE rowid IN ({marks(memories)})"
                " AND kind != ? ORDER BY rowid, kind, value",
                [*memories, HELD],
            ):
                labels[rowid].setdefault(f"{kind}s", []).append(value)
        links = _Rows(conn, "memory_links").by("src", memories, " ORDER BY src, rel, dst_id")
        paths = _Rows(conn, "memory_paths").by("rowid", memories, " ORDER BY rowid, path")
        uses = _Rows(conn, "memory_uses").by("rowid", memories, " ORDER BY rowid, ts, id")
        ids = {rows[r]["id"]: r for r in memories}
        events = _Rows(conn, "memory_events").by("record_id", list(ids), " ORDER BY id")
        for rowid in memories:
            # A memory bulk-loaded straight into records has no metadata row: an entry of
            # its workspace, verified when it was created (as the readers take it).
            part = (meta[rowid] or [{"origin": rows[rowid]["workspace"]}])[0]
            part.setdefault("last_verified_at", rows[rowid]["created_at"])
            part.update(labels[rowid])
            part.update(links=links[rowid], paths=paths[rowid], uses=uses[rowid])
            part["events"] = events[rows[rowid]["id"]]
            rows[rowid]["memory"] = part
        episodes = _Rows(conn, "episodes").by("rowid", of["episode"])
        for rowid in of["episode"]:
            rows[rowid]["episode"] = episodes[rowid][0]
        self._attach_experiences(rows, of["experience"], of["lesson"])
        return rows

    def _attach_experiences(
        self, rows: dict[int, dict[str, Any]], experiences: list[int], lessons: list[int]
    ) -> None:
        conn = self._conn
        found = _Rows(conn, "experiences").by("rowid", experiences)
        rollups = _Rows(conn, "experience_rollups").by("rowid", experiences)
        links: dict[int, list[dict[str, Any]]] = {r: [] for r in [*experiences, *lessons]}
        for mine, column, other in (
            (experiences, "experience_rowid", "lesson_rowid"),
            (lessons, "lesson_rowid", "experience_rowid"),
        ):
            if not mine:
                continue
            for rowid, other_id, created_at in conn.execute(
                f"SELECT ls.{column}, x.id, ls.created_at FROM lesson_support ls"
                f" JOIN records x ON x.rowid = ls.{other}"
                f" WHERE ls.{column} IN ({marks(mine)}) ORDER BY ls.{column}, x.rowid",
                mine,
            ):
                links[rowid].append({"id": other_id, "created_at": created_at})
        for rowid in experiences:
            part = found[rowid][0]
            part["rollup"] = rollups[rowid][0] if rollups[rowid] else None
            part["lessons"] = links[rowid]
            rows[rowid]["experience"] = part
        stats = lesson_stats(conn, lessons)
        for rowid in lessons:
            support, conf = stats.get(rowid, (0, confidence(0, 0, 0)))
            rows[rowid]["lesson"] = {
                "support": support,
                "confidence": conf,
                "experiences": links[rowid],
            }

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

    def import_records(
        self, rows: Sequence[p.ExportedRecord], uid: int
    ) -> tuple[list[p.ImportOutcome], list[int]]:
        """Store exported records again as they were; the outcome of each row (see
        ``protocol.Imported``) and the rowids written.

        A row whose id is there already, or whose live content is (under another id), is
        left alone. Lesson support is linked by whichever end comes second."""
        outcomes: list[p.ImportOutcome] = []
        written: list[int] = []
        for i, row in enumerate(rows):
            outcome = self._present(row)
            if outcome is None:
                rowid = self._insert(row, uid)
                if rowid is None:
                    # The id is another role's record, hidden by row-level security: the
                    # importer learns no more than its own export told it.
                    raise RecallError(
                        "invalid_request",
                        f"records[{i}]: its id {row.id} is held by a record this database"
                        " role cannot see (another person's, in a shared database)",
                    )
                written.append(rowid)
                outcome = "new"
            outcomes.append(outcome)
        return outcomes, written

    def _present(self, row: p.ExportedRecord) -> p.ImportOutcome | None:
        conn = self._conn
        if conn.execute("SELECT 1 FROM records WHERE id = ?", (row.id,)).fetchone():
            return "present"
        # The dedup index holds live records only.
        if (
            row.tombstoned_at is None
            and conn.execute(
                "SELECT 1 FROM records WHERE workspace = ? AND kind = ? AND content_hash = ?"
                " AND tombstoned_at IS NULL",
                (row.workspace, row.kind, digest(row)),
            ).fetchone()
        ):
            return "duplicate"
        # A session is rolled up into one experience, forgotten or not: it names it.
        rollup = row.experience.rollup if isinstance(row.experience, p.ExportedExperience) else None
        if (
            rollup is not None
            and conn.execute(
                "SELECT 1 FROM experience_rollups WHERE workspace = ? AND session = ?",
                (rollup.workspace, rollup.session),
            ).fetchone()
        ):
            return "duplicate"
        return None

    def _insert_row(self, table: str, part: msgspec.Struct, **keys: Any) -> None:
        """One row of ``table``; the same row twice (a row's list may repeat an item) once."""
        cols = columns(table)
        names = [*keys, *(c for c, _ in cols)]
        values = [*keys.values(), *(_stored(c, getattr(part, c)) for c, _ in cols)]
        self._conn.execute(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks(names)})"
            " ON CONFLICT DO NOTHING",
            values,
        )

    def _insert(self, row: p.ExportedRecord, uid: int) -> int | None:
        conn = self._conn
        cols = columns("records")
        names = ["uid", "content_hash", *(c for c, _ in cols)]
        values = [uid, digest(row), *(_stored(c, getattr(row, c)) for c, _ in cols)]
        rowid = conn.insert_record_if_free(
            f"INSERT INTO records ({', '.join(names)}) VALUES ({marks(names)})"
            " ON CONFLICT (id) DO NOTHING",
            values,
            row.text,
        )
        if rowid is None:
            return None
        if row.kind == "memory":
            memory = row.memory
            if not isinstance(memory, p.ExportedMemory):
                # As the readers take a memory without its metadata row (see _attach).
                memory = p.ExportedMemory(origin=row.workspace, last_verified_at=row.created_at)
            self._insert_memory(rowid, row.id, memory)
        elif isinstance(row.episode, p.ExportedEpisode):
            self._insert_row("episodes", row.episode, rowid=rowid)
        elif isinstance(row.experience, p.ExportedExperience):
            self._insert_row("experiences", row.experience, rowid=rowid)
            if row.experience.rollup is not None:
                self._insert_row("experience_rollups", row.experience.rollup, rowid=rowid)
            self._link(rowid, row.experience.lessons, lesson_end=False)
        elif isinstance(row.lesson, p.ExportedLesson):
            self._link(rowid, row.lesson.experiences, lesson_end=True)
        return rowid

    def _insert_memory(self, rowid: int, record_id: str, memory: p.ExportedMemory) -> None:
        conn = self._conn
        self._insert_row(
            "memory_meta",
            memory,
            rowid=rowid,
            subject_key=subject_key(memory.subject) if memory.subject is not None else None,
        )
        labels = [
            (rowid, kind, value)
            for kind, values in (
                ("scope", memory.scopes),
                ("band", memory.bands),
                ("episode", memory.episodes),
            )
            for value in dict.fromkeys(values)
        ]
        # Nobody here wrote it: held from the context hooks until a person verifies it (an
        # export never carries the label, so no file can say it was checked).
        labels.append((rowid, HELD, IMPORTED))
        conn.executemany(
            "INSERT INTO memory_labels (rowid, kind, value) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            labels,
        )
        for table, parts, key in (
            ("memory_links", memory.links, "src"),
            ("memory_paths", memory.paths, "rowid"),
            ("memory_uses", memory.uses, "rowid"),
        ):
            for part in parts:
                self._insert_row(table, part, **{key: rowid})
        for event in memory.events:
            self._insert_row("memory_events", event, record_id=record_id)

    def _link(self, rowid: int, links: Sequence[p.ExportedLessonLink], *, lesson_end: bool) -> None:
        """Support links between ``rowid`` and the records ``links`` name that are here
        already (the other end links those that come later)."""
        kind = "experience" if lesson_end else "lesson"
        for link in links:
            other = self._conn.execute(
                "SELECT rowid FROM records WHERE id = ? AND kind = ?", (link.id, kind)
            ).fetchone()
            if other is None:
                continue
            pair = (rowid, other[0]) if lesson_end else (other[0], rowid)
            self._conn.execute(
                "INSERT INTO lesson_support (lesson_rowid, experience_rowid, created_at)"
                " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (*pair, link.created_at),
            )

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
